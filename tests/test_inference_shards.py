"""Document-order inference over several processes: fairseq-generate's --num-shards/--shard-id,
docctx-generate and docctx-translate --processes."""
import os
import re
import sys
import time

import numpy as np
import pytest

from conftest import REPO, run, run_in_process
from fairseq_docctx.data.doc_index import DocIndex, balanced_shards
from fairseq_docctx.inference import shards
from fairseq_docctx.inference.generate import parse_generate_args, read_records

USER_DIR = str(REPO / "fairseq_docctx")


def test_documents_are_shared_out_whole_and_balanced_by_sentences():
    rng = np.random.RandomState(0)
    lengths = rng.randint(1, 30, size=101)
    for n in (1, 2, 3, 7):
        parts = balanced_shards(lengths, n)
        assert sorted(np.concatenate(parts).tolist()) == list(range(len(lengths)))  # a partition
        loads = [int(lengths[p].sum()) for p in parts]
        assert max(loads) - min(loads) <= lengths.max()
        assert all((a == b).all() for a, b in zip(parts, balanced_shards(lengths, n)))  # deterministic
    docs = DocIndex([f"d{i}" for i in range(len(lengths))], lengths)
    sents = [docs.shard_sentences(3, i) for i in range(3)]
    assert sorted(np.concatenate(sents).tolist()) == list(range(docs.num_sentences))
    for s in sents:  # whole documents
        d = np.unique(docs.sent_doc[s])
        assert len(s) == int(lengths[d].sum())
    assert [len(p) for p in balanced_shards([5, 1], 3)] == [1, 1, 0]


def _shard_ids(toy_bin, num_shards, shard_id, *extra):
    from fairseq import tasks

    cfg = parse_generate_args([str(toy_bin), "--user-dir", USER_DIR, "--task", "document_translation",
                               "--gen-subset", "test", "--num-shards", str(num_shards),
                               "--shard-id", str(shard_id), *extra])
    task = tasks.setup_task(cfg.task)
    task.load_dataset("test")
    ds = task.dataset("test")
    batches = list(task.get_batch_iterator(ds, max_tokens=60).next_epoch_itr(shuffle=False))
    return ds, [b["id"].tolist() for b in batches]


@pytest.mark.parametrize("context", [["--context-size", "2", "--context-sides", "both"],
                                     ["--context-size", "0"]])
def test_each_shard_decodes_only_its_documents_with_the_split_ids(toy_bin, context):
    whole, _ = _shard_ids(toy_bin, 1, 0, *context)
    seen = []
    for i in range(2):
        ds, batches = _shard_ids(toy_bin, 2, i, *context)
        assert ds.position_major == (context[1] == "2")  # document order with target context
        ids = [j for b in batches for j in b]
        assert sorted(ids) == ds.docs.shard_sentences(2, i).tolist()
        if ds.position_major:  # a batch holds one position of the shard's documents
            assert all(len(set(ds.docs.sent_pos[b])) == 1 for b in batches)
        seen += ids
    assert sorted(seen) == list(range(len(whole)))  # the shards partition the split


def test_a_bad_shard_id_is_refused(toy_bin):
    with pytest.raises(ValueError, match=r"--shard-id 2 with --num-shards 2: the shard id must be in 0\.\.1"):
        _shard_ids(toy_bin, 2, 2, "--context-size", "2", "--context-sides", "both")


def test_a_failing_shard_stops_the_others_and_reports_its_error(tmp_path):
    ok = [sys.executable, "-c", "import time; time.sleep(120)"]
    bad = [sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit('shard one: no such model')"]
    start = time.time()
    with pytest.raises(shards.ShardError, match=r"(?s)shard 1 of 2 failed \(exit code 1\).*no such model"):
        shards.run_shards([ok, bad], [dict(os.environ)] * 2, str(tmp_path))
    assert time.time() - start < 60  # the sleeping shard was stopped


def test_devices_are_given_one_per_process_in_turn():
    envs = [shards.shard_environment(i, 3, ["0", "1"], base={}) for i in range(3)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0"]
    cpu = shards.shard_environment(0, 2, None, base={})
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and int(cpu["OMP_NUM_THREADS"]) >= 1
    assert shards.num_processes(None, ["0", "1"]) == 2


def test_devices_are_gpus_this_process_sees():
    """``--devices`` numbers the GPUs this process sees (under CUDA_VISIBLE_DEVICES=2,3 device
    0 is GPU 2); a GPU that is not there, or --cpu beside it, is refused, not run on the CPU."""
    assert shards.parse_devices("0,1", available=2) == ["0", "1"]
    for spec, cpu, said in (("0,2", False, "--devices 0,2: GPU 2 is not there: this machine shows 2 GPUs (0-1)"),
                            ("0", False, "--devices 0: GPU 0 is not there: this machine shows no GPU to torch"),
                            ("0", True, "--cpu and --devices 0: the processes run on the GPUs of --devices"),
                            ("gpu0", False, "--devices gpu0: expected a comma-separated list of GPU numbers")):
        with pytest.raises(ValueError, match=re.escape(said)):
            shards.parse_devices(spec, cpu=cpu, available=2 if spec == "0,2" else 0)
    envs = [shards.shard_environment(i, 2, ["0", "1"], base={"CUDA_VISIBLE_DEVICES": "2,3"}) for i in range(2)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["2", "3"]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_devices_on_a_machine_without_a_gpu_are_refused(concat_both_ckpt, toy_bin, tmp_path, capsys):
    """``docctx-translate --devices 0`` where torch sees no GPU: one line, exit 2, nothing
    translated or written (not a silent decoding on the CPU)."""
    from fairseq_docctx.cli.translate import cli_main

    out = tmp_path / "out.txt"
    code, stdout, err = run_in_process(cli_main, [toy_bin.parent / "raw" / "test.src", "--path", concat_both_ckpt,
                                                  "--data", toy_bin, "--devices", "0", "--quiet", "-o", out], capsys)
    assert code == 2 and not stdout and err.strip().splitlines() == [
        "docctx-translate: error: --devices 0: GPU 0 is not there: this machine shows no GPU to torch; leave out "
        "--devices to decode on the CPU"], err
    assert os.listdir(tmp_path) == []


def _generate_args(probe, concat_model):
    return [probe["data_bin"], "--user-dir", USER_DIR, "--task", "document_translation",
            "--path", concat_model["checkpoint"], "--gen-subset", "valid", "--beam", "2",
            "--nbest", "2", "--max-tokens", "1000"]


@pytest.mark.slow  # make test: test_batch_independence.py decodes the same way in 2 processes
def test_generate_in_two_processes_gives_the_single_process_output(probe, concat_model, tmp_path, capsys):
    from fairseq_docctx.cli.generate import cli_main

    args = _generate_args(probe, concat_model)
    single = tmp_path / "single.out"
    single.write_text(run(["fairseq-generate", *args]).stdout)
    code, out, err = run_in_process(cli_main, ["--processes", "2", "--work-dir", tmp_path / "work", "--", *args],
                                    capsys)
    assert code == 0, err
    merged = tmp_path / "merged.out"
    merged.write_text(out)
    one, two = read_records(str(single)), read_records(str(merged))
    assert list(two) == sorted(one) and len(one) == sum(1 for _ in open(probe["text"] + "/valid.src"))
    for i in one:
        assert len(one[i]) == len(two[i]) == 2 + 3 * 2  # S, T and --nbest 2 times H, D, P
        for x, y in zip(one[i], two[i]):  # in the order printed
            fa, fb = x.split("\t"), y.split("\t")
            if x[0] in "ST":
                assert x == y
            elif x[0] in "HD":  # the same hypothesis; its score up to float rounding (other batches)
                assert fa[0] == fb[0] and fa[2:] == fb[2:]
                assert float(fa[1]) == pytest.approx(float(fb[1]), rel=1e-5, abs=1e-5)
            else:  # P: token scores, printed to 4 decimals
                assert fa[0] == fb[0]
                assert np.allclose([float(v) for v in fa[1].split()], [float(v) for v in fb[1].split()],
                                   atol=2e-4, rtol=0)
    # each shard printed only its own documents
    logs = [read_records(str(tmp_path / "work" / f"shard-{k}.out")) for k in range(2)]
    assert set(logs[0]).isdisjoint(logs[1]) and len(logs[0]) and len(logs[1])
    score = re.compile(r"^Generate valid with beam=2: BLEU4 = .*$", re.M)
    assert score.search(single.read_text()).group(0) == score.search(merged.read_text()).group(0)
    assert re.search(r"Translated {:,} sentences .* with 2 processes".format(len(one)), out)


def test_docctx_generate_refuses_options_it_sets_and_reports_a_failing_shard(probe, concat_model, capsys):
    from fairseq_docctx.cli.generate import cli_main

    args = _generate_args(probe, concat_model)
    code, _, err = run_in_process(cli_main, ["--processes", "2", "--", *args, "--num-shards", "2"], capsys)
    assert code == 2 and "--num-shards is set by docctx-generate" in err
    missing = [a if a != concat_model["checkpoint"] else a + ".missing" for a in args]
    code, _, err = run_in_process(cli_main, ["--processes", "2", "--", *missing], capsys)
    assert code == 1 and re.search(r"fairseq-generate shard \d of 2 failed", err)
    assert "checkpoint_last.pt.missing" in err  # fairseq's own error, from the shard's stderr


@pytest.mark.slow  # make test: tests/test_batch_independence.py and tests/test_ctranslate2.py translate in 2 processes
def test_translate_in_two_processes_gives_the_single_process_output(probe, concat_model, tmp_path, capsys):
    from fairseq_docctx.cli.translate import cli_main

    src = os.path.join(probe["text"], "valid.src")
    common = [src, "--path", concat_model["checkpoint"], "--data", probe["data_bin"], "--beam", "2",
              "--batch-size", "8", "--cpu", "--quiet"]
    code, _, err = run_in_process(cli_main, common + ["-o", tmp_path / "one.txt"], capsys)
    assert code == 0, err
    code, _, err = run_in_process(cli_main, common + ["--processes", "2", "-o", tmp_path / "two.txt"], capsys)
    assert code == 0, err
    one, two = (tmp_path / "one.txt").read_text(), (tmp_path / "two.txt").read_text()
    assert one == two and len(set(one.splitlines())) > 20  # same translations, and not all alike
    assert (tmp_path / "one.docids").read_text() == (tmp_path / "two.docids").read_text()
