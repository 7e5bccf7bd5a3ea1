"""The CTranslate2 engine: ``docctx-export ctranslate2`` and ``--engine ctranslate2`` of
docctx-translate and docctx-drafts run fairseq's beam search (float32: identical best
hypotheses on the tests' tiny models and on the probe's trained ones, with target context
too), every sentence under its own length limit whatever the batch."""
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from conftest import ct2_export, docids_documents, file_digests, run_in_process
from fairseq_docctx.cli.drafts import cli_main as drafts_main
from fairseq_docctx.cli.export import cli_main as export_main
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.hub import from_exported

pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def exported(sent_ckpt, concat_both_ckpt, toy_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("ct2_export")
    return {"transformer": (sent_ckpt, ct2_export(sent_ckpt, toy_bin, d / "sent")),
            "concat_transformer": (concat_both_ckpt, ct2_export(concat_both_ckpt, toy_bin, d / "concat"))}


def test_export_records_dictionaries_and_context_settings(exported, toy_bin):
    folder = exported["concat_transformer"][1]
    record = json.loads((folder / "docctx-export.json").read_text())
    assert record["model"] == "concat_transformer" and record["quantization"] == "float32"
    assert record["context"]["size"] == 2 and record["context"]["separator"] == "<sep>"
    assert record["context"]["sides"] in ("both", "src,tgt", ["src", "tgt"])
    for name in ("dict.src.txt", "dict.tgt.txt"):
        assert (folder / name).read_text() == (toy_bin / name).read_text()
    assert (folder / "model.bin").is_file()


@pytest.mark.parametrize("model", ["transformer", "concat_transformer"])
@pytest.mark.parametrize("beam", ["1", "4"])
def test_ctranslate2_gives_the_fairseq_translations(exported, toy_bin, tmp_path, capsys, model, beam):
    """Raw documents in document order (concat K=2 both sides: the target context is the
    model's own previous translations, the decoder prefix) give the same text."""
    ckpt, folder = exported[model]
    src = toy_bin.parent / "raw" / "test.src"
    outs = {}
    for engine, path in (("fairseq", ckpt), ("ctranslate2", folder)):
        out = tmp_path / f"{engine}.txt"
        code, _, err = run_in_process(translate_main, [src, "--path", path, "--data", toy_bin, "--engine", engine,
                                                       "--beam", beam, "--batch-size", "3", "--quiet",
                                                       "-o", out], capsys)
        assert code == 0, err
        outs[engine] = out.read_text()
    assert outs["ctranslate2"] == outs["fairseq"]
    assert len(outs["fairseq"].splitlines()) == len(src.read_text().splitlines())


def test_unknown_architecture_is_refused_in_one_line(concat_both_ckpt, tmp_path, capsys):
    state = torch.load(concat_both_ckpt, map_location="cpu", weights_only=False)
    state["cfg"]["model"]._name = "han_transformer"
    state["cfg"]["model"].arch = "han_transformer"
    bad = tmp_path / "han.pt"
    torch.save(state, bad)
    code, _, err = run_in_process(export_main, ["ctranslate2", bad, tmp_path / "out"], capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("docctx-export: error: ") and "han_transformer" in lines[0]
    assert "supported: transformer, concat_transformer" in lines[0]
    assert not (tmp_path / "out").exists()


def test_drafts_with_ctranslate2_are_the_fairseq_drafts(exported, toy_bin, tmp_path, capsys):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from fairseq_docctx.data.drafts import draft_prefix

    ckpt, folder = exported["transformer"]
    made = {}
    for engine, path in (("fairseq", ckpt), ("ctranslate2", folder)):
        data = tmp_path / engine
        shutil.copytree(toy_bin, data, ignore=shutil.ignore_patterns("*.draft.*", ".docctx-drafts"))
        code, _, err = run_in_process(drafts_main, [data, "--path", path, "--engine", engine, "--splits", "valid",
                                                    "--beam", "4", "--batch-size", "8", "--quiet"], capsys)
        assert code == 0, err
        ds = MMapIndexedDataset(draft_prefix(str(data), "valid", "src", "tgt"))
        made[engine] = [ds[i].tolist() for i in range(len(ds))]
    assert made["ctranslate2"] == made["fairseq"] and len(made["fairseq"]) > 0


def test_a_checkpoint_given_to_the_ctranslate2_engine_is_one_line(concat_both_ckpt, toy_bin, capsys):
    src = toy_bin.parent / "raw" / "test.src"
    code, out, err = run_in_process(translate_main, [src, "--path", concat_both_ckpt, "--engine", "ctranslate2",
                                                     "--quiet"], capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert code == 2 and len(lines) == 1 and not out, err
    assert lines[0] == (f"docctx-translate: error: --path {concat_both_ckpt}: not a folder exported by "
                        "docctx-export ctranslate2 (the ctranslate2 engine reads an exported folder, not a checkpoint)")


def _one_line(err, prog):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("WARNING", "INFO"))]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ inputs are never destroyed
@pytest.fixture
def export_inputs(concat_both_ckpt, toy_bin, tmp_path):
    """Copies of a checkpoint (in a folder with an unrelated file) and of its data directory."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    ckpt = folder / "checkpoint.pt"
    shutil.copyfile(concat_both_ckpt, ckpt)
    (folder / "notes.txt").write_text("not the export's\n")
    data = tmp_path / "data"
    shutil.copytree(toy_bin, data)
    return ckpt, data


def test_export_refuses_an_outdir_that_is_or_holds_what_it_reads(export_inputs, tmp_path, capsys):
    """OUTDIR the data directory, the checkpoint's folder, a folder holding the checkpoint, or
    the checkpoint itself: one line naming it, exit 2, every file as it was (--force too)."""
    ckpt, data = export_inputs
    before, names = file_digests(tmp_path), sorted(os.listdir(tmp_path))
    for outdir, said in ((data, f"is the data directory {data}"), (ckpt.parent, "is the checkpoint's folder"),
                         (tmp_path, f"holds the checkpoint {ckpt}"), (ckpt, f"is the checkpoint {ckpt}")):
        for force in ([], ["--force"]):
            code, _, err = run_in_process(export_main, ["ctranslate2", ckpt, outdir, "--data", data, *force], capsys)
            line = _one_line(err, "docctx-export")
            assert code == 2 and line.startswith(f"docctx-export: error: OUTDIR {outdir} {said}"), (force, line)
            assert line.endswith("which the run reads: give another folder"), line
            assert file_digests(tmp_path) == before and sorted(os.listdir(tmp_path)) == names, (outdir, force)


def test_force_replaces_only_an_earlier_export_once_the_new_one_is_complete(export_inputs, tmp_path, capsys,
                                                                            monkeypatch):
    from fairseq_docctx.inference.ctranslate2 import record as ct2

    ckpt, data = export_inputs
    other = tmp_path / "other"  # a folder docctx-export did not write
    other.mkdir()
    (other / "results.txt").write_text("keep me\n")
    code, _, err = run_in_process(export_main, ["ctranslate2", ckpt, other, "--data", data, "--force"], capsys)
    assert code == 2 and "is not a folder docctx-export wrote (no docctx-export.json)" in _one_line(err, "docctx-export")
    assert (other / "results.txt").read_text() == "keep me\n"

    out = ct2_export(ckpt, data, tmp_path / "ct2")
    capsys.readouterr()
    record = json.loads((out / "docctx-export.json").read_text())
    assert record["files"] == sorted(os.listdir(out))
    (out / "test.hyp").write_text("a translation\n")  # a file of the user's in the export
    code, _, err = run_in_process(export_main, ["ctranslate2", ckpt, out, "--data", data, "--force"], capsys)
    line = _one_line(err, "docctx-export")
    assert code == 2 and f"holds {out / 'test.hyp'}, which docctx-export did not write" in line, line
    (out / "test.hyp").unlink()

    # an export that fails half way leaves the earlier one as it was, and nothing beside it
    before, names = file_digests(out), sorted(os.listdir(tmp_path))

    def fail(path):
        raise OSError("disk full")

    monkeypatch.setattr(ct2, "checkpoint_sha1", fail)
    with pytest.raises(OSError, match="disk full"):
        export_main(["ctranslate2", str(ckpt), str(out), "--data", str(data), "--force"])
    monkeypatch.undo()
    assert file_digests(out) == before and sorted(os.listdir(tmp_path)) == names

    ct2_export(ckpt, data, out, "--force")  # replaced: the new export alone is there
    assert sorted(os.listdir(tmp_path)) == names and json.loads((out / "docctx-export.json").read_text()) == record


@pytest.mark.parametrize("name", ["model.bin", "config.json", "shared_vocabulary.json", "docctx-export.json"])
def test_translate_output_into_the_export_folder_is_refused(exported, toy_bin, tmp_path, capsys, name):
    folder = tmp_path / "ct2"
    shutil.copytree(exported["transformer"][1], folder)
    before = file_digests(folder)
    out = folder / name
    code, stdout, err = run_in_process(translate_main, [toy_bin.parent / "raw" / "test.src", "--engine", "ctranslate2",
                                                        "--path", folder, "-o", out, "--quiet"], capsys)
    line = _one_line(err, "docctx-translate")
    assert code == 2 and not stdout and line == (f"docctx-translate: error: -o {out} is the exported model's "
                                                  f"file {out}, which the run reads: give another output file")
    assert file_digests(folder) == before and len(os.listdir(folder)) == len(before)


def test_an_export_given_to_the_fairseq_engine_or_left_incomplete_is_one_clear_line(exported, toy_bin, tmp_path,
                                                                                     capsys):
    """An exported folder given to the fairseq engine says --engine ctranslate2; a folder left
    with its record only names the files missing (not a bare [Errno 2])."""
    folder = exported["concat_transformer"][1]
    src = toy_bin.parent / "raw" / "test.src"
    code, out, err = run_in_process(translate_main, [src, "--path", folder, "--quiet"], capsys)
    assert code == 2 and not out
    assert _one_line(err, "docctx-translate") == (
        f"docctx-translate: error: --path {folder}: a model exported by docctx-export ctranslate2, not a fairseq "
        "checkpoint (docctx-translate decodes it with --engine ctranslate2)")
    record_only = tmp_path / "record-only"
    record_only.mkdir()
    shutil.copy(folder / "docctx-export.json", record_only)
    code, out, err = run_in_process(translate_main, [src, "--path", record_only, "--engine", "ctranslate2",
                                                     "--quiet"], capsys)
    line = _one_line(err, "docctx-translate")
    assert code == 2 and "Errno" not in line and line.startswith(
        f"docctx-translate: error: --path {record_only}: config.json, dict.src.txt, dict.tgt.txt, model.bin, "
        "its vocabulary (shared_vocabulary.json) missing: not a whole export"), line


def test_drafts_name_their_data_directory_as_the_command_takes_it(exported, toy_bin, tmp_path, capsys):
    """docctx-drafts takes the data directory as DATA, not --data: its refusal of dictionaries
    other than the export's names the directory, not an option it has not."""
    folder = exported["transformer"][1]
    data = tmp_path / "data"
    shutil.copytree(toy_bin, data, ignore=shutil.ignore_patterns("*.draft.*", ".docctx-drafts"))
    with open(data / "dict.src.txt", "a") as f:
        f.write("zz0 1\n")
    code, _, err = run_in_process(drafts_main, [data, "--path", folder, "--engine", "ctranslate2", "--splits",
                                                "valid", "--quiet"], capsys)
    line = _one_line(err, "docctx-drafts")
    assert code == 2 and "--data" not in line and f"the data directory {data}: dict.src.txt differs" in line, line


#: the probe's test documents the tests of the trained models translate (the first ones)
PROBE_DOCS = 30


@pytest.fixture(scope="module")
def probe_exported(probe, sentence_model, concat_model, tmp_path_factory):
    """The probe's trained models (probe_fixtures.py: the sentence-level transformer and the
    concat_transformer with K=2 on both sides), exported in float32, and the first
    PROBE_DOCS test documents."""
    d = tmp_path_factory.mktemp("ct2_probe")
    data = probe["data_bin"]
    models = {name: (m["checkpoint"], ct2_export(m["checkpoint"], data, d / name))
              for name, m in (("transformer", sentence_model), ("concat_transformer", concat_model))}
    return models, docids_documents(Path(probe["text"]) / "test.src")[:PROBE_DOCS], data


#: length limits that bind on the probe's models (a target word per source word): a
#: translation of a sentence of n words has at most int(0.5 * (n + 1) + 1) tokens
BINDING = {"max_len_a": 0.5, "max_len_b": 1}


def _own_limit(sentence: str) -> int:
    return int(BINDING["max_len_a"] * (len(sentence.split()) + 1) + BINDING["max_len_b"])


#: the first test documents the batching test translates alone and in batches (the concatenation
#: model's target context makes a document's sentences depend on each other)
ALIKE_DOCS = 12


@pytest.mark.parametrize("model", [pytest.param("transformer", marks=pytest.mark.slow), "concat_transformer"])
def test_a_document_is_translated_alike_alone_and_in_any_batch(probe_exported, tmp_path, capsys, model):
    """Each sentence's length limit comes from its own source length: every document
    translated alone equals the documents translated at batch sizes 1, 16 and 64, under
    --max-tokens and in 2 processes, at beams 1 and 4, with limits that bind (the sentence-level
    model's run, a subset of the concatenation model's, is marked slow)."""
    models, docs, data = probe_exported
    docs = docs[:ALIKE_DOCS]
    folder = models[model][1]
    src, ids = tmp_path / "test.src", tmp_path / "test.docids"
    src.write_text("".join(f"{s}\n" for d in docs for s in d))
    ids.write_text("".join(f"d{i}\n" for i, d in enumerate(docs) for _ in d))
    hub = from_exported(folder)
    for beam in (1, 4):
        alone = [hub.translate_documents([d], beam=beam, batch_size=1, **BINDING)[0] for d in docs]
        for batch in ({"batch_size": 1}, {"batch_size": 16}, {"batch_size": 64}, {"max_tokens": 60}):
            assert hub.translate_documents(docs, beam=beam, **batch, **BINDING) == alone, (beam, batch)
        out = tmp_path / f"p2.{beam}.txt"
        code, _, err = run_in_process(translate_main, [
            src, "--path", folder, "--engine", "ctranslate2", "--beam", beam,
            "--batch-size", 16, "--processes", 2, "--max-len-a", BINDING["max_len_a"],
            "--max-len-b", BINDING["max_len_b"], "--quiet", "-o", out], capsys)
        assert code == 0, err
        assert out.read_text().splitlines() == [t for d in alone for t in d], beam
        # the limits bind, and differ between the sentences of a batch
        flat = [(s, t) for d, a in zip(docs, alone) for s, t in zip(d, a)]
        assert all(len(t.split()) <= _own_limit(s) for s, t in flat)
        at_limit = [s for s, t in flat if len(t.split()) == _own_limit(s)]
        assert len(at_limit) >= len(flat) // 4 and len({_own_limit(s) for s in at_limit}) > 1, beam


@pytest.mark.parametrize("model", ["transformer", "concat_transformer"])
def test_on_trained_models_ctranslate2_gives_fairseqs_translations(probe_exported, model):
    """Where the length limit does not bind (the defaults, 1.2 x the source + 10), a float32
    export runs fairseq's beam search: a sentence ends when ``beam`` hypotheses have ended,
    and the best of them by fairseq's ranking is the translation; identical lines at beams
    1, 2, 4 and 5 (with the concatenation model, target context: its own translations)."""
    from fairseq_docctx.hub import from_pretrained

    models, docs, data = probe_exported
    ckpt, folder = models[model]
    engines = {"fairseq": from_pretrained(str(ckpt), data=data), "ctranslate2": from_exported(folder)}
    for beam in (1, 2, 4, 5):
        out = {name: hub.translate_documents(docs, beam=beam) for name, hub in engines.items()}
        assert out["ctranslate2"] == out["fairseq"], beam


#: the probe's test documents (their index) where the trained concat_transformer ended the
#: empty translation right after its target prefix at a minimum length of 0 (measured on all
#: 200: at beam 4 documents 57, 176 and 183, at beam 2 document 160, with the engine that left
#: that step to CTranslate2's search)
EMPTY_AFTER_PREFIX_DOCS = (57, 160, 176, 183)


def test_at_a_minimum_length_of_0_the_step_after_the_target_prefix_is_fairseqs(probe, probe_exported):
    """At a minimum length of 0 fairseq's beam search may end the empty translation right
    after a sentence's target prefix, with EOS among the step's ``beam`` best candidates,
    where CTranslate2's own search ends only the best one; the engine decides that step as
    fairseq does: the concat_transformer's translations of the documents where it showed are
    fairseq's at beams 2 and 4."""
    from fairseq_docctx.hub import from_pretrained

    models, _, data = probe_exported
    ckpt, folder = models["concat_transformer"]
    docs = docids_documents(Path(probe["text"]) / "test.src")
    docs = [docs[i] for i in EMPTY_AFTER_PREFIX_DOCS]
    engines = {"fairseq": from_pretrained(str(ckpt), data=data), "ctranslate2": from_exported(folder)}
    for beam in (2, 4):
        out = {name: hub.translate_documents(docs, beam=beam, min_len=0) for name, hub in engines.items()}
        assert out["ctranslate2"] == out["fairseq"], beam


def _fairseq_score(hub, source: str, translation: str) -> float:
    """The fairseq model's score of ``translation``: its tokens' and EOS's log-probabilities
    over its length with EOS (fairseq's ranking with --lenpen 1)."""
    model = hub.models[0]
    src = hub.encode(source)
    tgt = hub.tgt_dict.encode_line(translation, add_if_not_exist=False, append_eos=True).long()
    prev = torch.cat([tgt.new_tensor([hub.tgt_dict.eos()]), tgt[:-1]])
    with torch.no_grad():
        out = model(src[None], torch.tensor([len(src)]), prev[None])
        lprobs = model.get_normalized_probs(out, log_probs=True)[0]
    return lprobs.gather(-1, tgt[:, None]).sum().item() / len(tgt)


def test_where_the_limit_binds_fairseq_ranks_its_translation_at_least_as_high(probe_exported):
    """Where the length limit binds, fairseq ends every hypothesis of its beam with EOS there;
    CTranslate2's last step returns those of the step before, and those of a free step more
    (cut and ended with EOS), which can miss one fairseq's beam took in at that step: the
    translation is fairseq's, or one that fairseq's model scores lower. The model is the same:
    CTranslate2 scores a translation as fairseq's model does (sentence-level transformer,
    beams 2 and 4, each sentence searched alone by fairseq: batch size 1, its own limit)."""
    from fairseq_docctx.hub import from_pretrained

    models, docs, data = probe_exported
    ckpt, folder = models["transformer"]
    fs, ct = from_pretrained(str(ckpt), data=data), from_exported(folder)
    sources = [s for d in docs for s in d]
    at_limit = same = 0
    for beam in (2, 4):
        a = [t for d in fs.translate_documents(docs, beam=beam, batch_size=1, **BINDING) for t in d]
        b = [t for d in ct.translate_documents(docs, beam=beam, **BINDING) for t in d]
        scored = ct.translator.score_batch([s.split() + ["</s>"] for s in sources],
                                           [["</s>"] + t.split() for t in b], max_input_length=0)
        for s, x, y, r in zip(sources, a, b, scored):
            fy = _fairseq_score(fs, s, y)
            assert abs(sum(r.log_probs) / len(r.log_probs) - fy) < 1e-4, (s, y)  # the same model
            if x == y:
                same += 1
            else:
                assert _fairseq_score(fs, s, x) >= fy - 1e-5, (beam, s, x, y)
            at_limit += len(y.split()) == _own_limit(s)
    assert at_limit >= len(sources) // 2 and same >= len(sources), (at_limit, same)
