"""What ``--resegment`` costs (:mod:`fairseq_docctx.evaluation.resegment`): the time to cut
hypotheses into their reference's sentences, against a document's length (sentences of 20
words; the hypothesis a noisy copy of the reference: 10 % of the words substituted, 5 %
dropped, 5 % inserted, the whole document on one line) and against the number of documents
(of 20 sentences each). Best of ``--repeats`` runs, one thread, nothing else running.

The cost is one dynamic programme over a document's ``M`` hypothesis and ``N`` reference words:
time ~ ``M N`` (quadratic in a document's length), a sum over documents (linear in their
number). The last column divides each time by the first row's, against the ratio of ``M N``.

    python -m benchmarks.bench_resegment [--repeats 3]
"""
import argparse
import random
import time

from fairseq_docctx.evaluation.resegment import resegment_documents


def document(n_sentences: int, rng: random.Random, words: int = 20):
    """``(hypothesis lines, reference sentences)``: one line holding a noisy copy of the
    reference's words."""
    ref = [" ".join(f"w{rng.randrange(5000)}" for _ in range(words)) for _ in range(n_sentences)]
    hyp = []
    for w in " ".join(ref).split():
        r = rng.random()
        if r < 0.05:
            continue  # dropped
        hyp.append(f"w{rng.randrange(5000)}" if r < 0.15 else w)
        if rng.random() < 0.05:
            hyp.append(f"w{rng.randrange(5000)}")  # inserted
    return [" ".join(hyp)], ref


def best_time(docs, repeats: int) -> float:
    ids = [str(k) for k in range(len(docs))]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        resegment_documents(ids, [h for h, _ in docs], [r for _, r in docs])
        best = min(best, time.perf_counter() - t)
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rng = random.Random(1)
    print("| documents x sentences | hypothesis words (M) | reference words (N) | seconds | time ratio | M N ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    first = None
    for n_docs, n_sents in [(1, 25), (1, 50), (1, 100), (1, 200), (10, 20), (100, 20), (1000, 20)]:
        docs = [document(n_sents, rng) for _ in range(n_docs)]
        M = sum(len(h[0].split()) for h, _ in docs)
        N = sum(len(s.split()) for _, r in docs for s in r)
        mn = sum(len(h[0].split()) * sum(len(s.split()) for s in r) for h, r in docs)
        t = best_time(docs, a.repeats)
        if first is None:
            first = (t, mn)
        print(f"| {n_docs} x {n_sents} | {M} | {N} | {t:.4f} | {t / first[0]:.1f} | {mn / first[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
