"""Does ``hrnn_context`` read what its context says, and does it train as well as
``rnnsearch``? Tiny models (64-dim, one thread each) trained on the context probe
(``fairseq_docctx.probe``: a pronoun whose class is set by a noun one or two sentences back, a
word whose translation an earlier mention fixes), K = 3, each model's default (length-sorted)
batches.

For every run: the last training ``nll_loss`` (fairseq's per-token loss of the last logged
updates), the probe's accuracy on the words that need context (beam 4, the test split), and
for ``hrnn_context`` what its document summary ``D`` carries on the test split: CXMI
(``docctx-score cxmi``: the reference's mean log-probability per token with the true context,
with a random document's context and with none; ``true - random`` > 0 only when the model
reads what the context says, not only how many sentences it has), the mean ``|D|`` and the
mean over channels of the standard deviation of ``D`` across the sentences with the same
number of previous sentences ("spread"; near 0: ``D`` is one constant per count of previous
sentences and tells the sentences apart by nothing else).

Presets (fairseq-train options on top of the probe's common ones, ``tests/probe_utils.py``):

* ``probe``: the probe tests' RNN settings (``--lr 1e-2 --warmup-updates 100``, label
  smoothing 0.1, ``--max-tokens 2000``);
* ``lr1e-2`` and ``lr2e-3``: ``--max-tokens 4000`` and ``--lr 1e-2 --warmup-updates 100`` or
  ``--lr 2e-3 --warmup-updates 200`` (the named architecture's learning rate), dropout 0.1:
  the two settings a model must read its context under, on most seeds;
* ``slow``: fairseq's defaults where the probe tests set their own (no label smoothing,
  ``--warmup-updates 4000``, Adam betas (0.9, 0.999)), ``--lr 2e-3``, ``--max-tokens 4000``.

Runs (``--runs``): ``rnnsearch`` (``rnnsearch_nematus``, no context), ``hrnn``
(``hrnn_context``'s defaults: the encoder's Bi-GRU is the sentence RNN), ``hrnn-own`` (a
sentence RNN of its own, ``--share-context-encoder False``, as in the authors' released code:
the earlier default), each also with ``-backward`` to start the decoder from the backward
RNN's last state (``--decoder-init backward``) instead of the annotations' mean.

    python -m benchmarks.probe_hrnn --preset lr2e-3 --updates 2500 --seeds 1,2,3,4,5 --runs hrnn,hrnn-own

``--settings`` trains on other shapes of the probe (``docctx-probe generate --setting``, each
generated once under ``--work``), ``--extra`` adds fairseq-train options to every run (a
variant: ``--extra="--context-summary mean"``, with the ``=``). Each ``hrnn_context`` row also has
``diagnosis`` (:func:`diagnose`): where ``D`` carries the antecedent's class (its swap at each
point the model reads it, a linear probe of the sentence summary and of ``D``, saturation).

The last lines count, per run and preset, the seeds where the pronouns reach 0.90 and
``true - random`` 0.02 nats/token. The figures of ``docs/benchmarks.md`` came from this script
(several presets and update counts; 16 jobs side by side on a 16-core machine, 2 on this
project's 2-core one).
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = ["--encoder-embed-dim", "64", "--encoder-hidden-size", "64", "--decoder-embed-dim", "64",
         "--decoder-hidden-size", "64", "--decoder-out-embed-dim", "64", "--attention-dim", "64",
         "--share-all-embeddings"]
PRESETS = {
    "probe": ["--lr", "1e-2", "--warmup-updates", "100"],
    "lr1e-2": ["--lr", "1e-2", "--warmup-updates", "100", "--max-tokens", "4000"],
    "lr2e-3": ["--lr", "2e-3", "--warmup-updates", "200", "--max-tokens", "4000"],
    "slow": ["--label-smoothing", "0", "--warmup-updates", "4000", "--adam-betas", "(0.9,0.999)",
             "--max-tokens", "4000"],
}
#: what a run that reads its context reaches (the pronouns' accuracy, CXMI true - random)
PRONOUNS_MET, CONTENT_MET = 0.90, 0.02
RUNS = {
    "rnnsearch": ("rnnsearch_nematus", ["--context-size", "0"]),
    "rnnsearch-backward": ("rnnsearch_nematus", ["--context-size", "0", "--decoder-init", "backward"]),
    "hrnn": ("hrnn_context", ["--context-size", "3"]),
    "hrnn-backward": ("hrnn_context", ["--context-size", "3", "--decoder-init", "backward"]),
    "hrnn-own": ("hrnn_context", ["--context-size", "3", "--share-context-encoder", "False"]),
    "hrnn-own-backward": ("hrnn_context", ["--context-size", "3", "--share-context-encoder", "False",
                                           "--decoder-init", "backward"]),
}


def summary_spread(ckpt: str, data_bin: str, K: int) -> dict:
    """Number of previous sentences -> (mean |D|, spread of D) over the test split."""
    import torch
    from fairseq import checkpoint_utils

    from fairseq_docctx.data import context_batch as cb

    torch.set_num_threads(1)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [ckpt], arg_overrides={"data": data_bin, "context_size": K})
    model = models[0].eval()
    task.load_dataset("test")
    itr = task.get_batch_iterator(task.dataset("test"), max_tokens=4000,
                                  required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
    D, n = [], []
    for sample in itr:
        ni = sample["net_input"]
        with torch.no_grad():
            D.append(model.encoder(ni["src_tokens"], src_lengths=ni["src_lengths"], context=ni["context"])["doc_context"])
        n.append((cb.index(ni["context"], "src", K) >= 0).sum(1))
    D, n = torch.cat(D), torch.cat(n)
    return {k: (round(D[n == k].abs().mean().item(), 3), round(D[n == k].std(0).mean().item(), 3))
            for k in range(1, K + 1) if int((n == k).sum()) > 1}


def content(ckpt: str, data_bin: str, K: int) -> dict:
    """CXMI on the test split (:func:`fairseq_docctx.evaluation.cxmi.cxmi_split`, seed 1)."""
    import torch

    from fairseq_docctx.evaluation.cxmi import cxmi_split
    from fairseq_docctx.evaluation.scoring import load_scorer, quiet_logs

    torch.set_num_threads(1)
    quiet_logs()
    rep = cxmi_split(load_scorer(ckpt, data=data_bin, context_size=K), "test", seed=1)
    return {k: round(rep[k], 4) for k in ("cxmi", "cxmi_random", "true_vs_random")}


def diagnose(ckpt: str, data_bin: str, annotations: str, K: int, seed: int = 1) -> dict:
    """Where ``hrnn_context``'s document summary carries the antecedent's class, on the test
    split's pronouns (teacher-forced on the reference; a pronoun is right when the expected
    form has the highest probability among its alternatives):

    * ``swap``: the pronouns' accuracy with the true ``D``, and with ``D`` swapped between
      sentences that have the same number of previous sentences at every point the model reads
      it (``all``), at the encoder's initial state only (``init_enc``), at ``s_0`` only
      (``init_dec``), at the decoder's auxiliary input / gate only (``aux``): a point whose
      swap costs nothing carries no class;
    * ``linear``: a logistic regression's 5-fold accuracy of the class from the antecedent
      sentence's summary ``S_k`` (Eq. 1; the sentence RNN), and from ``D`` (Eq. 2; the
      document RNN, after the sentences between), by the distractors in between;
    * ``saturated``: the share of ``D``'s channels beyond +-0.99 (rows with context).
    """
    import numpy as np
    import torch
    from fairseq import checkpoint_utils
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    from fairseq_docctx.data import context_batch as cb
    from fairseq_docctx.probe import load_annotations

    torch.set_num_threads(1)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [ckpt], arg_overrides={"data": data_bin, "context_size": K})
    model = models[0].eval()
    enc, dec = model.encoder, model.decoder
    task.load_dataset("test")
    anns = load_annotations(annotations)
    tgt_dict = task.target_dictionary
    itr = task.get_batch_iterator(task.dataset("test"), max_tokens=4000,
                                  required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
    gen = torch.Generator().manual_seed(seed)
    modes = ("true", "all", "init_enc", "init_dec", "aux")
    right = {m: 0 for m in modes}
    total, feats_S, feats_D, labels, distractors, saturated = 0, [], [], [], [], []
    with torch.no_grad():
        for sample in itr:
            ni = sample["net_input"]
            ctx, src = ni["context"], ni["src_tokens"]
            B = src.size(0)
            D = enc.document_summary(ctx, B, enc.attention_keys.weight)
            count = (cb.index(ctx, "src", K) >= 0).sum(1)
            saturated.append((D[count > 0].abs() > 0.99).float().mean(1))
            perm = torch.arange(B)
            for c in count.unique().tolist():
                rows = (count == c).nonzero().squeeze(1)
                perm[rows] = rows[torch.randperm(rows.numel(), generator=gen)]
            swapped = D[perm]
            items = []  # (row, target position, expected id, alternative ids, annotation)
            for b, sid in enumerate(sample["id"].tolist()):
                for it in anns[sid]["items"]:
                    if it["phenomenon"] == "anaphora":
                        items.append((b, it["index"], tgt_dict.index(it["expected"]),
                                      [tgt_dict.index(w) for w in it["alternatives"]], it))
            if not items:
                continue
            for mode in modes:
                d_enc = swapped if mode in ("all", "init_enc") else D
                d_init = swapped if mode in ("all", "init_dec") else D
                out = enc.encoder_out(*enc.run_rnn(src, d_enc if enc.init_enc else None))
                out["doc_context"] = swapped if mode in ("all", "aux") else D
                out["doc_context_init"] = d_init  # (rows selected with the others')
                dec.init_input = lambda e, own=dec.init_input: own(dict(e, doc_context=e["doc_context_init"]))
                try:
                    logits, _ = dec(ni["prev_output_tokens"], encoder_out=out)
                finally:
                    del dec.init_input  # the class's method again
                for b, pos, want, alts, _ in items:
                    scores = logits[b, pos, alts]
                    right[mode] += int(alts[int(scores.argmax())] == want)
            total += len(items)
            table = cb.table(ctx, "src", K)
            kept = [(b, int(table.index[b, it["distance"] - 1]), it) for b, _, _, _, it in items]
            kept = [(b, row, it) for b, row, it in kept if row >= 0]
            if kept:  # the antecedent sentences' summaries in one run of the sentence RNN
                S = enc.sentence_summaries(table.tokens[torch.tensor([row for _, row, _ in kept])])
                feats_S += list(S.numpy())
                feats_D += [D[b].numpy() for b, _, _ in kept]
                labels += [it["class"] for _, _, it in kept]
                distractors += [it.get("distractors", 0) for _, _, it in kept]

    def decodable(X, y):
        if len(set(y)) < 2 or min(np.unique(y, return_counts=True)[1]) < 5:
            return None
        clf = LogisticRegression(max_iter=2000)
        return round(float(cross_val_score(clf, np.stack(X), np.array(y), cv=5).mean()), 3)

    linear = {"S_antecedent": decodable(feats_S, labels), "D": decodable(feats_D, labels)}
    for n in sorted(set(distractors)):
        pick = [i for i, k in enumerate(distractors) if k == n]
        linear[f"D_after_{n}_distractors"] = decodable([feats_D[i] for i in pick], [labels[i] for i in pick])
    return {"swap": {m: round(right[m] / max(total, 1), 3) for m in modes}, "linear": linear,
            "saturated": round(float(torch.cat(saturated).mean()), 3), "pronouns": total}


def add_job_args(p, work: str, updates: int) -> None:
    """The options every probe comparison takes: ``--updates``, ``--seeds``, ``--jobs``,
    ``--work`` (default ``work``) and ``--json``."""
    p.add_argument("--updates", type=int, default=updates)
    p.add_argument("--seeds", default="1")
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side (one thread each)")
    p.add_argument("--work", default=work)
    p.add_argument("--json", help="also write the rows to this JSON file")


def run_jobs(one_run, jobs, workers: int, json_path=None) -> list:
    """``one_run(job)`` of every job, ``workers`` side by side (one process each): the rows, each
    printed as a JSON line as it comes, and written to ``json_path`` when given."""
    rows = []
    with cf.ProcessPoolExecutor(workers) as ex:
        for row in ex.map(one_run, jobs):
            rows.append(row)
            print(json.dumps(row), flush=True)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return rows


def met(row) -> bool:
    """The run's pronouns reach :data:`PRONOUNS_MET` and CXMI true - random :data:`CONTENT_MET`."""
    return (row["accuracy"].get("anaphora", 0) >= PRONOUNS_MET
            and row.get("cxmi", {}).get("true_vs_random", 0) >= CONTENT_MET)


def one_run(job):
    from tests import probe_utils as pu

    name, preset, seed, updates, probe, work, setting, extra = job
    arch, args = RUNS[name]
    args = args + extra
    tag = "" if setting == "default" else f"{setting}-"
    variant = "" if not extra else "-" + "_".join(a.lstrip("-") for a in extra)
    save = os.path.join(work, f"{tag}{name}{variant}-{preset}-{updates}-s{seed}")
    shutil.rmtree(save, ignore_errors=True)  # fairseq-train would resume from an earlier run
    t = time.time()
    out = pu.train(probe["data_bin"], arch, save, task="document_translation", model_args=MODEL,
                   extra_args=args + PRESETS[preset] + ["--seed", str(seed)], max_update=updates)
    nll = re.findall(r"nll_loss=([\d.]+)", open(out["log"], encoding="utf-8").read())
    K = args[args.index("--context-size") + 1]
    res = pu.probe_accuracy(probe["data_bin"], out["checkpoint"], probe["annotations"],
                            task="document_translation", extra_args=["--context-size", K], beam=4)
    row = dict(run=name + variant, setting=setting, preset=preset, seed=seed, updates=updates,
               seconds=round(time.time() - t),
               nll=float(nll[-1]) if nll else None,
               accuracy={k: round(v["accuracy"], 3) for k, v in res["by_phenomenon"].items()
                         if v["accuracy"] is not None})
    if arch == "hrnn_context":
        row["cxmi"] = content(out["checkpoint"], probe["data_bin"], int(K))
        row["D"] = summary_spread(out["checkpoint"], probe["data_bin"], int(K))
        row["diagnosis"] = diagnose(out["checkpoint"], probe["data_bin"], probe["annotations"], int(K))
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default="rnnsearch,hrnn,hrnn-own", help=f"of {', '.join(RUNS)}")
    p.add_argument("--preset", default="probe", choices=sorted(PRESETS))
    p.add_argument("--settings", default="default",
                   help="probe settings (docctx-probe generate --setting), comma-separated")
    p.add_argument("--extra", default="", help="fairseq-train options added to every run (a variant)")
    add_job_args(p, os.path.join(REPO, "bench-work", "probe-hrnn"), 800)
    a = p.parse_args(argv)
    from fairseq_docctx.probe import SETTINGS
    from tests import probe_utils as pu

    jobs = []
    for setting in a.settings.split(","):
        probe_dir = os.path.join(a.work, "probe" if setting == "default" else f"probe-{setting}")
        probe = (pu.make_probe_data(probe_dir, **SETTINGS[setting])
                 if not os.path.isdir(os.path.join(probe_dir, "data-bin"))
                 else {"data_bin": os.path.join(probe_dir, "data-bin"),
                       "annotations": os.path.join(probe_dir, "text", "test.probe.jsonl")})
        jobs += [(r, a.preset, int(s), a.updates, probe, a.work, setting, a.extra.split())
                 for s in a.seeds.split(",") for r in a.runs.split(",")]
    rows = run_jobs(one_run, jobs, a.jobs, a.json)
    for setting in a.settings.split(","):
        for run in a.runs.split(","):
            variant = "" if not a.extra else "-" + "_".join(x.lstrip("-") for x in a.extra.split())
            mine = [r for r in rows if r["run"] == run + variant and r["setting"] == setting]
            if mine and RUNS[run][0] == "hrnn_context":
                print(f"{run} {a.extra}, {setting}, {a.preset}, {a.updates} updates: pronouns >= {PRONOUNS_MET} "
                      f"and true - random >= {CONTENT_MET} on {sum(map(met, mine))} of {len(mine)} seeds")


if __name__ == "__main__":
    main()
