"""The one output guard (``fairseq_docctx.data.outputs``) and every command that writes a file:
no output lands on an input, no existing file a command did not write is replaced without
``--force``, a command replaces its own earlier output, nothing is half written.

Each command is run on the toy data and the session's tiny ``concat_transformer``; the
refusals come before any model is loaded or any sentence decoded, and every file the run
reads or found there is left byte for byte as it was (:func:`conftest.file_digests`)."""
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import file_digests, run, run_in_process
from fairseq_docctx.data.outputs import OutputClash, Outputs, WriteRecord


def error_line(err, prog):
    """The one error line of a refusal (the run's warnings aside); no traceback."""
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("WARNING", "note:"))]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def record(tmp_path):
    return WriteRecord(str(tmp_path / "state"))


# ------------------------------------------------------------------------------ the guard


def test_an_output_is_never_an_input_under_any_name(tmp_path, record):
    ref = tmp_path / "r.ref"
    ref.write_text("a b\n")
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.txt"
    link.symlink_to(ref)
    hard = tmp_path / "hard.txt"
    os.link(ref, hard)
    for name in (ref, tmp_path / "sub" / ".." / "r.ref", link, hard, Path(os.path.relpath(ref))):
        for force in (False, True):
            guard = Outputs("docctx-score", [("the reference", str(ref))], force=force, record=record)
            with pytest.raises(OutputClash, match=r"is the reference .*r\.ref, which the run reads"):
                guard.file(str(name), f"--json {name}")
    assert ref.read_text() == "a b\n"
    # a folder written whole must not hold an input; one its files go in may
    guard = Outputs("docctx-export", [("the checkpoint", str(ref))], record=record)
    with pytest.raises(OutputClash, match="holds the checkpoint"):
        guard.folder(str(tmp_path), "OUTDIR", whole=True)
    assert guard.folder(str(tmp_path), "--outdir") == str(tmp_path)


def test_an_existing_file_is_replaced_only_when_the_command_wrote_it(tmp_path, record):
    out = tmp_path / "a.json"
    out.write_text("mine\n")  # the user's
    with pytest.raises(OutputClash, match=r"a\.json exists and docctx-score did not write it .* --force"):
        Outputs("docctx-score", record=record).file(str(out), f"--json {out}")
    assert out.read_text() == "mine\n"
    with Outputs("docctx-score", force=True, record=record) as g:  # --force replaces it
        g.write_text(str(out), "1\n")
    assert out.read_text() == "1\n"
    with Outputs("docctx-score", record=record) as g:  # written by docctx-score: replaced without --force
        g.write_text(str(out), "2\n")
    assert out.read_text() == "2\n"
    with pytest.raises(OutputClash, match="docctx-translate did not write it"):  # another command's
        Outputs("docctx-translate", record=record).file(str(out))
    out.write_text("edited\n")  # changed since: the user's again
    with pytest.raises(OutputClash, match="or it has changed since"):
        Outputs("docctx-score", record=record).file(str(out))
    # a side file belongs to its output: a.hyp's ids are not b.hyp's
    ids = tmp_path / "m.docids"
    with Outputs("docctx-translate", record=record) as g:
        g.write_text(str(ids), "d1\n", output=str(tmp_path / "m.stepwise"))
    with pytest.raises(OutputClash, match="did not write it for this output"):
        Outputs("docctx-translate", record=record).file(str(ids), output=str(tmp_path / "m.one-pass"))
    Outputs("docctx-translate", record=record).file(str(ids), output=str(tmp_path / "m.stepwise"))
    # an empty file holds nothing to lose (mktemp's); a special file is written directly
    empty = tmp_path / "empty"
    empty.write_text("")
    Outputs("docctx-score", record=record).file(str(empty))
    with Outputs("docctx-score", record=record) as g:
        g.write_text(os.devnull, "x\n")


def test_a_failed_write_leaves_the_old_file_no_part_file_and_no_new_folder(tmp_path, record):
    out = tmp_path / "new" / "dir" / "out.txt"
    with pytest.raises(RuntimeError):
        with Outputs("docctx-score", record=record) as g:
            with g.open(str(out)) as f:
                f.write("half")
                raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []
    old = tmp_path / "old.txt"
    old.write_text("old\n")
    with pytest.raises(RuntimeError):
        with Outputs("docctx-score", force=True, record=record) as g:
            with g.open(str(old)) as f:
                f.write("half")
                raise RuntimeError("interrupted")
    assert old.read_text() == "old\n" and os.listdir(tmp_path) == ["old.txt"]


def test_the_write_record_drops_what_changed(tmp_path, record):
    a, b = tmp_path / "a", tmp_path / "b"
    with Outputs("docctx-score", record=record) as g:
        g.write_text(str(a), "1\n")
        g.write_text(str(b), "1\n")
    a.unlink()
    with Outputs("docctx-score", record=record) as g:
        g.write_text(str(tmp_path / "c"), "1\n")
    files = json.loads(Path(record.path).read_text())["files"]
    assert sorted(os.path.basename(p) for p in files) == ["b", "c"]


# ------------------------------------------------------------------------------ the commands


@pytest.fixture
def raw(toy_bin, tmp_path):
    """A copy of the toy documents' raw files."""
    d = tmp_path / "raw"
    shutil.copytree(Path(toy_bin).parent / "raw", d)
    return d


def translate(argv, capsys):
    from fairseq_docctx.cli.translate import cli_main

    return run_in_process(cli_main, argv, capsys)


def score(argv, capsys):
    from fairseq_docctx.cli.score import cli_main

    return run_in_process(cli_main, argv, capsys)


def test_docctx_translate_never_replaces_an_ids_file_it_did_not_write(raw, toy_bin, concat_both_ckpt, tmp_path,
                                                                     capsys):
    model = ["--path", concat_both_ckpt, "--data", toy_bin, "--beam", "1", "--max-len-b", "3", "--quiet"]
    # -o beside the training split: its ids file would replace the split's document ids
    before = file_digests(raw)
    code, _, err = translate([raw / "test.src", *model, "-o", raw / "train.hyp"], capsys)
    assert code == 2 and f"its document-id file {raw / 'train.docids'} exists and docctx-translate did not " \
        "write it for this output" in error_line(err, "docctx-translate")
    assert file_digests(raw) == before and not (raw / "train.hyp").exists()
    # two outputs that share a stem: the second would replace the first one's ids
    hyp = tmp_path / "hyp"
    assert translate([raw / "test.src", *model, "-o", hyp / "m.ct2.stepwise"], capsys)[0] == 0
    first = file_digests(hyp)
    code, _, err = translate([raw / "valid.src", *model, "-o", hyp / "m.ct2.one-pass"], capsys)
    assert code == 2 and "m.ct2.docids exists" in error_line(err, "docctx-translate")
    assert file_digests(hyp) == first
    # its own earlier output is replaced without --force; another's file with --force
    assert translate([raw / "test.src", *model, "-o", hyp / "m.ct2.stepwise"], capsys)[0] == 0
    assert translate([raw / "valid.src", *model, "-o", hyp / "m.ct2.one-pass", "--force"], capsys)[0] == 0
    assert (hyp / "m.ct2.docids").read_text() == (raw / "valid.docids").read_text()
    # the output is an input (through a link too), --force or not
    (tmp_path / "link.src").symlink_to(raw / "test.src")
    for force in ([], ["--force"]):
        code, _, err = translate([raw / "test.src", *model, "-o", tmp_path / "link.src", *force], capsys)
        assert code == 2 and "is the input" in error_line(err, "docctx-translate")
    assert file_digests(raw)[str(raw / "test.src")] == before[str(raw / "test.src")]


def test_docctx_score_never_writes_its_json_or_table_over_an_input(raw, tmp_path, capsys):
    hyp, ref = raw / "test.tgt", raw / "valid.tgt"
    shutil.copy(raw / "test.tgt", tmp_path / "h.hyp")
    shutil.copy(raw / "test.tgt", tmp_path / "r.ref")
    shutil.copy(raw / "test.docids", tmp_path / "r.docids")
    h, r = tmp_path / "h.hyp", tmp_path / "r.ref"
    before = file_digests(tmp_path)
    for target, what in ((h, "the hypotheses"), (r, "the reference"), (tmp_path / "r.docids", "the document ids")):
        code, _, err = score(["bleu", "--hyp", h, "--ref", r, "--json", target, "--tokenized"], capsys)
        assert code == 2 and f"--json {target} is {what}" in error_line(err, "docctx-score bleu"), err
    assert file_digests(tmp_path) == before
    # its own JSON is merged into (another subcommand's score of the same run), a foreign one refused
    run_json = tmp_path / "a.json"
    assert score(["bleu", "--hyp", h, "--ref", r, "--json", run_json, "--tokenized"], capsys)[0] == 0
    assert score(["chrf", "--hyp", h, "--ref", r, "--json", run_json], capsys)[0] == 0
    assert set(json.loads(run_json.read_text())["metrics"]) == {"bleu_tok", "chrf"}
    (tmp_path / "notes.json").write_text('{"mine": 1}\n')
    code, _, err = score(["bleu", "--hyp", h, "--ref", r, "--json", tmp_path / "notes.json"], capsys)
    assert code == 2 and "exists and docctx-score did not write it" in error_line(err, "docctx-score bleu")
    assert (tmp_path / "notes.json").read_text() == '{"mine": 1}\n'
    # table: -o and --json are never one of the runs
    other = tmp_path / "b.json"
    assert score(["bleu", "--hyp", h, "--ref", r, "--json", other, "--name", "b", "--tokenized"], capsys)[0] == 0
    runs = file_digests(run_json, other)
    for flag in ("-o", "--json"):
        code, _, err = score(["table", run_json, other, flag, run_json], capsys)
        assert code == 2 and f"{flag} {run_json} is the run {run_json}" in error_line(err, "docctx-score table")
    assert file_digests(run_json, other) == runs
    assert score(["table", run_json, other, "-o", tmp_path / "t.md"], capsys)[0] == 0
    assert "bleu_tok" in (tmp_path / "t.md").read_text()
    # compare and apt alike
    code, _, err = score(["compare", "--baseline", h, "--hyp", h, "--ref", r, "--names", "a,b",
                          "--json", r], capsys)
    assert code == 2 and "is the reference" in error_line(err, "docctx-score compare")
    code, _, err = score(["apt", "-s", "src", "-t", "en", "--src", h, "--ref", r, "--hyp", h,
                          "--align-ref", h, "--align-hyp", h, "--detail", r], capsys)
    assert code == 2 and f"--detail {r} is the reference" in error_line(err, "docctx-score apt")
    assert file_digests(tmp_path / "h.hyp", r) == {k: v for k, v in before.items() if k in (str(h), str(r))}


def test_model_subcommands_refuse_their_outputs_before_loading_the_model(raw, toy_bin, concat_both_ckpt, tmp_path,
                                                                         capsys):
    model = ["--path", concat_both_ckpt, "--data", toy_bin]
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    before = file_digests(concat_both_ckpt, toy_bin, mine)
    cases = [
        (["cxmi", *model, "--json", concat_both_ckpt], "is the checkpoint"),
        (["cxmi", *model, "--json", toy_bin / "dict.src.txt"], "is the data directory"),
        (["entropy", *model, "--plot", mine], "exists and docctx-score did not write it"),
        (["contrastive", raw / "test.src", *model, "--scores-out", mine], "exists and docctx-score did not write it"),
    ]
    for argv, what in cases:
        code, out, err = score(argv, capsys)
        assert code == 2 and what in error_line(err, f"docctx-score {argv[0]}"), (argv, err)
    assert file_digests(concat_both_ckpt, toy_bin, mine) == before
    # plot: its files are named after the model (found once it is loaded), checked before the work
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "context_concat_transformer.png").write_text("mine\n")
    code, _, err = score(["plot", *model, "--doc", "0", "--sentence", "1", "--outdir", plots], capsys)
    assert code == 2 and "context_concat_transformer.png exists" in error_line(err, "docctx-score plot")
    assert os.listdir(plots) == ["context_concat_transformer.png"]
    # a ctxpro translation file of the user's in --translations-out
    evalset = tmp_path / "set.json"
    evalset.write_text("[]\n")
    (tmp_path / "inputs").mkdir()
    (tmp_path / "set").write_text("")
    out = tmp_path / "tr"
    out.mkdir()
    (out / "set.txt").write_text("mine\n")
    code, _, err = score(["ctxpro", evalset, "--inputs", tmp_path / "set", *model, "--translations-out", out], capsys)
    assert code == 2 and f"{out / 'set.txt'} exists" in error_line(err, "docctx-score ctxpro"), err
    assert (out / "set.txt").read_text() == "mine\n"


def test_docctx_probe_generate_score_and_evaluate(tmp_path, capsys):
    from fairseq_docctx.cli.probe import cli_main

    def probe(*argv):
        return run_in_process(lambda a: cli_main(a), list(argv), capsys)

    out = tmp_path / "probe"
    gen = ["generate", "--outdir", out, "--train-docs", "3", "--valid-docs", "1", "--test-docs", "2"]
    assert probe(*gen)[0] == 0
    assert probe(*gen)[0] == 0  # its own files: made again
    (out / "valid.src").write_text("mine\n")
    before = file_digests(out)
    code, _, err = probe(*gen)
    assert code == 2 and f"{out / 'valid.src'} exists and docctx-probe did not write it" in error_line(
        err, "docctx-probe")
    assert file_digests(out) == before  # no split written: every file is checked first
    assert probe(*gen, "--force")[0] == 0 and (out / "valid.src").read_text() != "mine\n"
    ann = out / "test.probe.jsonl"
    code, _, err = probe("score", "--annotations", ann, "--hyp", out / "test.tgt", "--json", ann)
    assert code == 2 and "is the annotations" in error_line(err, "docctx-probe")
    assert probe("score", "--annotations", ann, "--hyp", out / "test.tgt", "--json", tmp_path / "s.json")[0] == 0
    (tmp_path / "hyps").mkdir()
    (tmp_path / "hyps" / "m.hyp").write_text("mine\n")
    code, _, err = probe("evaluate", "--data", tmp_path, "--annotations", ann, "--model", f"m={ann}",
                         "--hyp-dir", tmp_path / "hyps")
    assert code == 2 and "m.hyp exists and docctx-probe did not write it" in error_line(err, "docctx-probe")


def test_docctx_analyze_average_and_generate(toy_bin, concat_both_ckpt, tmp_path, capsys):
    from fairseq_docctx.cli.analyze import cli_main as analyze_main
    from fairseq_docctx.cli.average import cli_main as average_main
    from fairseq_docctx.cli.generate import cli_main as generate_main

    out = tmp_path / "an"
    out.mkdir()
    (out / "hrnn_gates.tsv").write_text("mine\n")
    code, _, err = run_in_process(analyze_main, ["hrnn", "--path", concat_both_ckpt, "--doc", "0", "--sentence",
                                                 "0", "--outdir", out], capsys)
    assert code == 2 and "hrnn_gates.tsv exists and docctx-analyze did not write it" in error_line(
        err, "docctx-analyze")
    # docctx-average: the same checkpoint twice averages to itself
    avg = tmp_path / "avg" / "avg.pt"  # a missing folder is made
    args = ["--inputs", concat_both_ckpt, concat_both_ckpt, "-o", avg]
    assert run_in_process(average_main, args, capsys)[0] == 0
    assert run_in_process(average_main, args, capsys)[0] == 0  # its own: replaced
    theirs = tmp_path / "theirs.pt"
    theirs.write_bytes(b"not mine to lose")
    code, _, err = run_in_process(average_main, ["--inputs", concat_both_ckpt, "-o", theirs], capsys)
    assert code == 2 and "exists and docctx-average did not write it" in error_line(err, "docctx-average")
    assert theirs.read_bytes() == b"not mine to lose"
    # docctx-generate: a generate-test.txt of the user's in --results-path
    res = tmp_path / "res"
    res.mkdir()
    (res / "generate-test.txt").write_text("mine\n")
    code, _, err = run_in_process(generate_main, ["--processes", "2", "--", toy_bin, "--user-dir",
                                                  str(Path(__file__).parents[1] / "fairseq_docctx"), "--task",
                                                  "document_translation", "--path", concat_both_ckpt, "--gen-subset",
                                                  "test", "--cpu", "--results-path", res], capsys)
    assert code == 2 and "generate-test.txt exists and docctx-generate did not write it" in err, err
    assert (res / "generate-test.txt").read_text() == "mine\n"


def test_docctx_drafts_never_replaces_drafts_files_it_did_not_make(toy_bin, tmp_path, tmp_path_factory):
    from conftest import REPO, TINY_MODEL

    data = tmp_path / "bin"
    shutil.copytree(toy_bin, data)
    (data / "test.src-tgt.draft.bin").write_bytes(b"mine")
    sent = tmp_path / "sent"
    run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-update", "2",
         "--no-epoch-checkpoints", "--save-dir", sent])
    p = run(["docctx-drafts", data, "--path", sent / "checkpoint_last.pt", "--splits", "test", "--cpu"], check=False)
    assert p.returncode == 2 and "test.src-tgt.draft.bin exists and docctx-drafts did not write it" in p.stderr
    assert (data / "test.src-tgt.draft.bin").read_bytes() == b"mine"


def test_setup_wordnet_never_deletes_a_folder_it_did_not_install(tmp_path):
    from fairseq_docctx.evaluation.wordnet import setup_wordnet

    theirs = tmp_path / "corpora" / "wordnet"
    theirs.mkdir(parents=True)
    (theirs / "notes.txt").write_text("mine\n")
    with pytest.raises(OutputClash, match="did not write it: give another folder, or --force"):
        setup_wordnet(str(tmp_path), log=lambda *a: None)
    assert (theirs / "notes.txt").read_text() == "mine\n"
