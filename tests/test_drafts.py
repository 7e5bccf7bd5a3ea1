"""docctx-drafts: a sentence-level model's translations of every source sentence, the drafts
of the Multi-Hop Transformer (Zhang et al. 2021, §3.1), and the ``draft`` context side."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, TINY_MODEL, run, run_in_process, venv_env

import fairseq_docctx  # noqa: F401  (declares the draft side)
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.data import manifest as mf
from fairseq_docctx.data.drafts import DraftSentences, DraftsError, draft_prefix
from fairseq_docctx.hub import load_draft_translator
from fairseq_docctx.inference.drafts import make_drafts

BATCH = ["--beam", "4", "--batch-size", "8"]


def _copy(src, dest):
    """A copy of a prepared data directory without drafts."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.draft.*", ".docctx-drafts"))
    return Path(dest)


@pytest.fixture(scope="module")
def data(toy_bin, tmp_path_factory):
    return _copy(toy_bin, tmp_path_factory.mktemp("drafts") / "bin")


@pytest.fixture(scope="module")
def sent_ckpt(data, tmp_path_factory):
    """A tiny sentence-level transformer (src -> tgt) trained with fairseq's translation task."""
    save = tmp_path_factory.mktemp("drafts_sent")
    run(["fairseq-train", data, "--user-dir", REPO / "fairseq_docctx", "--task", "translation",
         "-s", "src", "-t", "tgt", "--arch", "transformer", *TINY_MODEL, "--max-tokens", "1000",
         "--max-update", "120", "--disable-validation", "--no-epoch-checkpoints",
         "--save-interval", "1000", "--save-dir", save])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def made(data, sent_ckpt):
    """Drafts of train and valid, made in one uninterrupted run (test is left without)."""
    return make_drafts(data, sent_ckpt, splits=["train", "valid"], beam=4, batch_size=8, cpu=True)


def _drafts(data, split):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    ds = MMapIndexedDataset(draft_prefix(str(data), split, "src", "tgt"))
    return [ds[i].tolist() for i in range(len(ds))]


def _sentences(data, split, lang):
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    return len(MMapIndexedDataset(str(data / f"{split}.src-tgt.{lang}")))


def test_drafts_equal_fairseq_generate(data, sent_ckpt, made):
    from fairseq.data import Dictionary

    assert [r.split for r in made] == ["train", "valid"] and not any(r.skipped for r in made)
    for r in made:  # one draft per source sentence, each ending in EOS
        drafts = _drafts(data, r.split)
        assert len(drafts) == r.sentences == _sentences(data, r.split, "src") > 0
        assert all(d[-1] == 2 for d in drafts)
        assert mf.drafts_record(data, r.split) == mf.DraftsRecord(
            files=[f"{r.split}.src-tgt.draft.bin", f"{r.split}.src-tgt.draft.idx"],
            sentences=r.sentences, checkpoint=os.path.abspath(sent_ckpt),
            checkpoint_sha1=mf.drafts_record(data, r.split).checkpoint_sha1, beam=4, batch_size=8)
    assert not (data / ".docctx-drafts").exists()  # the work directory is gone
    # fairseq-generate's best hypotheses of the same checkpoint and beam, as token ids
    p = run(["fairseq-generate", data, "--user-dir", REPO / "fairseq_docctx", "--task", "translation",
             "-s", "src", "-t", "tgt", "--path", sent_ckpt, "--gen-subset", "valid", *BATCH,
             "--required-batch-size-multiple", "1", "--cpu"])
    d = Dictionary.load(str(data / "dict.tgt.txt"))
    hyp = {}
    for line in p.stdout.splitlines():
        if line.startswith("H-"):
            key, _, text = line.split("\t")
            hyp[int(key[2:])] = d.encode_line(text, add_if_not_exist=False, append_eos=True).tolist()
    drafts = _drafts(data, "valid")
    assert sorted(hyp) == list(range(len(drafts)))
    assert [hyp[i] for i in range(len(drafts))] == drafts
    assert len({tuple(x) for x in drafts}) > len(drafts) // 2  # real translations, not one string


def test_drafts_on_the_fly_equal_the_files(data, sent_ckpt, made):
    """What the hub does for raw input: translate binarized sentences, hand them to a
    document dataset as the draft side."""
    from fairseq.data import LanguagePairDataset
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    from fairseq_docctx.data.doc_index import DocIndex, doc_index_path
    from fairseq_docctx.data.document_dataset import DocumentPairDataset

    tr = load_draft_translator(sent_ckpt, data, beam=4, cpu=True)
    src = MMapIndexedDataset(str(data / "valid.src-tgt.src"))
    sents = [src[i] for i in range(len(src))]
    drafts = tr.translate(sents, batch_size=8)
    assert [d.tolist() for d in drafts] == _drafts(data, "valid")
    pair = LanguagePairDataset(sents, [len(s) for s in sents], tr.source_dictionary,
                               tgt_dict=tr.target_dictionary, shuffle=False)
    docs = DocIndex.read(doc_index_path(str(data), "valid", "src", "tgt"))
    ds = DocumentPairDataset(pair, docs, 1, "src,draft", shuffle=False,
                             side_data={"draft": DraftSentences(drafts)})
    batch = ds.collater([ds[i] for i in range(len(ds))])
    t = cb.table(cb.get_context(batch), "draft")
    for b, i in enumerate(batch["id"].tolist()):
        assert t.tokens[t.self_rows[b]][: len(drafts[i])].tolist() == drafts[i].tolist()


def test_finished_split_is_skipped_and_other_settings_remake_it(data, sent_ckpt, made, tmp_path):
    notes = []
    again = make_drafts(data, sent_ckpt, splits=["valid"], beam=4, batch_size=8, cpu=True, log=notes.append)
    assert again[0].skipped and again[0].translated == 0
    assert any("already made" in n for n in notes)
    d = tmp_path / "bin"
    shutil.copytree(data, d)  # with its drafts
    notes = []
    other = make_drafts(d, sent_ckpt, splits=["valid"], beam=1, batch_size=8, cpu=True, log=notes.append)
    assert not other[0].skipped and other[0].translated == other[0].sentences
    assert any("other settings or data: making them again" in n for n in notes)
    assert mf.drafts_record(d, "valid").beam == 1


def _task(data, sides="src,draft", k=2):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--task", "document_translation", "-s", "src", "-t", "tgt", "--arch", "transformer",
        "--context-size", str(k), "--context-sides", sides])
    return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def test_task_carries_the_drafts_of_current_and_context_sentences(data, made):
    task = _task(data)
    task.load_dataset("valid")
    ds = task.datasets["valid"]
    drafts = _drafts(data, "valid")
    pad = task.target_dictionary.pad()
    batch = ds.collater([ds[i] for i in range(len(ds))])
    ctx = cb.get_context(batch)
    assert cb.sides(ctx) == ("src", "draft")
    t = cb.table(ctx, "draft")
    rows = [r[r.ne(pad)].tolist() for r in t.tokens]
    assert len(rows) == len(drafts) and not cb.left_padded(t.tokens, pad)  # each draft once
    ids, prev = batch["id"].tolist(), cb.context_ids(ctx)
    firsts = 0
    for b, i in enumerate(ids):
        assert rows[t.self_rows[b]] == drafts[i]  # the current sentence's draft
        for k in range(2):
            j = int(prev[b, k])
            if j < 0:
                assert t.index[b, k] == -1
                firsts += k == 0
            else:
                assert j == i - k - 1 and rows[t.index[b, k]] == drafts[j]
    assert 0 < firsts < len(ids)
    # fairseq's batch iterator over the split: every batch carries the draft side too
    itr = task.get_batch_iterator(ds, max_tokens=200, required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
    seen = 0
    for sample in itr:
        ctx = cb.get_context(sample)
        t = cb.table(ctx, "draft")
        for b, i in enumerate(sample["id"].tolist()):
            assert t.tokens[t.self_rows[b]][: len(drafts[i])].tolist() == drafts[i]
        seen += len(sample["id"])
    assert seen == len(drafts)


def test_split_without_drafts_has_no_draft_side(data, made, caplog):
    task = _task(data)
    task.load_dataset("test")  # made has no test drafts
    ds = task.datasets["test"]
    batch = ds.collater([ds[i] for i in range(min(len(ds), 12))])
    ctx = cb.get_context(batch)
    assert cb.sides(ctx) == ("src",) and not cb.has_side(ctx, "draft")
    assert "no 'draft' context sentences" in caplog.text


def test_drafts_of_another_count_are_an_error(data, made, tmp_path):
    d = _copy(data, tmp_path / "bin")
    for ext in ("bin", "idx"):  # valid's drafts put in place of test's
        shutil.copy(draft_prefix(str(data), "valid", "src", "tgt") + "." + ext,
                    draft_prefix(str(d), "test", "src", "tgt") + "." + ext)
    task = _task(d)
    with pytest.raises(DraftsError, match=r"test\.src-tgt\.draft\.idx: \d+ drafts, but split 'test'"):
        task.load_dataset("test")


def _cli(argv, capsys):
    from fairseq_docctx.cli.drafts import cli_main

    return run_in_process(cli_main, argv, capsys)


def _one_line_error(err):
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("WARNING")]
    assert len(lines) == 1 and lines[0].startswith("docctx-drafts: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_checkpoint_of_other_dictionaries_is_refused(data, sent_ckpt, tmp_path, capsys):
    # same size, other words: two words of the target dictionary swapped
    other = _copy(data, tmp_path / "other")
    lines = (other / "dict.tgt.txt").read_text().splitlines()
    lines[5], lines[6] = lines[6], lines[5]
    (other / "dict.tgt.txt").write_text("\n".join(lines) + "\n")
    code, _, err = _cli([other, "--path", sent_ckpt, "--splits", "valid", "--cpu"], capsys)
    line = _one_line_error(err)
    assert code == 2 and "dict.tgt.txt" in line and "differs" in line
    # another size
    (other / "dict.tgt.txt").write_text("\n".join(lines[:-1]) + "\n")
    code, _, err = _cli([other, "--path", sent_ckpt, "--splits", "valid", "--cpu"], capsys)
    assert code == 2 and "target dictionary" in _one_line_error(err)
    assert not list(other.glob("*.draft.*")) and not (other / ".docctx-drafts").exists()


def test_input_errors_are_one_line(data, sent_ckpt, tmp_path, capsys):
    code, _, err = _cli([tmp_path / "nowhere", "--path", sent_ckpt], capsys)
    assert code == 2 and "no such data directory" in _one_line_error(err)
    code, _, err = _cli([data, "--path", tmp_path / "none.pt"], capsys)
    assert code == 2 and "none.pt: no such checkpoint file" in _one_line_error(err)
    code, _, err = _cli([data, "--path", sent_ckpt, "--splits", "valid,dev", "--cpu"], capsys)
    assert code == 2 and "split 'dev'" in _one_line_error(err)
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    code, _, err = _cli([data, "--path", tmp_path / "broken.pt"], capsys)
    assert code == 2 and "broken.pt: not a readable fairseq checkpoint" in _one_line_error(err)


def test_interrupted_split_leaves_no_final_file_and_other_settings_start_over(data, sent_ckpt, made, tmp_path):
    d = _copy(data, tmp_path / "bin")

    class Stop(Exception):
        pass

    def stop_after_two_chunks(split, done, total):
        if done >= 24:
            raise Stop

    with pytest.raises(Stop):
        make_drafts(d, sent_ckpt, splits=["valid"], beam=4, batch_size=8, cpu=True,
                    chunk_sentences=8, progress=stop_after_two_chunks)
    prefix = draft_prefix(str(d), "valid", "src", "tgt")
    assert not os.path.exists(prefix + ".bin") and not os.path.exists(prefix + ".idx")
    assert mf.drafts_record(d, "valid") is None
    assert len(list((d / ".docctx-drafts").rglob("chunk-*.npz"))) == 2
    notes = []
    res = make_drafts(d, sent_ckpt, splits=["valid"], beam=4, batch_size=4, cpu=True,
                      chunk_sentences=8, log=notes.append)
    assert any("other settings: starting this split over" in n for n in notes), notes
    assert res[0].reused == 0 and res[0].translated == res[0].sentences
    assert _drafts(d, "valid") == _drafts(data, "valid")


@pytest.mark.slow  # ~16 s: make test-all
def test_killed_run_resumes_and_gives_the_same_drafts(data, sent_ckpt, made, tmp_path):
    d = _copy(data, tmp_path / "bin")
    argv = [sys.executable, "-m", "fairseq_docctx.cli.drafts", d, "--path", sent_ckpt, "--splits",
            "train", *BATCH, "--chunk-sentences", "8", "--cpu", "--quiet"]
    env = venv_env()
    env["OMP_NUM_THREADS"] = "1"
    work = d / ".docctx-drafts" / "train.src-tgt"
    p = subprocess.Popen([str(a) for a in argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not (work / "chunk-00000.npz").exists():
            assert p.poll() is None, p.communicate()
            assert time.time() < deadline
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == -signal.SIGKILL
    prefix = draft_prefix(str(d), "train", "src", "tgt")
    assert not os.path.exists(prefix + ".bin") and not os.path.exists(prefix + ".idx")
    assert mf.drafts_record(d, "train") is None
    finished = len(list(work.glob("chunk-*.npz")))
    total = -(-_sentences(d, "train", "src") // 8)  # upper bound on the number of chunks
    assert 1 <= finished < total
    r = run(argv)
    m = re.search(r"train: resuming: (\d+) of (\d+) chunks already done", r.stderr)
    assert m and int(m.group(1)) == finished, r.stderr
    assert re.search(r"train: \d+ sentences \(\d+ translated, \d+ from an earlier run\)", r.stderr)
    assert not work.exists()
    assert _drafts(d, "train") == _drafts(data, "train")  # as the uninterrupted run's


def test_a_second_run_in_the_same_folder_is_refused_while_the_first_works(data, sent_ckpt, tmp_path, capsys):
    d = _copy(data, tmp_path / "bin")
    argv = [d, "--path", sent_ckpt, "--splits", "train", *BATCH, "--chunk-sentences", "8", "--cpu", "--quiet"]
    env = venv_env()
    env["OMP_NUM_THREADS"] = "1"
    work = d / ".docctx-drafts" / "train.src-tgt"
    first = subprocess.Popen([sys.executable, "-m", "fairseq_docctx.cli.drafts", *map(str, argv)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while not (work / "chunk-00000.npz").exists():
            assert first.poll() is None, first.communicate()
            assert time.time() < deadline
            time.sleep(0.002)
        first.send_signal(signal.SIGSTOP)  # the first run, paused in the middle of its work
        code, _, err = _cli(argv, capsys)
        assert code == 2 and "another docctx-drafts run is making drafts there" in _one_line_error(err)
        assert str(d) in _one_line_error(err)
    finally:
        first.kill()
        first.communicate()
    assert (work / "chunk-00000.npz").exists()  # its work is left as it was, to resume


def test_overwrite_says_what_it_overwrites_and_the_manifest_records_the_batch_size_used(data, sent_ckpt, made,
                                                                                       tmp_path, capsys):
    d = tmp_path / "bin"
    shutil.copytree(data, d)  # with its drafts (beam 4, batch size 8)
    code, _, err = _cli([d, "--path", sent_ckpt, "--splits", "valid", *BATCH, "--cpu", "--quiet", "--overwrite"],
                        capsys)
    assert code == 0, err
    assert "docctx-drafts: valid: overwriting the drafts made with the same settings (--overwrite)" in err
    assert "other settings" not in err
    # the default batches: --max-tokens 8000, recorded as such
    code, _, err = _cli([d, "--path", sent_ckpt, "--splits", "valid", "--beam", "4", "--cpu", "--quiet",
                         "--overwrite"], capsys)
    assert code == 0 and "valid: the drafts there were made with other settings or data" in err, err
    record = mf.drafts_record(d, "valid")
    assert record.max_tokens == 8000 and record.batch_size is None
    assert _drafts(d, "valid") == _drafts(data, "valid")


@pytest.mark.parametrize("option", [["--beam", "0"], ["--batch-size", "0"], ["--max-tokens", "-5"]])
def test_a_beam_or_batch_size_below_one_is_one_line(data, sent_ckpt, capsys, option):
    code, _, err = _cli([data, "--path", sent_ckpt, "--splits", "valid", "--cpu", "--quiet", *option], capsys)
    assert code == 2 and f"{option[0]} {option[1]}: must be at least 1" in _one_line_error(err)
