"""``--ct2-prefix``: the ctranslate2 engine decoding a sentence after its target prefix (a
``concat_transformer``'s own previous translations) in one decoder pass (CTranslate2's
``return_alternatives`` search) instead of forcing the prefix one step at a time on every
beam: every sentence decoded once, in document order, with its own translations as
context; greedy search (beam 1) gives the stepwise path's translations; the default leaves
the outputs as they were; bad values are refused in one line."""
import re

import pytest

from conftest import ct2_export, docids_documents, run_in_process
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.hub import from_exported

pytest.importorskip("ctranslate2")

MODES = ("stepwise", "one-pass", "one-pass-beam")


@pytest.fixture(scope="module")
def concat_export(concat_both_ckpt, toy_bin, tmp_path_factory):
    """The toy concat_transformer (K=2, both sides) exported in float32."""
    return ct2_export(concat_both_ckpt, toy_bin, tmp_path_factory.mktemp("ct2_prefix") / "concat")


#: the probe's test documents translated with its trained concat_transformer (the first ones)
PROBE_DOCS = 30


@pytest.fixture(scope="module")
def probe_concat(probe, concat_model, tmp_path_factory):
    """The probe's trained concat_transformer (K=2, both sides; probe_fixtures.py) exported
    in float32, and its first PROBE_DOCS test documents."""
    from pathlib import Path

    out = ct2_export(concat_model["checkpoint"], probe["data_bin"], tmp_path_factory.mktemp("ct2_prefix_probe") / "c")
    return out, docids_documents(Path(probe["text"]) / "test.src")[:PROBE_DOCS]


class Calls:
    """A translator recording every ``translate_batch`` row: (target prefix, whether by
    ``return_alternatives``); the rest is the translator's."""

    def __init__(self, translator):
        self.translator, self.rows = translator, []

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def translate_batch(self, sources, target_prefix=None, **kw):
        for prefix in target_prefix:
            self.rows.append((list(prefix), bool(kw.get("return_alternatives"))))
        return self.translator.translate_batch(sources, target_prefix=target_prefix, **kw)


@pytest.mark.parametrize("mode", ["one-pass", "one-pass-beam"])
def test_one_pass_decodes_every_sentence_once_in_document_order(concat_export, toy_bin, mode):
    """Each sentence after the first of its document is decoded in one pass, once, in
    document order, its prefix the model's own translations of the K=2 sentences before it
    (each followed by ``<sep>``), then the start token; a document's first sentence (no
    prefix) by the stepwise search; one translation per sentence. Each document alone (its
    calls recorded apart), and the same translations with the documents side by side."""
    docs = docids_documents(toy_bin.parent / "raw" / "test.src")
    hub = from_exported(concat_export, ct2_prefix=mode)
    hub.translator = calls = Calls(hub.translator)
    alone = []
    for doc in docs:
        calls.rows = []
        translations = hub.translate_documents([doc], beam=4)[0]
        assert len(translations) == len(doc)
        expected = [[w for t in translations[max(0, i - 2):i] for w in t.split() + ["<sep>"]] + ["</s>"]
                    for i in range(1, len(translations))]
        assert [prefix for prefix, alternatives in calls.rows if alternatives] == expected
        assert all(prefix == ["</s>"] for prefix, alternatives in calls.rows if not alternatives)
        alone.append(translations)
    assert any(len(d) > 2 for d in docs)
    assert hub.translate_documents(docs, beam=4, batch_size=3) == alone


def test_at_beam_1_one_pass_is_stepwise_greedy_search(concat_export, toy_bin, probe_concat):
    """Greedy search after a prefix run in one pass is greedy search after a prefix forced
    step by step: the same translations, on the toy model and on the probe's trained
    concat_transformer (K=2, both sides), in batches of documents."""
    for folder, docs in ((concat_export, docids_documents(toy_bin.parent / "raw" / "test.src")),
                         probe_concat):
        hub = from_exported(folder)
        out = {m: hub.translate_documents(docs, beam=1, batch_size=8, ct2_prefix=m) for m in MODES}
        assert out["one-pass"] == out["stepwise"] and out["one-pass-beam"] == out["stepwise"], folder
        assert sum(len(t.split()) for d in out["stepwise"] for t in d) > 0


def test_the_default_is_the_stepwise_search(concat_export, concat_both_ckpt, toy_bin, tmp_path, capsys,
                                            monkeypatch):
    """Without --ct2-prefix nothing is decoded in one pass, and the translations are those of
    --ct2-prefix stepwise and of the fairseq engine (beam 4)."""
    from fairseq_docctx.inference.ctranslate2.generator import CTranslate2Generator

    alternatives = []
    real = CTranslate2Generator._one_pass
    monkeypatch.setattr(CTranslate2Generator, "_one_pass",
                        lambda self, *a: alternatives.append(a) or real(self, *a))
    src = toy_bin.parent / "raw" / "test.src"
    outs = {}
    for name, argv in (("default", ["--engine", "ctranslate2", "--path", concat_export]),
                       ("stepwise", ["--engine", "ctranslate2", "--path", concat_export, "--ct2-prefix", "stepwise"]),
                       ("fairseq", ["--path", concat_both_ckpt])):
        out = tmp_path / f"{name}.txt"
        code, _, err = run_in_process(translate_main, [src, *argv, "--data", toy_bin, "--beam", 4,
                                                       "--batch-size", 3, "--quiet", "-o", out], capsys)
        assert code == 0, err
        outs[name] = out.read_text()
    assert outs["default"] == outs["stepwise"] == outs["fairseq"] and not alternatives
    code, _, err = run_in_process(translate_main, [src, "--engine", "ctranslate2", "--path", concat_export,
                                                   "--ct2-prefix", "one-pass", "--beam", 4, "--quiet",
                                                   "-o", tmp_path / "one.txt"], capsys)
    assert code == 0 and alternatives, err
    assert len((tmp_path / "one.txt").read_text().splitlines()) == len(src.read_text().splitlines())


def test_bad_values_are_refused_in_one_line(concat_export, concat_both_ckpt, toy_bin, tmp_path, capsys):
    src = toy_bin.parent / "raw" / "test.src"
    code, out, err = run_in_process(translate_main, [src, "--engine", "ctranslate2", "--path", concat_export,
                                                     "--ct2-prefix", "once", "--quiet"], capsys)
    assert code == 2 and not out and "argument --ct2-prefix: invalid choice: 'once'" in err.strip().splitlines()[-1]
    code, out, err = run_in_process(translate_main, [src, "--path", concat_both_ckpt, "--data", toy_bin,
                                                     "--ct2-prefix", "one-pass", "--quiet",
                                                     "-o", tmp_path / "x.txt"], capsys)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("WARNING", "INFO"))]
    assert code == 2 and not out and lines == [
        "docctx-translate: error: --ct2-prefix one-pass: applies to --engine ctranslate2 only"], err
    assert not (tmp_path / "x.txt").exists()
    with pytest.raises(ValueError, match=r"^--ct2-prefix once: must be one of stepwise, one-pass, one-pass-beam$"):
        from_exported(concat_export, ct2_prefix="once")


@pytest.mark.slow  # ~33 s for two refusals: make test-all
def test_one_pass_modes_on_a_model_without_target_prefix_are_refused_in_one_line(sent_ckpt, concat_export, toy_bin,
                                                                                 tmp_path, capsys):
    """--ct2-prefix one-pass/one-pass-beam decode only what follows a target prefix: on an
    export whose sentences have none (a sentence-level transformer; a concat_transformer given
    --context-size 0) they are refused in one line, as --ct2-prefix with the fairseq engine
    is, by docctx-translate (with --processes too) and by the hub (from_exported and a
    search's ct2_prefix=); stepwise, the search that decodes them, is accepted."""
    sent = ct2_export(sent_ckpt, toy_bin, tmp_path / "sent")
    capsys.readouterr()  # the export's line
    src = toy_bin.parent / "raw" / "test.src"
    expected = ("docctx-translate: error: --ct2-prefix {}: applies to a model with target context only (a "
                "concat_transformer with --context-sides both or tgt and --context-size above 0); this {} decodes "
                "no sentence after a target prefix")
    for folder, model, more in ((sent, "transformer", []), (sent, "transformer", ["--processes", 2]),
                                (concat_export, "concat_transformer", ["--context-size", 0, "--context-override"])):
        for mode in ("one-pass", "one-pass-beam"):
            out = tmp_path / "x.txt"
            code, stdout, err = run_in_process(translate_main, [src, "--engine", "ctranslate2", "--path", folder,
                                                                "--ct2-prefix", mode, "--quiet", "-o", out, *more],
                                               capsys)
            lines = [ln for ln in err.strip().splitlines()
                     if not ln.startswith(("WARNING", "INFO", "docctx-translate: warning: "))]
            assert code == 2 and not stdout and lines == [expected.format(mode, model)], (more, err)
            assert not out.exists()
    out = tmp_path / "stepwise.txt"
    code, _, err = run_in_process(translate_main, [src, "--engine", "ctranslate2", "--path", sent,
                                                   "--ct2-prefix", "stepwise", "--quiet", "-o", out], capsys)
    assert code == 0 and len(out.read_text().splitlines()) == len(src.read_text().splitlines()), err
    message = expected.format("one-pass", "transformer").split("error: ", 1)[1]
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        from_exported(sent, ct2_prefix="one-pass")
    hub = from_exported(sent)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        hub.translate_documents([["w1 w2"]], beam=2, ct2_prefix="one-pass")
    with pytest.raises(ValueError, match="^--ct2-prefix once: must be one of "):
        hub.translate_documents([["w1 w2"]], beam=2, ct2_prefix="once")
