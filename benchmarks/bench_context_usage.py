"""Do the training methods of docs/context-usage.md make a model use its context more? A
``concat_transformer`` (K=2, source and target context; the context probe's tiny size and
training settings, ``tests/probe_utils.py``) trained on the context probe (``fairseq_docctx.probe``:
a pronoun whose class a noun one or two sentences back sets, a word whose translation an earlier
mention fixes) for the same number of updates with each method and without, on the same data
(the probe prepared by ``docctx-prepare --mask-symbol <mask>``, so every run has the same
dictionary).

For every run: the probe's accuracy on the words that need context (beam 4, the test split,
document order with the model's own translations as target context) and CXMI on the test split
(``docctx-score cxmi``: nats per target token of the references with the true context against
none, and against a random document's context; seed 1).

Runs (``--runs``): ``baseline`` (no method), ``coword`` (``--coword-dropout P``, Fernandes et al.
2021, §3; P from ``--coword-dropout``, 0.1 as in the authors' code), ``focused`` (the
context-discounted loss of Lupo et al. 2022, ``label_smoothed_cross_entropy_focused
--context-loss-weight 0.01`` as in the authors' scripts), ``focused-shift`` (the same with
``--segment-shifted-positions 8``, about the probe's sentence length: the authors' scripts shift
by about a sentence's length, 21 on IWSLT17); and divide-and-rule pre-training (Lupo et al. 2022,
ACL) as its authors schedule it: a sentence-level ``transformer`` (K0, ``--updates`` updates, seed
1) starts a ``han_encoder_transformer`` reading the two previous source sentences with the
sentence weights frozen, trained ``--updates`` updates on the documents (``han``), or half of them
on the training pairs split in two at their middle (``docctx-prepare --split-sentences middle
--split-min-len 4``: the probe's sentences have 5 to 9 words) and half on the documents
(``han-divide-rule``).

    python -m benchmarks.bench_context_usage --updates 300 --seeds 1,2,3 --runs baseline,coword

The figures of docs/context-usage.md came from this script.
"""
import argparse
import os
import shutil
import time

from benchmarks.probe_hrnn import add_job_args, run_jobs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = ["--context-size", "2", "--context-sides", "both"]


HAN = ["--context-size", "2", "--context-sides", "source", "--han-context-size", "2",
       "--freeze-sentence-weights"]
DIVIDE_RULE = ["han", "han-divide-rule"]


def runs(coword: float) -> dict:
    """Run name -> the task/model options of its method (the ``concat_transformer`` runs)."""
    focused = ["--criterion", "label_smoothed_cross_entropy_focused", "--context-loss-weight", "0.01"]
    return {"baseline": [], "coword": ["--coword-dropout", str(coword)], "focused": focused,
            "focused-shift": focused + ["--segment-shifted-positions", "8"]}


def prepare(work: str) -> dict:
    """The probe's text (``tests/probe_utils.make_probe_data``) prepared by docctx-prepare with
    the mask symbol: {"data_bin", "annotations"}."""
    from benchmarks.toy import prepare_command, run
    from tests import probe_utils as pu

    probe_dir = os.path.join(work, "probe")
    data_bin = os.path.join(probe_dir, "data-bin-mask")
    annotations = os.path.join(probe_dir, "text", "test.probe.jsonl")
    if not os.path.isfile(os.path.join(data_bin, "docctx.json")):
        if not os.path.isfile(annotations):
            shutil.rmtree(probe_dir, ignore_errors=True)
            pu.make_probe_data(probe_dir)
        run([*prepare_command(os.path.join(probe_dir, "text"), data_bin), "--mask-symbol", "<mask>"])
    return {"data_bin": data_bin, "annotations": annotations}


def prepare_split(probe: dict) -> str:
    """The probe's training pairs split in two at their middle (``--split-sentences middle
    --split-min-len 4``), with the documents' dictionary; validation as it is."""
    from benchmarks.toy import run

    text = os.path.join(os.path.dirname(probe["data_bin"]), "text")
    split = probe["data_bin"] + "-split"
    if not os.path.isfile(os.path.join(split, "docctx.json")):
        run(["docctx-prepare", "-s", "src", "-t", "tgt", "--joined-dictionary", "--workers", "1",
             "--srcdict", os.path.join(probe["data_bin"], "dict.src.txt"),
             "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
             "--split-sentences", "middle", "--split-min-len", "4", "--mask-symbol", "<mask>",
             "--destdir", split])
    return split


def sentence_model(probe: dict, updates: int, work: str) -> str:
    """K0: the probe's sentence-level ``transformer``, ``updates`` updates, seed 1 (trained once)."""
    from tests import probe_utils as pu

    ckpt = os.path.join(work, f"k0-{updates}", "checkpoint_last.pt")
    if not os.path.isfile(ckpt):
        shutil.rmtree(os.path.dirname(ckpt), ignore_errors=True)
        pu.train(probe["data_bin"], "transformer", os.path.dirname(ckpt), task="document_translation",
                 extra_args=["--context-size", "0", "--seed", "1"], max_update=updates)
    return ckpt


def train_divide_rule(name, seed, updates, probe, work) -> str:
    """``han`` (K0, then the documents) or ``han-divide-rule`` (K0, then the split pairs, then
    the documents, half of the updates each); the last checkpoint."""
    from tests import probe_utils as pu

    stages = [(probe["data_bin"], updates)] if name == "han" else \
        [(probe["split"], updates // 2), (probe["data_bin"], updates - updates // 2)]
    init = ["--init-from-sentence-checkpoint", probe["k0"]]
    for i, (data, n) in enumerate(stages):
        save = os.path.join(work, f"{name}-{updates}-s{seed}-{i}")
        shutil.rmtree(save, ignore_errors=True)
        ckpt = pu.train(data, "han_encoder_transformer", save, task="document_translation",
                        extra_args=HAN + init + ["--seed", str(seed)], max_update=n)["checkpoint"]
        init = ["--finetune-from-model", ckpt]
    return ckpt


def one_run(job) -> dict:
    from benchmarks.probe_hrnn import content
    from tests import probe_utils as pu

    name, method, seed, updates, probe, work = job
    save = os.path.join(work, f"{name}-{updates}-s{seed}")
    shutil.rmtree(save, ignore_errors=True)  # fairseq-train would resume from an earlier run
    t = time.time()
    if name in DIVIDE_RULE:
        ckpt, k = train_divide_rule(name, seed, updates, probe, work), HAN[:4]
    else:
        ckpt, k = pu.train(probe["data_bin"], "concat_transformer", save, task="document_translation",
                           extra_args=K + method + ["--seed", str(seed)], max_update=updates)["checkpoint"], K
    res = pu.probe_accuracy(probe["data_bin"], ckpt, probe["annotations"],
                            task="document_translation", extra_args=k, beam=4)
    row = dict(run=name, seed=seed, updates=updates, seconds=round(time.time() - t),
               accuracy={k: round(v["accuracy"], 3) for k, v in res["by_phenomenon"].items()
                         if v["accuracy"] is not None})
    row["cxmi"] = content(ckpt, probe["data_bin"], 2)
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="baseline,coword,focused,focused-shift,han,han-divide-rule")
    p.add_argument("--coword-dropout", type=float, default=0.1)
    add_job_args(p, os.path.join(REPO, "bench-work", "context-usage"), 300)
    a = p.parse_args(argv)
    methods = dict(runs(a.coword_dropout), **{name: [] for name in DIVIDE_RULE})
    unknown = [r for r in a.runs.split(",") if r not in methods]
    if unknown:
        p.error(f"--runs: no run {', '.join(unknown)} (of {', '.join(methods)})")
    probe = prepare(a.work)
    if set(DIVIDE_RULE) & set(a.runs.split(",")):
        probe.update(split=prepare_split(probe), k0=sentence_model(probe, a.updates, a.work))
    jobs = [(r, methods[r], int(s), a.updates, probe, a.work) for s in a.seeds.split(",") for r in a.runs.split(",")]
    rows = run_jobs(one_run, jobs, a.jobs, a.json)
    print("| run | seed | updates | pronouns | consistency | CXMI true - none | CXMI true - random |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        acc = r["accuracy"]
        print(f"| {r['run']} | {r['seed']} | {r['updates']} | {acc.get('anaphora', '–')} | "
              f"{acc.get('consistency', '–')} | {r['cxmi']['cxmi']:+.4f} | {r['cxmi']['true_vs_random']:+.4f} |")


if __name__ == "__main__":
    main()
