"""Segment models through the CTranslate2 engine: ``docctx-export ctranslate2`` of a
``doc2doc_transformer`` (a plain Transformer over segments; the probe's trained model,
probe_fixtures.py), decoded by ``--engine ctranslate2`` in the segments the fairseq path packs.
CTranslate2 searches without the model's sentence-count and length-window rules; the task checks
them on each decoded segment and decodes a segment that breaks one again sentence by sentence
(with CTranslate2), counted and reported as on the fairseq path. ``g_transformer`` does not
export (one line)."""
import json
from pathlib import Path

import pytest
import torch

from conftest import ct2_export, docids_documents, run_in_process
from fairseq_docctx.cli.export import cli_main as export_main
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.hub import from_exported, from_pretrained
from fairseq_docctx.inference.ctranslate2 import ExportError
from fairseq_docctx.inference.ctranslate2.exportable import check_segments, parameters_not_exported
from fairseq_docctx.inference.ctranslate2.generator import CTranslate2Generator
from fairseq_docctx.tasks.segment_decoding import SEGMENT_SENTENCES

pytest.importorskip("ctranslate2")

#: the first test documents of the probe translated here (173 sentences, 32 segments of the
#: probe model's 64 tokens)
DOCS = 30
#: docctx-translate's line of a segment model's fallbacks
LINE = ("docctx-translate: {} of {} segments decoded again sentence by sentence (misaligned: {count} sentence "
        "count, {empty} empty sentence, {window} outside the length window)")


@pytest.fixture(scope="module")
def doc2doc(probe, doc2doc_model, tmp_path_factory):
    """The probe's doc2doc_transformer, its float32 export and the first DOCS test documents."""
    out = ct2_export(doc2doc_model["checkpoint"], probe["data_bin"], tmp_path_factory.mktemp("ct2_seg") / "d2d")
    return doc2doc_model["checkpoint"], out, probe["data_bin"], docids_documents(Path(probe["text"]) / "test.src")[:DOCS]


def _flat(docs):
    return [t for d in docs for t in d]


class _Spy:
    """The sentences (corpus ids of the hub's call) that the task decoded again sentence by
    sentence, read from the generator's calls: a call with segments, then (when some are
    misaligned) a call with the positions of their sentences among the segments' sentences."""

    def __init__(self, monkeypatch):
        self.fallen, self._last = set(), None
        generate = CTranslate2Generator.generate

        def spy(gen, models, sample, **kw):
            if SEGMENT_SENTENCES in sample:
                self._last = [i for g in sample[SEGMENT_SENTENCES] for i in g.tolist()]
            else:
                self.fallen |= {self._last[k] for k in sample["id"].tolist()}
            return generate(gen, models, sample, **kw)

        monkeypatch.setattr(CTranslate2Generator, "generate", spy)


def test_doc2doc_exports_as_a_segment_model(doc2doc):
    ckpt, folder, data, _ = doc2doc
    record = json.loads((folder / "docctx-export.json").read_text())
    assert record["model"] == "doc2doc_transformer" and record["task"]["doc_mode"] == "segments"
    assert record["segments"] == {"max_segment_tokens": 64, "segment_packing": "g-transformer", "constrained": True}
    # a plain Transformer: every weight of the model is one the export writes
    model = from_pretrained(str(ckpt), data=data).models[0]
    assert type(model).__name__ == "Doc2DocTransformerModel" and parameters_not_exported(model) == []
    assert len(list(model.named_parameters())) > 10


def test_without_the_rules_ctranslate2_gives_fairseqs_segments_and_fallbacks(doc2doc):
    """--no-sentence-count-constraint: fairseq's search is the plain Transformer's too, so the
    same segments, the same misaligned ones and the same sentence-by-sentence decodings
    (beam 4, float32)."""
    ckpt, folder, data, docs = doc2doc
    fs = from_pretrained(str(ckpt), data=data, no_sentence_count_constraint=True)
    ct = from_exported(folder, no_sentence_count_constraint=True)
    out = {name: hub.translate_documents(docs, beam=4) for name, hub in (("fairseq", fs), ("ct2", ct))}
    assert out["ct2"] == out["fairseq"]
    assert ct.segment_report == fs.segment_report and ct.segment_report[0] > 0, ct.segment_report


def test_ctranslate2_gives_fairseqs_segments_where_the_rules_did_not_act(doc2doc, monkeypatch):
    """With the model's rules (the default), greedy search: every segment CTranslate2 decodes
    with as many sentences as its source, none empty and each within its window, is the
    fairseq path's translation (whose rules then changed nothing); every other one is decoded
    again sentence by sentence, each sentence as CTranslate2 translates it alone, and counted.
    Every sentence once, in order."""
    ckpt, folder, data, docs = doc2doc
    fs = from_pretrained(str(ckpt), data=data).translate_documents(docs, beam=1)
    hub = from_exported(folder)
    spy = _Spy(monkeypatch)
    ct = hub.translate_documents(docs, beam=1)
    assert [len(d) for d in ct] == [len(d) for d in docs]
    fallbacks, segments, why = hub.segment_report
    assert 0 < fallbacks < segments and sum(why.values()) == fallbacks
    flat_fs, flat_ct, sources = _flat(fs), _flat(ct), _flat(docs)
    fallen = sorted(spy.fallen)
    kept = [i for i in range(len(sources)) if i not in spy.fallen]
    assert [flat_ct[i] for i in kept] == [flat_fs[i] for i in kept]
    monkeypatch.undo()
    alone = _flat(hub.translate_documents([[sources[i]] for i in fallen], beam=1))
    assert [flat_ct[i] for i in fallen] == alone
    same = sum(a == b for a, b in zip(flat_ct, flat_fs))
    print(f"identical to the fairseq path: {same}/{len(sources)} sentences; {fallbacks} of {segments} segments "
          f"decoded again sentence by sentence ({why})")


def test_a_misaligned_segment_is_decoded_again_and_reported(doc2doc, tmp_path, capsys, monkeypatch):
    """A segment whose decoded separators are taken away (a wrong sentence count) is decoded
    again sentence by sentence with CTranslate2 and counted once more, on the line
    docctx-translate prints; the other sentences are unchanged."""
    ckpt, folder, data, docs = doc2doc
    docs = docs[:8]
    src, ids = tmp_path / "test.src", tmp_path / "test.docids"
    src.write_text("".join(f"{s}\n" for d in docs for s in d))
    ids.write_text("".join(f"d{i}\n" for i, d in enumerate(docs) for _ in d))

    def translate(name):
        out = tmp_path / f"{name}.txt"
        code, _, err = run_in_process(translate_main, [src, "--path", folder, "--engine", "ctranslate2", "--beam", 2,
                                                       "--quiet", "-o", out], capsys)
        assert code == 0, err
        lines = [ln for ln in err.splitlines() if "segments decoded again" in ln]
        assert len(lines) == 1, err
        return out.read_text().splitlines(), lines[0]

    before, line = translate("plain")
    hub = from_exported(folder)
    assert hub.translate_documents(docs, beam=2) == [before[sum(map(len, docs[:i])):][:len(d)]
                                                     for i, d in enumerate(docs)]
    f, n, why = hub.segment_report
    assert line == LINE.format(f, n, **why)

    generate, broken = CTranslate2Generator.generate, []
    sep = hub.tgt_dict.index("<sep>")

    def without_separators(gen, models, sample, **kw):
        hypos = generate(gen, models, sample, **kw)
        if SEGMENT_SENTENCES in sample:
            for row, group in enumerate(sample[SEGMENT_SENTENCES]):
                best = hypos[row][0]["tokens"]
                if not broken and len(group) > 1 and best[:-1].eq(sep).sum() == len(group) - 1:
                    hypos[row][0]["tokens"] = best[best.ne(sep)]
                    broken.extend(group.tolist())
        return hypos

    monkeypatch.setattr(CTranslate2Generator, "generate", without_separators)
    after, line = translate("broken")
    monkeypatch.undo()
    assert broken and line == LINE.format(f + 1, n, **dict(why, count=why["count"] + 1))
    changed = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    assert len(after) == len(before) and set(changed) <= set(broken)
    flat = _flat(docs)
    assert [after[i] for i in broken] == _flat(hub.translate_documents([[flat[i]] for i in broken], beam=2))


def test_g_transformer_is_refused_in_one_line(doc2doc, tmp_path, capsys):
    ckpt, _, data, _ = doc2doc
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    state["cfg"]["model"]._name = state["cfg"]["model"].arch = "g_transformer"
    bad = tmp_path / "g.pt"
    torch.save(state, bad)
    code, _, err = run_in_process(export_main, ["ctranslate2", bad, tmp_path / "out", "--data", data], capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("WARNING", "INFO"))]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"docctx-export: error: {bad}: architecture 'g_transformer' does not export to "
                               "CTranslate2: ") and "group attention" in lines[0], lines[0]
    assert lines[0].endswith("translate it with --engine fairseq, or train a doc2doc_transformer, which exports")
    assert not (tmp_path / "out").exists()


def test_other_models_on_segments_are_refused():
    """A segment task with a model other than a plain Transformer over segments, or on data
    with language tokens, does not export (one line)."""
    class Task:
        segments = True
        cfg = None

        @property
        def language_tokens(self):
            return self

        def target(self):
            return self.langtok

        def bart(self):
            return None

    task = Task()
    task.langtok = None
    for name in ("transformer", "doc2doc_transformer"):
        check_segments(task, name, "ckpt.pt")
    with pytest.raises(ExportError, match=r"^ckpt.pt: a concat_transformer that translates segments "
                       r"\(--doc-mode segments\) does not export to CTranslate2 .*--engine fairseq$"):
        check_segments(task, "concat_transformer", "ckpt.pt")
    task.langtok = 4
    with pytest.raises(ExportError, match="language tokens"):
        check_segments(task, "doc2doc_transformer", "ckpt.pt")


@pytest.mark.slow
def test_on_the_whole_probe_test_set(doc2doc, probe, monkeypatch):
    """The probe's 1,207 test sentences (200 documents): without the rules, CTranslate2's
    translations and fallbacks are the fairseq path's at beams 1 and 4; with them, at beam 1,
    the sentences of every segment that passed the checks are the fairseq path's."""
    ckpt, folder, data, _ = doc2doc
    docs = docids_documents(Path(probe["text"]) / "test.src")
    for beam in (1, 4):
        fs = from_pretrained(str(ckpt), data=data, no_sentence_count_constraint=True)
        ct = from_exported(folder, no_sentence_count_constraint=True)
        assert ct.translate_documents(docs, beam=beam) == fs.translate_documents(docs, beam=beam), beam
        assert ct.segment_report == fs.segment_report, beam
    fs = _flat(from_pretrained(str(ckpt), data=data).translate_documents(docs, beam=1))
    hub = from_exported(folder)
    spy = _Spy(monkeypatch)
    ct = _flat(hub.translate_documents(docs, beam=1))
    assert len(ct) == len(fs) == len(_flat(docs))
    assert all(ct[i] == fs[i] for i in range(len(ct)) if i not in spy.fallen)
    print(f"identical: {sum(a == b for a, b in zip(ct, fs))}/{len(ct)}; fallbacks {hub.segment_report}")
