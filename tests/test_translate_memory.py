"""docctx-translate holds the documents still open, not the whole output: what it keeps
of a written document does not grow with the input, and the input is read as it is needed
(the RSS figures are in docs/benchmarks.md, benchmarks/bench_translate_memory.py)."""
import gc

import torch

from conftest import run_in_process
from fairseq_docctx.cli.translate import cli_main as translate_main
from fairseq_docctx.data import documents, writers


def _live_tensors():
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_written_documents_are_not_kept(concat_both_ckpt, toy_bin, tmp_path, capsys, monkeypatch):
    """The tensors alive when the 20th document is written are those alive at the 5th:
    a written document's hypotheses (beam, attention, scores) are not kept."""
    src = tmp_path / "in.txt"
    src.write_text("\n\n".join(["w1 w2 w3\nw4 w5"] * 20) + "\n")
    live, written = {}, [0]
    write = writers.DocumentWriter.write

    def counting_write(self, doc, translation):
        written[0] += 1
        if written[0] in (5, 20):  # (a count walks every object of the test process)
            live[written[0]] = _live_tensors()
        return write(self, doc, translation)

    monkeypatch.setattr(writers.DocumentWriter, "write", counting_write)
    code, out, err = run_in_process(translate_main, [
        src, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet", "--beam", "4",
        "--batch-size", "4", "--max-len-b", "4", "--input-format", "blank"], capsys)
    assert code == 0, err
    assert len(out.split("\n\n")) == 20 and written[0] == 20
    assert live[20] - live[5] <= 8, live


def test_input_sentences_are_held_packed(concat_both_ckpt, toy_bin, tmp_path, capsys, monkeypatch):
    """The tensors alive when a long document is written do not grow with its length: its
    sentences are held packed (a few bytes a token), not as a tensor each."""
    first = {}  # n -> live tensors when the first document is written
    write = writers.DocumentWriter.write

    def counting_write(self, doc, translation):
        first.setdefault(n, _live_tensors())
        return write(self, doc, translation)

    monkeypatch.setattr(writers.DocumentWriter, "write", counting_write)
    for n in (4, 60):
        src = tmp_path / f"in{n}.txt"
        src.write_text("w1 w2 w3\nw4 w5\n" * n + "\nw1\n")  # a document of 2n sentences, then one more
        code, out, err = run_in_process(translate_main, [
            src, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet", "--beam", "2",
            "--batch-size", "4", "--max-len-b", "2", "--input-format", "blank"], capsys)
        assert code == 0, err
    assert first[60] - first[4] <= 8, first


def _live_documents():
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, documents.Document))


def test_documents_are_read_as_they_are_needed(concat_both_ckpt, toy_bin, tmp_path, capsys, monkeypatch):
    """200 documents at --batch-size 1 (chunks of 16 documents): the documents read and not
    yet forgotten, counted as every 20th is written, are at most a chunk's, not the input's."""
    from fairseq_docctx.inference.translate import STREAM_BATCHES

    src = tmp_path / "in.txt"
    src.write_text("".join(f"w{k % 30}\n\n" for k in range(200)))
    live = []
    write = writers.DocumentWriter.write

    def counting_write(self, doc, translation):
        if self.count % 20 == 19:
            live.append(_live_documents())
        return write(self, doc, translation)

    monkeypatch.setattr(writers.DocumentWriter, "write", counting_write)
    code, out, err = run_in_process(translate_main, [
        src, "--path", concat_both_ckpt, "--data", toy_bin, "--quiet", "--beam", "1", "--batch-size", "1",
        "--max-len-b", "2", "--input-format", "blank"], capsys)
    assert code == 0, err
    assert len(out.split("\n\n")) == 200 and len(live) == 10
    assert max(live) <= STREAM_BATCHES, live
