"""benchmarks/bench_models.ensure_drafts: the benchmarks' drafts stream for mht_transformer
(Zhang et al. 2021, §3.1) is the split's references copied as drafts unless the data
directory already holds real drafts, which are never replaced."""
import json
import sys

import torch
from fairseq.data import data_utils, indexed_dataset
from fairseq.data.dictionary import Dictionary

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_models  # noqa: E402


def _stream(prefix, rows, vocab=20):
    b = indexed_dataset.make_builder(f"{prefix}.bin", impl="mmap", vocab_size=vocab)
    for r in rows:
        b.add_item(torch.tensor(r, dtype=torch.int32))
    b.finalize(f"{prefix}.idx")


def _rows(prefix):
    d = Dictionary()
    data = data_utils.load_indexed_dataset(str(prefix), d)
    return [data[i].tolist() for i in range(len(data))]


def test_references_copied_as_drafts_once(tmp_path):
    refs = [[5, 6, 2], [7, 2], [8, 9, 10, 2]]
    _stream(tmp_path / "train.en-de.de", refs)
    (tmp_path / "docctx.json").write_text("{}")
    assert bench_models.ensure_drafts(tmp_path, ["train"]) == {"train": "references"}
    assert _rows(tmp_path / "train.en-de.draft") == refs
    assert (tmp_path / "train.en-de.draft.references-as-drafts").exists()
    # a second call keeps the copy and still says what it is
    assert bench_models.ensure_drafts(tmp_path, ["train"]) == {"train": "references"}
    assert "copies of the references" in bench_models.drafts_note({"train": "references"})


def test_real_drafts_are_used_as_they_are(tmp_path):
    refs, drafts = [[5, 6, 2], [7, 2]], [[11, 2], [12, 13, 14, 2]]
    for split in ("train", "test"):
        _stream(tmp_path / f"{split}.en-de.de", refs)
    # train: drafts made by docctx-drafts (recorded); test: a drafts stream this script did not write
    _stream(tmp_path / "train.en-de.draft", drafts)
    _stream(tmp_path / "test.en-de.draft", drafts)
    (tmp_path / "docctx.json").write_text(json.dumps({"drafts": {"train": {"sentences": 2}}}))
    kinds = bench_models.ensure_drafts(tmp_path, ["train", "test"])
    assert kinds == {"train": "drafts", "test": "drafts"}
    for split in ("train", "test"):
        assert _rows(tmp_path / f"{split}.en-de.draft") == drafts
    assert not list(tmp_path.glob("*.references-as-drafts"))
    assert "docctx-drafts" in bench_models.drafts_note(kinds)


def test_recorded_drafts_win_over_an_old_copy(tmp_path):
    """docctx-drafts run after the benchmark replaced the copy: its record makes the stream real."""
    refs = [[5, 2]]
    _stream(tmp_path / "train.en-de.de", refs)
    (tmp_path / "docctx.json").write_text("{}")
    bench_models.ensure_drafts(tmp_path, ["train"])
    _stream(tmp_path / "train.en-de.draft", [[9, 9, 2]])
    (tmp_path / "docctx.json").write_text(json.dumps({"drafts": {"train": {}}}))
    assert bench_models.ensure_drafts(tmp_path, ["train"]) == {"train": "drafts"}
    assert _rows(tmp_path / "train.en-de.draft") == [[9, 9, 2]]
