"""docctx-translate, docctx-score and the hub with inputs and checkpoints they must refuse or
keep intact: one-line errors (exit code 2) naming the file, XML attributes, the output file."""
import os
import shutil
import subprocess

import pytest
import torch

from conftest import run_in_process, venv_env
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.data.formats.xml import read_set_attributes
from fairseq_docctx.data.readers import read_file


def translate(argv, capsys):
    """Run docctx-translate in-process: (exit code, stdout, stderr)."""
    return run_in_process(translate_main, argv, capsys)


def one_line_error(err, prog="docctx-translate"):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------ checkpoints


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory, concat_both_ckpt, toy_bin):
    """Checkpoints that cannot be used, and data directories that do not fit the model."""
    d = tmp_path_factory.mktemp("bad")
    text = d / "notes.pt"
    text.write_text("this is not a checkpoint\n")
    truncated = d / "truncated.pt"
    data = concat_both_ckpt.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    # another data directory with one more type in its dictionaries
    bigger = d / "bigger"
    shutil.copytree(toy_bin, bigger)
    for lang in ("src", "tgt"):
        with open(bigger / f"dict.{lang}.txt", "a") as f:
            f.writelines(f"zz{i} 1\n" for i in range(8))
    # same size, other content (another language pair's dictionaries of the same size)
    other = d / "other"
    shutil.copytree(toy_bin, other)
    for lang in ("src", "tgt"):
        p = other / f"dict.{lang}.txt"
        p.write_text(p.read_text().replace("w1 ", "x1 ").replace("W1 ", "X1 "))
    # a checkpoint whose training data directory is gone, alone in its directory
    moved = d / "moved"
    moved.mkdir()
    state = torch.load(concat_both_ckpt, weights_only=False)
    state["cfg"]["task"]["data"] = str(d / "gone")
    torch.save(state, moved / "checkpoint.pt")
    return {"missing": d / "none.pt", "text": text, "truncated": truncated, "bigger": bigger,
            "other": other, "moved": moved / "checkpoint.pt"}


def _cases(b, ckpt, data):
    from fairseq.data import Dictionary

    n = len(Dictionary.load(str(data / "dict.src.txt")))  # joined: both sides the same
    return [
        (b["missing"], data, f"{b['missing']}: no such checkpoint file"),
        (b["text"], data, f"{b['text']}: not a readable fairseq checkpoint"),
        (b["truncated"], data, f"{b['truncated']}: not a readable fairseq checkpoint"),
        (ckpt, b["bigger"], f"{ckpt} was trained with a {n}-type source dictionary, --data {b['bigger']} has "
                            f"{n + 8}: give the data directory it was trained on"),
        (ckpt, b["other"], f"{ckpt} was trained with the dictionary {data}/dict.src.txt, which differs "
                           f"from --data {b['other']}/dict.src.txt"),
        (b["moved"], None, "the model was trained on"),
        # its training directory gone: the dictionary digests recorded in the checkpoint
        (b["moved"], b["other"], f"{b['moved']} was trained with another source dictionary than "
                                 f"--data {b['other']}'s (same size, other words)"),
    ]


def test_unusable_checkpoints_stop_docctx_translate_with_one_line(bad_checkpoints, concat_both_ckpt,
                                                                   toy_bin, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\nw3\n\nw4\n")
    for path, data, what in _cases(bad_checkpoints, concat_both_ckpt, toy_bin):
        argv = [src, "--path", path, "--quiet"] + (["--data", data] if data else [])
        code, out, err = translate(argv, capsys)
        line = one_line_error(err)
        assert code == 2 and what in line, (path, data, err)
        assert out == ""
        if data is None:  # the option, not the Python keyword
            assert "--data DIR" in line and "data=" not in line


def test_unusable_checkpoints_stop_docctx_score_and_the_hub(bad_checkpoints, concat_both_ckpt, toy_bin,
                                                              capsys, tmp_path):
    from fairseq_docctx.cli.score import build_parser
    from fairseq_docctx.cli.score import cli_main as score_main

    hyp = tmp_path / "hyp.txt"
    hyp.write_text("w1 w2\nw3\n\nw4\n")
    from fairseq_docctx.hub import CheckpointError, from_pretrained

    for path, data, what in _cases(bad_checkpoints, concat_both_ckpt, toy_bin):
        with pytest.raises(SystemExit) as e:
            score_main(["cxmi", "--path", str(path)] + (["--data", str(data)] if data else []))
        assert e.value.code == 2
        assert what in one_line_error(capsys.readouterr().err, "docctx-score cxmi")
        with pytest.raises(CheckpointError) as e:
            from_pretrained(str(path), data=str(data) if data else None)
        assert len(str(e.value).splitlines()) == 1
        assert what.replace("--data ", "data ") in str(e.value) or data is None
        if data is None:
            assert "data=DIR" in str(e.value)
    # the subcommand that reads a checkpoint's embeddings
    for key in ("missing", "text", "truncated"):
        args = build_parser().parse_args(["coherence", "--hyp", str(hyp), "--checkpoint", str(bad_checkpoints[key]),
                                          "--dict", str(toy_bin / "dict.tgt.txt")])
        assert args.func(args) == 2
        assert str(bad_checkpoints[key]) in one_line_error(capsys.readouterr().err, "docctx-score coherence")


# ------------------------------------------------------------------------------ inputs


def test_xml_output_keeps_set_and_document_attributes(concat_both_ckpt, toy_bin, tmp_path, capsys):
    src = tmp_path / "newstest.sgm"
    src.write_text('<srcset setid="newstest2019" srclang="src" trglang="tgt">\n'
                   '<doc docid="a-1" genre="news" origlang="src">\n<seg id="1">w1 w2</seg>\n'
                   '<seg id="2">w3 &lt; w4</seg>\n</doc>\n<doc docid="b-2" genre="talk">\n<seg id="7">w5</seg>\n'
                   '</doc>\n</srcset>\n')
    out = tmp_path / "out.sgm"
    code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "1",
                              "--max-len-b", "4", "--quiet", "-o", out, "--system-name", "my-system"], capsys)
    assert code == 0, err
    assert read_set_attributes(str(out)) == {"setid": "newstest2019", "srclang": "src", "trglang": "tgt"}
    docs, fmt = read_file(str(out), "xml", allow_empty=True)
    assert [d.attributes for d in docs] == [
        {"docid": "a-1", "genre": "news", "origlang": "src", "sysid": "my-system"},
        {"docid": "b-2", "genre": "talk", "sysid": "my-system"}]
    assert [d.seg_ids for d in docs] == [["1", "2"], ["7"]]


def test_context_separator_in_the_input_is_refused(concat_both_ckpt, toy_bin, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\nw3 <sep> w4\n\nw5\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet"], capsys)
    assert code == 2 and f"{src}:2: the context separator '<sep>'" in one_line_error(err)


def test_output_path_is_checked_before_the_work(concat_both_ckpt, toy_bin, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\nw3\n\nw4\n")
    (tmp_path / "file").write_text("x\n")
    for out, what in ((tmp_path / "file" / "out.txt", f"{tmp_path / 'file'} is not a folder"),
                      (tmp_path, "is a directory")):
        code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "-o", out], capsys)
        assert code == 2 and f"-o {out}" in one_line_error(err) and what in err, err
        assert "translating" not in err  # nothing was translated
    # a good run leaves the output and no temporary file; missing folders are made (as
    # docctx-average -o and every other command makes them)
    out = tmp_path / "new" / "dir" / "out.txt"
    code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "-o", out, "--quiet",
                              "--beam", "1", "--max-len-b", "3"], capsys)
    assert code == 0 and len(out.read_text().split("\n\n")) == 2
    assert sorted(os.listdir(tmp_path)) == ["file", "in.txt", "new"] and os.listdir(out.parent) == ["out.txt"]
    # a refused run leaves no folder it made
    code, _, err = translate([tmp_path / "absent.txt", "--path", concat_both_ckpt, "--data", toy_bin,
                              "-o", tmp_path / "other" / "out.txt"], capsys)
    assert code == 2 and not (tmp_path / "other").exists()


def test_documents_are_written_as_they_complete(concat_both_ckpt, toy_bin, tmp_path, capsys, monkeypatch):
    """An interrupted run has written the documents done so far (in the temporary file)."""
    from fairseq_docctx import hub as hub_module

    src = tmp_path / "in.txt"
    src.write_text("w1\n\nw2 w3\nw4\nw5\nw6\n")  # document 1 is done after the first batch
    seen = {}
    original = hub_module.DocumentHubInterface.generate_documents

    def interrupted(self, documents, *a, document_done=None, **kw):
        def done(i, hypos):
            document_done(i, hypos)
            part = [p for p in os.listdir(tmp_path) if p.endswith(".part")]
            seen[i] = (tmp_path / part[0]).read_text()
            raise KeyboardInterrupt
        return original(self, documents, *a, document_done=done, **kw)

    monkeypatch.setattr(hub_module.DocumentHubInterface, "generate_documents", interrupted)
    with pytest.raises(KeyboardInterrupt):
        translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "-o", tmp_path / "out.txt",
                   "--quiet", "--beam", "1", "--max-len-b", "3", "--input-format", "blank"], capsys)
    assert list(seen) == [0] and len(seen[0].splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]  # nothing half-written left in place


def test_invalid_utf8_and_empty_input_on_stdin(concat_both_ckpt, toy_bin):
    cmd = ["docctx-translate", "--path", str(concat_both_ckpt), "--data", str(toy_bin), "--quiet"]
    p = subprocess.run(cmd + ["--input-format", "blank"], input=b"w1 w2\n\nok\nbad \xff\n",
                       capture_output=True, env=venv_env())
    assert p.returncode == 2
    assert "docctx-translate: error: <stdin>:4: not valid UTF-8" in p.stderr.decode(), p.stderr
    # empty input: the same error as docctx-prepare's, not an empty output
    p = subprocess.run(cmd + ["--input-format", "blank"], input=b"", capture_output=True, env=venv_env())
    assert p.returncode == 2 and p.stdout == b""
    assert "docctx-translate: error: <stdin>:1: no documents" in p.stderr.decode()


def test_progress_counts_sentences_of_the_total(concat_both_ckpt, toy_bin, tmp_path, capsys):
    """In document order the documents finish late; the bar counts sentences."""
    src = tmp_path / "in.txt"
    src.write_text("w1\nw2\nw3\nw4\n\nw5\nw6\nw7\n")
    code, _, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "1",
                              "--max-len-b", "2", "--batch-size", "2", "-o", tmp_path / "out.txt"], capsys)
    frames = [f for f in err.replace("\r", "\n").splitlines() if f.startswith("translating")]
    assert code == 0 and frames
    assert "0/7" in frames[0] and "7/7" in frames[-1] and "sent" in frames[-1]


@pytest.mark.slow  # ~16 s: make test-all
def test_sentence_level_model_in_length_sorted_batches_writes_every_document(toy_bin, tmp_path):
    """A model that does not read its own translations is decoded in fairseq's length-sorted
    batches, where documents complete in any order: every document is written, in input
    order, with the translations fairseq-generate gives the same sentences."""
    from conftest import REPO, TINY_MODEL, run
    from fairseq.data import Dictionary, data_utils

    save = tmp_path / "sent"
    run(["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
         "--context-size", "0", "--arch", "transformer", *TINY_MODEL, "--max-tokens", "600", "--max-epoch", "2",
         "--no-epoch-checkpoints", "--save-dir", save])
    g = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "translation",
             "--path", save / "checkpoint_last.pt", "--beam", "2", "--batch-size", "5", "--max-len-a", "1.2",
             "--max-len-b", "10", "--required-batch-size-multiple", "1", "--gen-subset", "test", "--cpu"])
    expected = {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in g.stdout.splitlines() if l.startswith("H-")}
    d = Dictionary.load(str(toy_bin / "dict.src.txt"))
    lines = [d.string(t) for t in data_utils.load_indexed_dataset(str(toy_bin / "test.src-tgt.src"), d)]
    docs = [l.split("\t") for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines()]
    src, ids = tmp_path / "in.txt", tmp_path / "in.docids"
    src.write_text("\n".join(lines) + "\n")
    ids.write_text("".join(f"{doc}\n" * int(n) for doc, n in docs))
    out = tmp_path / "out.txt"
    run(["docctx-translate", src, "--docids", ids, "--input-format", "docids", "--path", save / "checkpoint_last.pt",
         "--data", toy_bin, "--beam", "2", "--batch-size", "5", "--cpu", "--quiet", "-o", out])
    assert out.read_text().splitlines() == [expected[i] for i in range(len(lines))]
    assert (tmp_path / "out.docids").read_text() == ids.read_text()


# ------------------------------------------------------------------------ streamed input


def _read_line(stream, timeout):
    """The next line of a pipe, or None after ``timeout`` seconds without one."""
    import threading

    got = []
    t = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return got[0] if got else None


def test_input_is_translated_as_it_is_read(concat_both_ckpt, toy_bin, tmp_path):
    """Standard input that stays open: the documents of the first chunk (16 x --batch-size
    documents) are translated and written before the rest of the input is written; the
    output is that of the same input read from a file."""
    docs = [f"w{k % 30} w{(k * 7) % 30}\nw{(k * 3) % 30}" for k in range(20)]
    cmd = ["docctx-translate", "--path", str(concat_both_ckpt), "--data", str(toy_bin), "--quiet", "--beam", "1",
           "--max-len-b", "3", "--batch-size", "1", "--input-format", "blank"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=venv_env())
    try:
        p.stdin.write("".join(d + "\n\n" for d in docs[:16]).encode())  # the first chunk, complete
        p.stdin.flush()
        first = _read_line(p.stdout, 240)
        assert first is not None and first.strip(), "no translation before the input was complete"
        assert p.poll() is None  # still reading its input
        p.stdin.write("".join(d + "\n\n" for d in docs[16:]).encode())
        p.stdin.close()
        out = first + p.stdout.read()
        err = p.stderr.read().decode()
        assert p.wait(timeout=240) == 0, err
    finally:
        if p.poll() is None:
            p.kill()
    src = tmp_path / "in.txt"
    src.write_text("".join(d + "\n\n" for d in docs))
    q = subprocess.run(cmd + [str(src)], capture_output=True, env=venv_env())
    assert q.returncode == 0 and out == q.stdout and len(out.decode().split("\n\n")) == 20


def test_a_sentence_that_shows_nothing_is_one_line(concat_both_ckpt, toy_bin, tmp_path, capsys):
    """A line of zero-width characters only is an empty sentence (docids format) or neither
    sentence nor document break (blank lines): one line naming file and line, nothing
    translated."""
    src, ids = tmp_path / "in.txt", tmp_path / "in.docids"
    src.write_text("w1 w2\n\u200b\u200b\nw3\n")
    ids.write_text("a\na\nb\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--input-format", "docids",
                                "--quiet"], capsys)
    assert code == 2 and out == ""
    assert one_line_error(err) == (f"docctx-translate: error: {src}:2: empty sentence in document 'a' "
                                   "(only invisible characters: U+200B)")
    src.write_text("w1 w2\n\u200b\n\nw3\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--input-format", "blank",
                                "--quiet"], capsys)
    assert code == 2 and out == "" and f"{src}:2: a line that shows nothing" in one_line_error(err)


def test_a_sentence_the_sentencepiece_model_normalises_to_nothing_is_one_line(concat_both_ckpt, toy_bin, tmp_path,
                                                                              capsys):
    """A line holding only SentencePiece's own space mark (U+2581), which shows but encodes to
    no token, is refused as an empty sentence, naming file and line, before any decoding."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["w1 w2 w3", "w4 w5 w6 w7"] * 20), model_writer=model,
                                   vocab_size=12, hard_vocab_limit=False, minloglevel=2)
    (tmp_path / "tiny.model").write_bytes(model.getvalue())
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\n\u2581\n\nw3\n")
    code, out, err = translate([src, "--path", concat_both_ckpt, "--data", toy_bin, "--spm-model",
                                tmp_path / "tiny.model", "--input-format", "blank", "--quiet"], capsys)
    assert code == 2 and out == ""
    assert one_line_error(err) == (f"docctx-translate: error: {src}:2: an empty sentence: the model's SentencePiece "
                                   "model normalises '\u2581' to nothing")


def test_data_prepared_without_sentencepiece_is_read_as_tokenized_without_a_warning(concat_both_ckpt, toy_bin,
                                                                                     tmp_path):
    """The toy data was prepared without SentencePiece (its docctx.json says so): a quiet run
    of the command prints nothing on standard error; data without a manifest still gets the
    warning."""
    from conftest import run

    src = tmp_path / "in.txt"
    src.write_text("w1 w2\nw3\n\nw4\n")
    opts = ["--quiet", "--beam", "1", "--max-len-b", "3"]
    p = run(["docctx-translate", src, "--path", concat_both_ckpt, "--data", toy_bin, *opts])
    assert p.stdout and p.stderr == "", p.stderr
    bare = tmp_path / "bare"
    shutil.copytree(toy_bin, bare)
    (bare / "docctx.json").unlink()
    p = run(["docctx-translate", src, "--path", concat_both_ckpt, "--data", bare, *opts])
    assert p.stdout and "no SentencePiece model recorded" in p.stderr, p.stderr
