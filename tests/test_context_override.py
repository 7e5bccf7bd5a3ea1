"""One rule for the context settings at inference, on every path: a ``--context-size`` (or
``--context-sides``, ``--doc-mode``, ``--max-segment-tokens``, ``--segment-packing``) that
differs from the checkpoint's is refused in one line naming the option, the value and the
checkpoint's, unless ``--context-override`` says it is meant; then one warning line says
so, once (also from docctx-translate's shard processes). A model that reads no context tables
takes another K as given (it changes nothing it reads)."""
import argparse
import re

import pytest

from conftest import REPO, ct2_export, run, run_in_process

USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def _refusal(ckpt_name, value=5, trained=2, flag="--context-size"):
    return (f"{flag} {value} differs from {ckpt_name}'s ({trained}): leave {flag} out to decode as trained, "
            f"or add --context-override to decode with {value} anyway")


def _warning(prog, ckpt_name, value=5, trained=2, flag="--context-size"):
    return f"{prog}: warning: {flag} {value} differs from {ckpt_name}'s ({trained}): decoding with {value} (--context-override)"


def _warnings(err):
    return [ln for ln in err.splitlines() if ": warning: " in ln and "differs from" in ln]


def test_fairseq_generate(toy_bin, concat_both_ckpt):
    """K=5 on the K=2 checkpoint: refused before any decoding, exit 2; with --context-override
    every sentence is decoded, one warning line on stderr."""
    common = ["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation", "--path", concat_both_ckpt,
              "--gen-subset", "valid", "--beam", "1", "--max-len-b", "5", "--context-size", "5"]
    p = run(common, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stderr.rstrip().splitlines()[-1] == "fairseq-generate: error: " + _refusal("the checkpoint")
    assert "H-" not in p.stdout
    p = run([*common, "--context-override"])
    assert _warnings(p.stderr) == [_warning("fairseq-generate", "the checkpoint")]
    n = sum(int(ln.split("\t")[1]) for ln in (toy_bin / "valid.src-tgt.docs").read_text().splitlines())
    assert len(re.findall(r"^H-\d+\t", p.stdout, re.M)) == n


@pytest.mark.slow  # ~21 s: make test-all (test_fairseq_generate keeps the rule in make test)
def test_docctx_translate_both_engines(toy_bin, concat_both_ckpt, tmp_path, capsys):
    """docctx-translate (the hub, fairseq's engine and CTranslate2's): the same refusal naming
    the checkpoint (the export folder), before anything is written; with --context-override
    the shard processes of --processes 2 decode with K=5 and their launcher says so once."""
    src = toy_bin.parent / "raw" / "test.src"
    folder = ct2_export(concat_both_ckpt, toy_bin, tmp_path / "ct2")
    capsys.readouterr()  # the export's line
    from fairseq_docctx.cli.translate import cli_main

    for engine, path in (("fairseq", concat_both_ckpt), ("ctranslate2", folder)):
        out = tmp_path / f"{engine}.txt"
        code, _, err = run_in_process(cli_main, [src, "--path", path, "--engine", engine, "--data", toy_bin,
                                                 "--beam", "1", "--cpu", "--quiet", "--context-size", "5",
                                                 "-o", out], capsys)
        assert code == 2 and err.strip().splitlines() == ["docctx-translate: error: " + _refusal(path)], err
        assert not out.exists()
    p = run(["docctx-translate", src, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "1", "--cpu",
             "--quiet", "--context-size", "5", "--context-override", "--processes", "2", "-o", tmp_path / "k5.txt"])
    assert _warnings(p.stderr) == [_warning("docctx-translate", concat_both_ckpt)], p.stderr
    assert len((tmp_path / "k5.txt").read_text().splitlines()) == len(src.read_text().splitlines())


def test_hub_and_score(toy_bin, concat_both_ckpt, capsys):
    """The hub (context_size=, context_override=) and docctx-score cxmi (--context-size,
    --context-override): refused in one line, or decoded with the K given."""
    from fairseq_docctx.cli.score import cli_main
    from fairseq_docctx.errors import UsageError
    from fairseq_docctx.hub import from_pretrained

    with pytest.raises(UsageError) as e:
        from_pretrained(str(concat_both_ckpt), data=str(toy_bin), context_size=3)
    assert str(e.value) == _refusal(concat_both_ckpt, 3)
    hub = from_pretrained(str(concat_both_ckpt), data=str(toy_bin), context_size=3, context_override=True)
    assert int(hub.task.cfg.context_size) == 3
    with pytest.raises(UsageError, match=re.escape(_refusal(concat_both_ckpt, "source", "both", "--context-sides"))):
        from_pretrained(str(concat_both_ckpt), data=str(toy_bin), context_sides="source")
    args = ["cxmi", "--path", concat_both_ckpt, "--data", toy_bin, "--split", "valid", "--context-size", "3"]
    code, _, err = run_in_process(cli_main, args, capsys)
    assert code == 2 and err.strip().splitlines() == ["docctx-score cxmi: error: " + _refusal(concat_both_ckpt, 3)]
    code, out, err = run_in_process(cli_main, [*args, "--context-override"], capsys)
    assert code == 0 and "CXMI" in out, err


def _task(**given):
    """A document_translation task set up as fairseq-generate sets it up, with ``given`` as
    the command line's context settings."""
    from fairseq.data import Dictionary

    from fairseq_docctx.tasks.document_translation import DocumentTranslationTask

    d = Dictionary()
    cfg = argparse.Namespace(data="", source_lang="src", target_lang="tgt", context_size=None, context_sides=None,
                             doc_mode=None, max_segment_tokens=None, segment_packing=None, context_separator="<sep>",
                             target_context="hypothesis", doc_run_length=16, doc_batching="auto", num_shards=1,
                             shard_id=0, left_pad_source=True, left_pad_target=False, train_subset="train")
    for k, v in given.items():
        setattr(cfg, k, v)
    return DocumentTranslationTask(cfg, d, d)


def test_a_model_that_reads_no_context_takes_another_k():
    """A sentence-level model trained with the task's default K=3, decoded with --context-size 0:
    taken as given (it reads no context tables); a context model is refused; a setting not given
    is the checkpoint's."""
    from fairseq_docctx.errors import UsageError

    trained = dict(context_size=3, context_sides="source", doc_mode="sentences")
    task = _task(context_size=0)
    task.adopt_context_settings(argparse.Namespace(**trained, arch="transformer"))
    assert task.cfg.context_size == 0
    with pytest.raises(UsageError, match=re.escape(_refusal("the checkpoint", 0, 3))):
        _task(context_size=0).adopt_context_settings(argparse.Namespace(**trained, arch="concat_transformer"))
    task = _task()
    task.adopt_context_settings(argparse.Namespace(**trained, arch="concat_transformer"))
    assert task.cfg.context_size == 3
