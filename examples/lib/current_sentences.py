"""The current sentences of Voita et al. (2019)'s groups, for scoring: each line of their
context-aware test file is one test example, its last sentence translated in the context of
the others, so BLEU counts that sentence once per line and never a context sentence (which
overlapping groups repeat). Used by examples/opensubs-enru/run.sh; documented in
docs/recipes.md.

    python examples/lib/current_sentences.py MASK REF GENERATE OUT_PREFIX

MASK: a 0/1 line per sentence of REF (``voita_docs``'s ``.current`` file); REF: the test
documents (marker format); GENERATE: fairseq-generate's output for them (SentencePiece
undone). Writes OUT_PREFIX.ref (the marked reference sentences, marker format, in their
documents) and OUT_PREFIX.hyp (their translations, one a line) and prints the counts.
"""
import os
import sys

from fairseq_docctx.data.documents import read_lines
from fairseq_docctx.data.readers import read_file
from fairseq_docctx.evaluation.io import read_generate_output


def main(mask_path, ref_path, gen_path, out):
    mask = [line.strip() for line in read_lines(mask_path)]
    bad = [i for i, m in enumerate(mask, 1) if m not in ("0", "1")]
    if bad:
        sys.exit(f"{mask_path}:{bad[0]}: expected 0 or 1")
    docs, _ = read_file(ref_path, "marker")
    hyps, _ = read_generate_output(gen_path)
    n = sum(len(d) for d in docs)
    if not len(mask) == n == len(hyps):
        sys.exit(f"{mask_path}: {len(mask)} lines, {ref_path}: {n} sentences, {gen_path}: {len(hyps)} translations "
                 "(they must be the same test set)")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    k = kept = 0
    with open(out + ".ref", "w", encoding="utf-8") as ref, open(out + ".hyp", "w", encoding="utf-8") as hyp:
        for d in docs:
            picked = [j for j in range(len(d)) if mask[k + j] == "1"]
            if picked:
                ref.write("<d>\n" + "".join(d.sentences[j] + "\n" for j in picked))
                hyp.write("".join(hyps[k + j] + "\n" for j in picked))
            kept += len(picked)
            k += len(d)
    print(f"{gen_path}: {kept} current sentences of {n} scored ({n - kept} context only)")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
