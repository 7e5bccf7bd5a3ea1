"""docctx-generate on sentences longer than the model allows and on output directories it
cannot write: each sentence left out named, one error line and exit code 2, checked before
any decoding where it can be."""
import re

import pytest

from conftest import REPO, run_in_process
from fairseq_docctx.inference.generate import read_records

USER_DIR = str(REPO / "fairseq_docctx")
#: a limit some of the toy valid sentences exceed
MAX_SOURCE = 9


def _args(toy_bin, ckpt, *extra, limit=True):
    return [toy_bin, "--user-dir", USER_DIR, "--task", "document_translation", "--path", ckpt,
            "--gen-subset", "valid", "--beam", "1", "--max-tokens", "1000",
            *(["--max-source-positions", str(MAX_SOURCE)] if limit else []), *extra]


def _too_long(toy_bin):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    ds = MMapIndexedDataset(str(toy_bin / "valid.src-tgt.src"))
    sizes = ds.sizes.tolist()  # a copy: the dataset's memory map closes with it
    return [i for i, s in enumerate(sizes) if s > MAX_SOURCE], len(sizes)


def _cli(argv, capsys):
    from fairseq_docctx.cli.generate import cli_main

    return run_in_process(cli_main, argv, capsys)


def _lines(err):
    return [ln for ln in err.splitlines() if ln.startswith("docctx-generate:")]


def _error_line(err):
    assert "Traceback" not in err, err
    lines = [ln for ln in _lines(err) if ln.startswith("docctx-generate: error: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow  # ~18 s: make test-all
def test_skipped_sentences_are_each_reported_and_fail_the_run_unless_allowed(toy_bin, concat_both_ckpt,
                                                                             tmp_path, capsys):
    long_ids, total = _too_long(toy_bin)
    assert 0 < len(long_ids) < total
    # oracle target context: a skipped sentence is no one's context
    args = _args(toy_bin, concat_both_ckpt, "--target-context", "reference")
    code, out, err = _cli(["--", *args, "--skip-invalid-size-inputs-valid-test"], capsys)
    left_out = [int(m.group(1)) for m in re.finditer(r"^docctx-generate: sentence (\d+) of valid left out: "
                                                     r"longer than the model allows", err, re.M)]
    assert code == 2 and left_out == long_ids, err
    assert f"{len(long_ids)} sentences of valid are left out" in _error_line(err)
    assert "--allow-skipped" in _error_line(err)
    merged = tmp_path / "out.txt"
    merged.write_text(out)  # the output of the other sentences is there
    assert sorted(read_records(str(merged))) == sorted(set(range(total)) - set(long_ids))
    assert re.search(rf"Translated {total - len(long_ids)} sentences .*; {len(long_ids)} sentences "
                     r"left out as too long \(ids: " + ", ".join(map(str, long_ids)) + r"\)", out)
    # asked for: exit 0, each still reported (the fairseq option is implied)
    code, out, err = _cli(["--allow-skipped", "--", *args], capsys)
    assert code == 0, err
    assert [ln for ln in _lines(err) if " left out: " in ln] == [
        f"docctx-generate: sentence {i} of valid left out: longer than the model allows "
        f"(max_positions=({MAX_SOURCE}, 1024))" for i in long_ids]


def test_a_sentence_too_long_is_one_line_without_skipping(toy_bin, concat_both_ckpt, capsys):
    long_ids, _ = _too_long(toy_bin)
    code, _, err = _cli(["--", *_args(toy_bin, concat_both_ckpt)], capsys)
    line = _error_line(err)
    assert code == 2, err
    # the task's line (the first sentence too long, in corpus order), and what docctx-generate does with skipping
    first = long_ids[0]
    assert re.match(rf"docctx-generate: error: valid: sentence {first} \(document '[^']+', its sentence \d+\): its "
                    rf"source \({re.escape(str(toy_bin / 'valid.src-tgt.src'))}\) has \d+ tokens, more than the "
                    rf"model's {MAX_SOURCE} source positions \({len(long_ids) - 1} more of valid are too long: "
                    + ", ".join(map(str, long_ids[1:])) + r"\): shorten or split it, .*, or leave it out with "
                    r"--skip-invalid-size-inputs-valid-test \(each sentence left out is reported; --allow-skipped "
                    r"accepts the output without them\)$", line), line


def test_skipping_a_sentence_the_next_ones_need_as_context_is_one_line(toy_bin, concat_both_ckpt, capsys):
    # target context from the model's own translations: a sentence left out is missing context
    code, _, err = _cli(["--", *_args(toy_bin, concat_both_ckpt), "--skip-invalid-size-inputs-valid-test"],
                        capsys)
    line = _error_line(err)
    assert code == 2 and "is target context of the next sentences" in line, err
    assert "--target-context reference" in line


@pytest.mark.parametrize("option", ["--results-path", "--work-dir"])
def test_an_unwritable_output_directory_is_refused_before_decoding(toy_bin, concat_both_ckpt, tmp_path,
                                                                   capsys, option):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    where = blocker / "out"
    work = tmp_path / "work"
    args = _args(toy_bin, concat_both_ckpt, limit=False)
    if option == "--results-path":
        argv = ["--work-dir", work, "--", *args, "--results-path", where]
    else:
        argv = ["--work-dir", where, "--", *args]
    code, _, err = _cli(argv, capsys)
    line = _error_line(err)
    assert code == 2 and line.startswith(f"docctx-generate: error: {option} {where}: cannot write there"), err
    assert "Not a directory" in line
    assert not work.exists() or not list(work.iterdir())  # refused before any decoding
    assert blocker.read_text() == "not a directory\n"
