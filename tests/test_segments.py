"""Document segments (``--doc-mode segments``): planning, the batch format, decoding that gives
one hypothesis per source sentence, and fairseq-train / fairseq-generate on segments."""
import argparse
import re

import numpy as np
import pytest
import torch
from fairseq.data import LanguagePairDataset, data_utils

from conftest import REPO, TINY_MODEL, docids_documents, run, run_in_process, tilted_toward_ending, toy_dictionary
from fairseq_docctx.data import segments as seg
from fairseq_docctx.data.doc_index import DocIndex
from fairseq_docctx.tasks.segment_decoding import parse_segment_run_line

USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def random_docs(seed=0, n_docs=40, max_len=30, long_every=0):
    """A document index of random lengths and random sentence sizes (source, target)."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(1, max_len, n_docs)
    n = int(lengths.sum())
    src = rng.randint(2, 30, n)
    tgt = rng.randint(2, 30, n)
    if long_every:
        src[::long_every] = 90  # longer than the limits used below
    return DocIndex([f"d{i}" for i in range(n_docs)], lengths), src, tgt


def check_level(docs, src, tgt, plan, level, limit, excluded=None):
    """Every sentence (but the excluded) in exactly one segment of ``level``; segments inside
    one document, within the limit on each side unless a lone long sentence (the per-side
    packing)."""
    excluded = np.zeros(docs.num_sentences, bool) if excluded is None else excluded
    # the documents this level cuts: every part of 2**level has at least 2 sentences
    cut = docs.lengths // (2 ** level) >= 2 if level else np.ones(len(docs), bool)
    excluded = excluded | ~cut[docs.sent_doc]
    mine = np.flatnonzero(plan.levels == level)
    seen = np.zeros(docs.num_sentences, np.int64)
    for i in mine:
        ids = plan.sentences(i)
        seen[ids] += 1
        assert len(set(docs.sent_doc[ids].tolist())) == 1, "a segment crosses documents"
        assert not excluded[ids].any()
        s, t = int(src[ids].sum()), int(tgt[ids].sum())
        if len(ids) == 1 and max(s, t) > limit:
            assert ids[0] in plan.long_sentences
        else:
            assert s <= limit and t <= limit
    assert (seen[~excluded] == 1).all() and (seen[excluded] == 0).all()
    return mine


def test_plan_covers_every_sentence_once_within_the_limit():
    docs, src, tgt = random_docs(long_every=37)
    plan = seg.plan_segments(docs, src, tgt, max_tokens=80, packing="per-side")
    mine = check_level(docs, src, tgt, plan, 0, 80)
    assert len(mine) == len(plan) and plan.num_levels == 1
    # greedy: a segment stops only where the next sentence of its document would not fit
    for i in mine:
        nxt = plan.starts[i] + plan.counts[i]
        if nxt < docs.num_sentences and docs.sent_doc[nxt] == docs.sent_doc[plan.starts[i]]:
            ids = plan.sentences(i)
            assert src[ids].sum() + src[nxt] > 80 or tgt[ids].sum() + tgt[nxt] > 80
    # the long sentences are exactly those over the limit, each alone
    assert plan.long_sentences.tolist() == np.flatnonzero(np.maximum(src, tgt) > 80).tolist()
    assert len(plan.long_sentences) > 3
    assert plan.counts.max() > 2  # real packing, not one sentence a segment


def test_plan_target_sizes_bound_segments_too():
    docs = DocIndex(["a"], np.array([4]))
    src, tgt = np.array([3, 3, 3, 3]), np.array([3, 30, 3, 3])
    plan = seg.plan_segments(docs, src, tgt, max_tokens=32, packing="per-side")
    assert [plan.sentences(i).tolist() for i in range(len(plan))] == [[0], [1], [2, 3]]
    # without targets only the source counts
    plan = seg.plan_segments(docs, src, None, max_tokens=32, packing="per-side")
    assert [plan.sentences(i).tolist() for i in range(len(plan))] == [[0, 1, 2, 3]]


def authors_segments(doc_src, doc_tgt, max_tokens):
    """The G-Transformer authors' segmentation of one document (their data_builder.py, with
    no sentence limit), restated over lists of words: each sentence costs max(|s|, |t|) + 2
    (their <s> and </s> around it) and joins the last segment while that segment's cost plus
    its own is below max_tokens; returns the segments' sentence numbers."""
    segs = []  # [cost, sentence numbers]
    for i, (s, t) in enumerate(zip(doc_src, doc_tgt)):
        cost = max(len(s), len(t)) + 2
        if segs and segs[-1][0] + cost < max_tokens:
            segs[-1][0] += cost
            segs[-1][1].append(i)
        else:
            segs.append([cost, [i]])
    return [ids for _, ids in segs]


def test_g_transformer_packing_is_the_authors_rule():
    """--segment-packing g-transformer: a sentence costs max(|s|, |t|) + 2 words (+ 1 over
    binarized sizes, which count </s>), a segment grows while its cost stays below the limit
    (a sum of exactly 512 starts a new one); a sentence over the limit alone is its own
    segment and reported; without targets the source alone counts. Random documents: the
    plan equals the authors' rule restated over word lists."""
    # words (|s|, |t|) of one document; costs 202, 252 | 58 (454 + 58 = 512: not below), 9, 52,
    # 302 | 602 (over 512 alone) | 5
    words = [(200, 100), (100, 250), (56, 20), (7, 7), (40, 50), (300, 10), (600, 5), (3, 3)]
    src = np.array([s + 1 for s, _ in words])  # binarized sizes: the words and </s>
    tgt = np.array([t + 1 for _, t in words])
    docs = DocIndex(["a"], np.array([len(words)]))
    plan = seg.plan_segments(docs, src, tgt, max_tokens=512)
    assert plan.packing == "g-transformer" == seg.DEFAULT_SEGMENT_PACKING
    assert [plan.sentences(i).tolist() for i in range(len(plan))] == [[0, 1], [2, 3, 4, 5], [6], [7]]
    assert plan.long_sentences.tolist() == [6]
    assert "(g-transformer packing)" in plan.describe()
    # the per-side rule on the same document: 408 source and 432 target tokens fit in the first segment
    per_side = seg.plan_segments(docs, src, tgt, max_tokens=512, packing="per-side")
    assert per_side.sentences(0).tolist() == [0, 1, 2, 3, 4]
    # without targets: |t| = |s| (costs 202, 102, 58, 9, 42, 302, 602, 5)
    plan = seg.plan_segments(docs, src, None, max_tokens=512)
    assert [plan.sentences(i).tolist() for i in range(len(plan))] == [[0, 1, 2, 3, 4], [5], [6], [7]]
    # random documents against the restated rule
    docs, src, tgt = random_docs(seed=4, long_every=23)
    plan = seg.plan_segments(docs, src, tgt, max_tokens=80)
    got = [plan.sentences(i).tolist() for i in range(len(plan))]
    want = []
    for d in range(len(docs)):
        first, n = int(docs.offsets[d]), int(docs.lengths[d])
        ws = [["w"] * (src[i] - 1) for i in range(first, first + n)], [["w"] * (tgt[i] - 1) for i in range(first, first + n)]
        want += [[first + i for i in ids] for ids in authors_segments(*ws, 80)]
    assert got == want and max(len(g) for g in got) > 2
    assert plan.long_sentences.tolist() == np.flatnonzero(np.maximum(src, tgt) + 1 > 80).tolist() != []
    with pytest.raises(ValueError, match="--segment-packing sideways: one of g-transformer, per-side"):
        seg.plan_segments(docs, src, tgt, max_tokens=80, packing="sideways")


def test_context_only_sentences_are_in_no_segment():
    docs, src, tgt = random_docs(seed=1)
    marked = np.random.RandomState(3).rand(docs.num_sentences) < 0.15
    docs = DocIndex(docs.doc_ids, docs.lengths, marked)
    plan = seg.plan_segments(docs, src, tgt, max_tokens=100, multi_resolution=True, packing="per-side")
    assert plan.context_only == int(marked.sum()) > 0
    for level in range(plan.num_levels):
        check_level(docs, src, tgt, plan, level, 100, excluded=marked)


def test_multi_resolution_levels_split_documents_in_equal_parts():
    docs = DocIndex(["a", "b", "c"], np.array([9, 3, 1]))
    size = np.full(13, 2)
    plan = seg.plan_segments(docs, size, size, max_tokens=1000, multi_resolution=True)
    got = {(int(lv), tuple(plan.sentences(i).tolist())) for i, lv in enumerate(plan.levels)}
    a = lambda *r: tuple(range(*r))  # noqa: E731
    assert got == {
        (0, a(0, 9)), (0, a(9, 12)), (0, a(12, 13)),            # whole documents
        (1, a(0, 4)), (1, a(4, 9)),                             # a in 2 parts; b (3) stops at 1 part
        (2, a(0, 2)), (2, a(2, 4)), (2, a(4, 6)), (2, a(6, 9)),  # a in 4 parts (8 parts: < 2 each)
    }
    assert len(plan) == len(got)
    # a long random corpus: each level covers every sentence of the documents it splits once
    docs, src, tgt = random_docs(seed=2, max_len=40)
    plan = seg.plan_segments(docs, src, tgt, max_tokens=120, multi_resolution=True, packing="per-side")
    assert plan.num_levels >= 4
    for level in range(plan.num_levels):
        mine = check_level(docs, src, tgt, plan, level, 120)
        assert len(mine) > 0
        # no segment of a level crosses a part of that level
        for i in mine:
            d = docs.sent_doc[plan.starts[i]]
            n, parts = int(docs.lengths[d]), 2 ** level
            part = lambda j: int(np.searchsorted((np.arange(parts + 1) * n) // parts, j, side="right"))  # noqa: E731
            pos = plan.sentences(i) - docs.offsets[d]
            assert part(pos[0]) == part(pos[-1])


def toy_pair(d, doc_lengths, seed=0, with_target=True):
    rng = np.random.RandomState(seed)
    n = sum(doc_lengths)
    mk = lambda: [torch.LongTensor(list(rng.randint(5, 35, rng.randint(1, 8))) + [d.eos()]) for _ in range(n)]  # noqa: E731
    src, tgt = mk(), mk()
    if not with_target:
        return LanguagePairDataset(src, [len(s) for s in src], d, None, None, d), DocIndex(
            [f"d{i}" for i in range(len(doc_lengths))], np.array(doc_lengths))
    pair = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d)
    return pair, DocIndex([f"d{i}" for i in range(len(doc_lengths))], np.array(doc_lengths))


def joined(d, items):
    """The segment layout written out by hand: s_1 <sep> ... <sep> s_n </s>."""
    out = []
    for t in items:
        out += t[:-1].tolist() + [d.index("<sep>")]
    out[-1] = d.eos()
    return out


def test_collated_batch_is_the_segment_format():
    d = toy_dictionary()
    sep, pad, eos = d.index("<sep>"), d.pad(), d.eos()
    pair, docs = toy_pair(d, [5, 1, 7, 3, 4])
    plan = seg.plan_segments(docs, pair.src_sizes, pair.tgt_sizes, max_tokens=14)
    ds = seg.SegmentPairDataset(pair, plan, sep, shuffle=False)
    assert len(ds) == len(plan) > 5
    order = list(range(len(ds)))
    batch = ds.collater([ds[i] for i in order])
    assert batch["id"].tolist() != order, "the collater did not re-sort: the test checks nothing"
    ni = batch["net_input"]
    for row, (sid, sents) in enumerate(zip(batch["id"].tolist(), batch["segment_sentences"])):
        assert sents.tolist() == plan.sentences(sid).tolist()
        src = ni["src_tokens"][row][ni["src_tokens"][row] != pad]
        tgt = batch["target"][row][batch["target"][row] != pad]
        assert src.tolist() == joined(d, [pair.src[i] for i in sents.tolist()])
        assert tgt.tolist() == joined(d, [pair.tgt[i] for i in sents.tolist()])
        assert int(ni["src_lengths"][row]) == src.numel() == ds.src_sizes[sid]
        assert tgt.numel() == ds.tgt_sizes[sid] <= 14 or len(sents) == 1
        # groups: 1 + the separators before a token; the row's sentences: 1 + its separators
        assert seg.count_sentences(src, sep) == len(sents) == seg.count_sentences(tgt, sep)
        prev = ni["prev_output_tokens"][row][: tgt.numel()]
        assert prev.tolist() == [eos] + tgt[:-1].tolist()
        assert [t.tolist() for t in seg.split_tokens(src, sep, eos)] == [pair.src[i].tolist() for i in sents]
    assert ni["src_tokens"][:, -1].ne(pad).all()  # left-padded, as fairseq's translation


def test_segments_without_targets_and_bad_sentences():
    d = toy_dictionary()
    pair, docs = toy_pair(d, [3, 4], with_target=False)
    ds = seg.SegmentPairDataset(pair, seg.plan_segments(docs, pair.src_sizes, None, 30), d.index("<sep>"))
    item = ds[0]
    assert item["target"] is None and ds.sizes.ndim == 1
    batch = ds.collater([ds[i] for i in range(len(ds))])
    assert batch["target"] is None and "prev_output_tokens" not in batch["net_input"]
    assert sum(len(s) for s in batch["segment_sentences"]) == 7
    # a sentence holding the separator would be split: refused, naming the sentence
    pair.src[2] = torch.LongTensor([7, d.index("<sep>"), 8, d.eos()])
    with pytest.raises(ValueError, match="source sentence 2 contains the sentence separator"):
        ds[0]


def test_batching_keeps_every_segment():
    d = toy_dictionary()
    pair, docs = toy_pair(d, [5, 1, 7, 3, 4, 6, 2, 9, 1, 1, 3])
    ds = seg.SegmentPairDataset(pair, seg.plan_segments(docs, pair.src_sizes, pair.tgt_sizes, 12), d.index("<sep>"))
    idx = ds.ordered_indices()
    batches = ds.batch_by_size(idx, max_tokens=40, required_batch_size_multiple=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(ds)))


# ------------------------------------------------------------------ the task
def make_task(**over):
    from fairseq_docctx.tasks.document_translation import DocumentTranslationTask

    d = toy_dictionary()
    cfg = argparse.Namespace(
        data="", source_lang="src", target_lang="tgt", context_size=None, context_sides=None,
        doc_mode="segments", max_segment_tokens=None, segment_packing=None, multi_resolution=False,
        context_separator="<sep>", target_context="hypothesis", doc_run_length=16,
        doc_batching="auto", num_shards=1, shard_id=0, left_pad_source=True, left_pad_target=False,
        no_sentence_count_constraint=False, eval_bleu=False,
        train_subset="train",
    )
    for k, v in over.items():
        setattr(cfg, k, v)
    return DocumentTranslationTask(cfg, d, d)


def test_task_options_and_checkpoint_adoption():
    task = make_task()
    assert task.segments and task.cfg.context_size == 0 and task.cfg.max_segment_tokens == 512
    with pytest.raises(ValueError, match="--doc-mode segments with --context-size 3"):
        make_task(context_size=3)
    # inference: a checkpoint's settings are taken unless given
    task = make_task(doc_mode=None)
    assert not task.segments and task.cfg.context_size == 3
    task.adopt_context_settings(argparse.Namespace(context_size=0, context_sides="source",
                                                   doc_mode="segments", max_segment_tokens=64))
    assert task.segments and task.cfg.max_segment_tokens == 64 and task.cfg.context_size == 0
    # a sentence-level checkpoint decoded as segments: its K is not a context of segments
    task = make_task()
    task.adopt_context_settings(argparse.Namespace(context_size=3, context_sides="source"))
    assert task.segments and task.cfg.context_size == 0


def test_segment_packing_default_recording_and_old_checkpoints(caplog):
    """--segment-packing: g-transformer in training; at inference the checkpoint's, per-side
    for a segment checkpoint that records none (written before the option, trained per
    side), the default for a sentence-level checkpoint decoded as segments; a value given on
    the command line is used, with a warning."""
    old = dict(context_size=0, context_sides="source", doc_mode="segments", max_segment_tokens=64)
    assert make_task().cfg.segment_packing == "g-transformer"
    task = make_task(doc_mode=None)
    task.adopt_context_settings(argparse.Namespace(**old))
    assert task.segments and task.cfg.segment_packing == "per-side"
    task = make_task(doc_mode=None)
    task.adopt_context_settings(argparse.Namespace(**old, segment_packing="g-transformer"))
    assert task.cfg.segment_packing == "g-transformer"
    task = make_task()
    task.adopt_context_settings(argparse.Namespace(context_size=3, context_sides="source"))
    assert task.cfg.segment_packing == "g-transformer"
    with pytest.raises(ValueError, match=r"--segment-packing g-transformer differs from the checkpoint's \(per-side\): "
                                         "leave --segment-packing out to decode as trained, or add --context-override"):
        make_task(segment_packing="g-transformer").adopt_context_settings(argparse.Namespace(**old))
    task = make_task(segment_packing="g-transformer", context_override=True)
    with caplog.at_level("WARNING"):
        task.adopt_context_settings(argparse.Namespace(**old))
    assert task.cfg.segment_packing == "g-transformer"
    assert "--segment-packing g-transformer differs from the checkpoint's (per-side)" in caplog.text
    with pytest.raises(ValueError, match="--segment-packing sideways: one of"):
        make_task(segment_packing="sideways")
    # recorded with the model's arguments as a plain string, read back at inference
    import fairseq_docctx.models  # noqa: F401  (registers the architectures)

    args = tiny_segment_args("doc2doc_transformer")
    make_task(segment_packing="per-side").build_model(args)
    assert args.segment_packing == "per-side" and type(args.segment_packing) is str


def test_a_segment_longer_than_the_model_is_one_line_naming_it():
    """Without --skip-invalid-size-inputs-valid-test a segment over the model's positions is
    one line naming the segment, its sentences and document and the lengths, advising smaller
    segments (not --truncate-source, which cuts sentences); with it fairseq leaves it out."""
    from fairseq_docctx.errors import UsageError

    d = toy_dictionary()
    pair, docs = toy_pair(d, [5, 1, 7, 3])
    task = make_task(max_segment_tokens=30)
    ds = task.datasets["test"] = task.document_dataset("test", pair, docs)
    task.split_files["test"] = (("bin/test.src-tgt.src", "bin/test.src-tgt.tgt"), docs)
    indices = np.arange(len(ds))
    limit = 12
    long = [i for i in range(len(ds)) if ds.src_sizes[i] > limit or ds.tgt_sizes[i] > limit]
    assert 1 < len(long) < len(ds)
    first, ids = long[0], ds.plan.sentences(long[0])
    with pytest.raises(UsageError) as e:
        task.filter_indices_by_size(indices, ds, (limit, limit))
    msg = str(e.value)
    doc = int(docs.sent_doc[ids[0]])
    assert msg.startswith(f"test: segment {first} (sentences {ids[0]}-{ids[-1]} of document 'd{doc}', from its "
                          f"sentence {int(docs.sent_pos[ids[0]]) + 1}): ")
    side = "source" if ds.src_sizes[first] > limit else "target"
    assert f"more than the model's {limit} {side} positions" in msg
    assert f"({len(long) - 1} more of test are too long: {', '.join(map(str, long[1:]))})" in msg
    assert msg.endswith(": shorten or split it, pack smaller segments (--max-segment-tokens below the model's "
                        "positions, with --context-override), or leave it out with --skip-invalid-size-inputs-valid-test")
    kept = task.filter_indices_by_size(indices, ds, (limit, limit), ignore_invalid_inputs=True)
    assert sorted(kept.tolist()) == sorted(set(range(len(ds))) - set(long))


def test_only_the_training_split_is_packed_on_the_targets():
    """The training split is packed on both sides' lengths; every other split on the
    source's alone, as the hub and docctx-translate pack raw documents."""
    d = toy_dictionary()
    pair, docs = toy_pair(d, [5, 1, 7, 3, 4, 6, 2, 9])
    task = make_task(max_segment_tokens=14)

    def cut(plan):
        return [plan.sentences(i).tolist() for i in range(len(plan))]

    train = cut(task.document_dataset("train", pair, docs).plan)
    test = cut(task.document_dataset("test", pair, docs).plan)
    assert train == cut(seg.plan_segments(docs, pair.src_sizes, pair.tgt_sizes, 14))
    assert test == cut(seg.plan_segments(docs, pair.src_sizes, None, 14)) != train


def test_generation_shards_pack_their_own_documents():
    """--num-shards N --shard-id I on segments: shard I's documents only, sentence ids the
    split's; the shards together hold every sentence once; training ignores shards."""
    d = toy_dictionary()
    pair, docs = toy_pair(d, [5, 1, 7, 3, 4, 6, 2])
    seen = []
    for shard in range(3):
        ds = make_task(num_shards=3, shard_id=shard).document_dataset("test", pair, docs)
        mine = np.concatenate([ds.plan.sentences(i) for i in range(len(ds))])
        whole = np.flatnonzero(np.isin(docs.sent_doc, docs.sent_doc[mine]))
        assert sorted(mine.tolist()) == whole.tolist()  # whole documents
        seen.extend(mine.tolist())
    assert sorted(seen) == list(range(len(pair)))
    train = make_task(num_shards=3, shard_id=1).document_dataset("train", pair, docs)
    assert sum(int(c) for c in train.plan.counts) == len(pair)


class CopyGenerator:
    """A stand-in for fairseq's generator whose translation of a row is its source: two
    hypotheses per row. Segments whose id is in ``merge`` get a best hypothesis with one
    separator fewer (a merged sentence); the sentence-by-sentence fallback gets a stray
    separator in front (which the task removes)."""

    len_penalty = 1.0

    def __init__(self, d, merge):
        self.d, self.merge, self.calls = d, set(merge), []

    def hypo(self, tokens, score):
        n = tokens.numel()
        return {"tokens": tokens, "score": torch.tensor(score), "attention": None,
                "alignment": torch.empty(0), "positional_scores": -torch.arange(1, n + 1).float() / 10}

    def generate(self, models, sample, **kwargs):
        sep, pad = self.d.index("<sep>"), self.d.pad()
        segments = "segment_sentences" in sample
        self.calls.append(segments)
        out = []
        for row, sid in enumerate(sample["id"].tolist()):
            src = sample["net_input"]["src_tokens"][row]
            src = src[src != pad]
            if not segments:
                out.append([self.hypo(torch.cat([src.new_tensor([sep]), src]), -1.0)])
                continue
            best = src.clone()
            if sid in self.merge:
                best[(best == sep).nonzero()[0]] = 9
            worse = torch.cat([src.new_tensor([sep]), src])  # one sentence too many
            out.append([self.hypo(best, -1.0), self.hypo(worse, -2.0), self.hypo(src.clone(), -3.0)])
        return out


def test_inference_step_gives_one_hypothesis_per_sentence_with_fallback():
    task = make_task()
    d = task.tgt_dict
    pair, docs = toy_pair(d, [5, 1, 7, 3, 4, 6])
    ds = seg.SegmentPairDataset(pair, seg.plan_segments(docs, pair.src_sizes, pair.tgt_sizes, 16), d.index("<sep>"))
    batch = ds.collater([ds[i] for i in range(len(ds))])
    multi = [sid for sid, s in zip(batch["id"].tolist(), batch["segment_sentences"]) if len(s) > 1]
    merge = multi[:2]
    expected_ids = torch.cat(batch["segment_sentences"]).tolist()
    gen = CopyGenerator(d, merge)
    hypos = task.inference_step(gen, [None], batch)
    assert gen.calls == [True, False]  # the segments, then the fallback sentences
    assert task.segment_decoding.fallbacks == 2 and task.segment_decoding.decoded == len(ds)
    assert task.segment_decoding.misaligned == {"count": 2, "empty": 0, "window": 0}
    assert batch["id"].tolist() == expected_ids and sorted(expected_ids) == list(range(len(pair)))
    assert len(hypos) == len(expected_ids) == batch["net_input"]["src_tokens"].size(0)
    fell_back = {i for sid in merge for i in ds.plan.sentences(sid).tolist()}
    pad = d.pad()
    for row, sent in enumerate(expected_ids):
        src = batch["net_input"]["src_tokens"][row]
        tgt = batch["target"][row]
        assert src[src != pad].tolist() == pair.src[sent].tolist()
        assert tgt[tgt != pad].tolist() == pair.tgt[sent].tolist()
        assert batch["segment_sentences"][row].tolist() == [sent]
        h = hypos[row]
        assert all(x["tokens"].tolist() == pair.src[sent].tolist() for x in h)
        assert all(x["positional_scores"].numel() == x["tokens"].numel() for x in h)
        # split segments: the pieces of the best and of the third hypothesis (the second has
        # one sentence too many); fallback sentences: their own single hypothesis
        assert len(h) == (1 if sent in fell_back else 2)
    assert batch["net_input"]["prev_output_tokens"][:, 0].eq(d.eos()).all()
    # a split sentence's score: its positional scores normalized by its length (lenpen 1)
    row = next(r for r, s in enumerate(expected_ids) if s not in fell_back)
    assert float(hypos[row][0]["score"]) == pytest.approx(float(hypos[row][0]["positional_scores"].mean()))


def test_split_hypothesis_keeps_the_scores():
    sep, eos = 4, 2
    h = {"tokens": torch.tensor([7, 8, sep, sep, 9, eos]), "score": torch.tensor(-1.0), "alignment": None,
         "attention": torch.rand(3, 6), "positional_scores": torch.tensor([-1., -2, -3, -4, -5, -6])}
    pieces = seg.split_hypothesis(h, sep, eos, 3, len_penalty=1.0)
    assert [p["tokens"].tolist() for p in pieces] == [[7, 8, eos], [eos], [9, eos]]
    assert [p["positional_scores"].tolist() for p in pieces] == [[-1, -2, -3], [-4], [-5, -6]]
    assert [round(float(p["score"]), 4) for p in pieces] == [-2.0, -4.0, -5.5]
    assert [p["attention"].shape[1] for p in pieces] == [3, 1, 2]
    assert seg.split_hypothesis(h, sep, eos, 2) is None and seg.split_hypothesis(h, sep, eos, 4) is None


# ------------------------------------------------- fairseq-train / fairseq-generate
@pytest.fixture(scope="module")
def segments_ckpt(toy_bin, tmp_path_factory):
    """fairseq's transformer trained a few updates on segments of the toy documents (with
    multi-resolution), packed per side (the rule of the checkpoints written before
    --segment-packing; test_segment_scoring.py trains with the default): the checkpoint and
    the training log."""
    save = tmp_path_factory.mktemp("segments")
    p = run(["fairseq-train", toy_bin, *USER_DIR, "--task", "document_translation", "--doc-mode", "segments",
             "--max-segment-tokens", "48", "--segment-packing", "per-side", "--multi-resolution",
             "--arch", "transformer", *TINY_MODEL,
             "--max-tokens", "400", "--max-update", "6", "--log-interval", "1", "--no-epoch-checkpoints",
             "--save-dir", save])
    return save / "checkpoint_last.pt", p.stdout + p.stderr


def test_train_on_segments(toy_bin, segments_ckpt):
    ckpt, log = segments_ckpt
    docs = DocIndex.read(toy_bin / "train.src-tgt.docs")
    sizes = split_sizes(toy_bin, "train")
    plan = seg.plan_segments(docs, *sizes, max_tokens=48, multi_resolution=True, packing="per-side")
    assert plan.num_levels > 1
    assert f"train: {len(plan):,} segments at {plan.num_levels} resolutions of at most 48 tokens" in log
    assert len(re.findall(r"\| train_inner \|.*? loss=([\d.]+),", log)) == 6
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    args = state["cfg"]["model"]  # the settings inference adopts, recorded with the model's args
    assert (args.doc_mode, args.max_segment_tokens, args.context_size) == ("segments", 48, 0)
    assert args.segment_packing == "per-side" and state["cfg"]["task"]["segment_packing"] == "per-side"
    assert type(args.doc_mode) is str  # not fairseq's choice enum: the checkpoint pickles plainly


def test_a_transformer_on_segments_decodes_alike_through_ctranslate2(toy_bin, segments_ckpt, tmp_path):
    """A transformer trained on segments exports as a segment model without rules of its own
    (``constrained`` false): CTranslate2 decodes the segments the fairseq path packs, and the
    same ones are misaligned and decoded again sentence by sentence (greedy search, float32)."""
    pytest.importorskip("ctranslate2")
    from fairseq_docctx.hub import export_ctranslate2, from_exported, from_pretrained

    ckpt, _ = segments_ckpt
    record = export_ctranslate2(str(ckpt), str(tmp_path / "ct2"), data=str(toy_bin))
    assert record["segments"] == {"max_segment_tokens": 48, "segment_packing": "per-side", "constrained": False}
    docs = docids_documents(toy_bin.parent / "raw" / "test.src")
    hubs = [from_pretrained(str(ckpt), data=str(toy_bin)), from_exported(str(tmp_path / "ct2"))]
    fs, ct = [h.translate_documents(docs, beam=1, max_len_b=60) for h in hubs]
    assert ct == fs and [len(d) for d in ct] == [len(d) for d in docs]
    assert hubs[1].segment_report == hubs[0].segment_report and hubs[0].segment_report[0] > 0


def split_sizes(data_bin, split):
    """The binarized lengths of a split's sentences (source, target), copied while the
    memory-mapped datasets are open."""
    sides = [data_utils.load_indexed_dataset(str(data_bin / f"{split}.src-tgt.{s}"), None) for s in ("src", "tgt")]
    return [np.array(d.sizes) for d in sides]


@pytest.mark.parametrize("limit", [None, 12])
def test_generate_prints_one_hypothesis_per_sentence(toy_bin, segments_ckpt, limit):
    """fairseq-generate without --doc-mode: the checkpoint's segments are adopted; one
    S-/T-/H- group per source sentence under its id, fallbacks counted. With the
    checkpoint's 48 tokens every segment has several sentences and the barely trained model
    miscounts them all; with 12 most segments are one sentence, complete as decoded."""
    ckpt, _ = segments_ckpt
    p = run(["fairseq-generate", toy_bin, *USER_DIR, "--task", "document_translation", "--path", ckpt,
             "--beam", "2", "--max-tokens", "200", "--gen-subset", "test", "--max-len-b", "60",
             *([] if limit is None else ["--max-segment-tokens", limit, "--context-override"])])
    out = p.stdout
    raw = toy_bin.parent / "raw"
    src_lines = (raw / "test.src").read_text().splitlines()
    tgt_lines = (raw / "test.tgt").read_text().splitlines()
    h_ids = [int(m) for m in re.findall(r"^H-(\d+)\t", out, re.M)]
    assert sorted(h_ids) == list(range(len(src_lines)))
    sources = dict((int(i), s) for i, s in re.findall(r"^S-(\d+)\t(.*)$", out, re.M))
    targets = dict((int(i), s) for i, s in re.findall(r"^T-(\d+)\t(.*)$", out, re.M))
    assert sources == dict(enumerate(src_lines)) and targets == dict(enumerate(tgt_lines))
    assert "<sep>" not in "".join(re.findall(r"^H-\d+\t\S+\t(.*)$", out, re.M))
    assert "--doc-mode segments (from the checkpoint)" in out + p.stderr
    # the split's line, once: its denominator every segment of the split
    lines = re.findall(r"\d+ of \d+ segments of the split decoded again", out + p.stderr)
    assert len(lines) == 1, out + p.stderr
    fell, total, why = parse_segment_run_line(out + p.stderr)
    src_sizes, _ = split_sizes(toy_bin, "test")  # the test split is packed on its sources, per side (the fixture's)
    plan = seg.plan_segments(DocIndex.read(toy_bin / "test.src-tgt.docs"), src_sizes, None,
                             48 if limit is None else limit, packing="per-side")
    assert total == len(plan) < len(src_lines)
    assert 0 < fell <= total and sum(why.values()) == fell and why["window"] == 0  # no window: a transformer
    if limit is not None:
        assert "--max-segment-tokens 12 differs from the checkpoint's (48): decoding with 12" in out + p.stderr
        assert fell < total, "no segment was complete as decoded: the split path was not run"


def _with_longer_references(toy_bin, dest):
    """A copy of the toy data directory whose test references are twice as long (every
    target sentence's words twice): packed on the references, its segments would differ."""
    from fairseq.data import Dictionary, data_utils, indexed_dataset

    dest.mkdir()
    for f in toy_bin.iterdir():
        if not f.name.startswith("test.src-tgt.tgt."):
            (dest / f.name).symlink_to(f)
    d = Dictionary.load(str(toy_bin / "dict.tgt.txt"))
    refs = data_utils.load_indexed_dataset(str(toy_bin / "test.src-tgt.tgt"), d)
    builder = indexed_dataset.make_builder(str(dest / "test.src-tgt.tgt.bin"), impl="mmap", vocab_size=len(d))
    for i in range(len(refs)):
        t = refs[i]
        builder.add_item(torch.cat([t[:-1], t[:-1], t[-1:]]))
    builder.finalize(str(dest / "test.src-tgt.tgt.idx"))
    return dest


def test_generate_hub_and_translate_decode_a_test_set_in_the_same_segments(toy_bin, segments_ckpt, tmp_path,
                                                                          monkeypatch, capsys):
    """fairseq-generate on the binarized test split, the hub on its raw documents and
    docctx-translate on its raw file decode the same segments (the sentences of every batch
    row reaching the task's inference step, by corpus index): packed on the sources alone,
    although the references given to fairseq-generate are twice as long, which would give
    other segments."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import generate as fairseq_generate

    from fairseq_docctx.cli.translate import cli_main as translate_main
    from fairseq_docctx.hub import from_pretrained
    from fairseq_docctx.tasks.document_translation import DocumentTranslationTask

    ckpt, _ = segments_ckpt
    data = _with_longer_references(toy_bin, tmp_path / "bin")
    decoded, step = [], DocumentTranslationTask.inference_step

    def spy(self, generator, models, sample, *args, **kwargs):
        decoded.extend(tuple(s.tolist()) for s in sample["segment_sentences"])  # before the batch is rewritten
        return step(self, generator, models, sample, *args, **kwargs)
    monkeypatch.setattr(DocumentTranslationTask, "inference_step", spy)

    def segments(run):
        decoded.clear()
        run()
        return sorted(decoded)

    argv = [str(data), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation", "--path",
            str(ckpt), "--beam", "1", "--max-tokens", "400", "--gen-subset", "test", "--max-len-b", "20", "--cpu"]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_generation_parser(), argv))
    generate = segments(lambda: fairseq_generate.main(cfg))
    raw = toy_bin.parent / "raw"
    src, ids = (raw / "test.src").read_text().splitlines(), (raw / "test.docids").read_text().splitlines()
    documents = [[s for s, i in zip(src, ids) if i == doc] for doc in dict.fromkeys(ids)]
    hub = from_pretrained(str(ckpt), data=str(toy_bin))
    by_hub = segments(lambda: hub.translate_documents(documents, beam=1))
    by_translate = segments(lambda: run_in_process(translate_main, [raw / "test.src", "--path", ckpt, "--data", toy_bin,
                                                                    "--beam", "1", "-o", tmp_path / "out", "--quiet"],
                                                   capsys))
    assert generate == by_hub == by_translate
    assert sorted(i for s in generate for i in s) == list(range(len(src))) and max(map(len, generate)) > 2
    # the references' lengths would have cut the test set otherwise
    docs = DocIndex.read(toy_bin / "test.src-tgt.docs")
    sizes = [np.array([len(s.split()) + 1 for s in src]), np.array([2 * len(t.split()) + 1 for t in
                                                                  (raw / "test.tgt").read_text().splitlines()])]
    with_refs = seg.plan_segments(docs, *sizes, max_tokens=48, packing="per-side")
    assert sorted(tuple(with_refs.sentences(i).tolist()) for i in range(len(with_refs))) != generate


def test_docctx_generate_sums_the_shards_segment_counts(toy_bin, segments_ckpt, tmp_path):
    """docctx-generate --processes 2: each shard logs its part of the split; the reported line
    sums them, its denominator every segment of the split."""
    import io

    from fairseq_docctx.inference.generate import generate, segment_fallbacks

    ckpt, _ = segments_ckpt
    reported, out = [], io.StringIO()
    generate([str(toy_bin), "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
              "--path", str(ckpt), "--beam", "2", "--max-tokens", "200", "--gen-subset", "test", "--max-len-b", "60"],
             processes=2, output=out, report=reported.append)
    lines = [r for r in reported if "segments of the split" in r]
    assert len(lines) == 1 and lines[0] in out.getvalue()
    fell, total, why = parse_segment_run_line(lines[0])
    src_sizes, _ = split_sizes(toy_bin, "test")  # packed on the sources, per side (the fixture's)
    assert total == len(seg.plan_segments(DocIndex.read(toy_bin / "test.src-tgt.docs"), src_sizes, None, 48,
                                          packing="per-side"))
    assert 0 < fell <= total and sum(why.values()) == fell
    # the sum of the shards' lines; a log without one is not a segment model's
    logs = ["x | 1 of 5 segments of the split decoded again sentence by sentence (misaligned: 1 sentence count, "
            "0 empty sentence, 0 outside the length window)",
            "2 of 4 segments of the split decoded again sentence by sentence (misaligned: 0 sentence count, "
            "1 empty sentence, 1 outside the length window)"]
    assert parse_segment_run_line(segment_fallbacks(logs)) == (3, 9, {"count": 1, "empty": 1, "window": 1})
    assert segment_fallbacks(["no count here"]) is None


# ------------------------------------------------- the task and the segment models
def tiny_segment_args(arch):
    from fairseq.models import ARCH_CONFIG_REGISTRY

    args = argparse.Namespace(arch=arch, encoder_embed_dim=16, encoder_ffn_embed_dim=32, encoder_attention_heads=2,
                              encoder_layers=1, decoder_embed_dim=16, decoder_ffn_embed_dim=32,
                              decoder_attention_heads=2, decoder_layers=1, encoder_ctxlayers=1,
                              decoder_ctxlayers=1, cross_ctxlayers=1, max_source_positions=256,
                              max_target_positions=256)
    ARCH_CONFIG_REGISTRY[arch](args)
    return args


@pytest.mark.parametrize("arch", ["g_transformer", "doc2doc_transformer"])
def test_segment_models_need_segments_and_hear_of_epochs_and_the_flag(arch):
    """A segment model is refused outside --doc-mode segments; the task tells the model the
    epoch (fairseq's trainer calls only the task's begin_epoch) and applies
    --no-sentence-count-constraint and --fairseq-kv-cache when it builds the generator."""
    import fairseq_docctx.models  # noqa: F401  (registers the architectures)

    with pytest.raises(ValueError, match="add --doc-mode segments"):
        make_task(doc_mode="sentences", context_size=0).build_model(tiny_segment_args(arch))
    task = make_task()
    model = task.build_model(tiny_segment_args(arch))
    task.begin_epoch(31, model)
    if arch == "g_transformer":  # --doc-noise-epochs: the word masking ends after them
        assert model.epoch == 31
    gen_args = argparse.Namespace(beam=2)
    task.build_generator([model], gen_args)
    assert model.keeps_sentence_count
    assert model.preallocated_kv_cache
    task = make_task(no_sentence_count_constraint=True, fairseq_kv_cache=True)
    task.build_generator([model], gen_args)
    assert not model.keeps_sentence_count
    assert not model.preallocated_kv_cache  # --fairseq-kv-cache


def test_hub_decodes_a_segment_longer_than_200_tokens_whole(toy_bin, segments_ckpt):
    """The hub searches segments with docctx-translate's length limit (1.2 x the source + 10),
    not fairseq's max_len_b 200 of the checkpoint's generation settings: a model that copies
    its source decodes a 5-sentence segment of 305 tokens whole, where the 200-token limit
    cuts it and sends it to the sentence-by-sentence fallback (the model, a ``transformer``
    on segments, has no length windows for the task to raise the limit to)."""
    from fairseq_docctx.cli.translate import build_parser
    from fairseq_docctx.hub import from_pretrained

    ckpt, _ = segments_ckpt
    hub = from_pretrained(str(ckpt), data=str(toy_bin), max_segment_tokens=512, context_override=True)
    given = build_parser().parse_args(["--path", "x"])
    searched = []
    build = hub.build_generator

    def spy(gen_args):
        searched.append((gen_args.beam, gen_args.lenpen, gen_args.max_len_a, gen_args.max_len_b))
        return build(gen_args)
    hub.build_generator = spy
    doc = [" ".join(f"w{(7 * i + j) % 30}" for j in range(60)) for i in range(5)]
    tokens = [hub.encode(s) for s in doc]
    sep, eos = hub.tgt_dict.index("<sep>"), hub.tgt_dict.eos()
    target = torch.cat([torch.cat([t[:-1], torch.tensor([sep])]) for t in tokens])[:-1].tolist() + [eos]
    assert len(target) == 305
    decoder, forward = hub.models[0].decoder, hub.models[0].decoder.forward

    def copying(prev_output_tokens, *args, **kwargs):  # the next token of the source segment
        x, extra = forward(prev_output_tokens, *args, **kwargs)
        step = prev_output_tokens.size(1) - 1
        x[:, -1, target[step] if step < len(target) else eos] += 1000.0
        return x, extra
    decoder.forward = copying
    fell = hub.segment_fallbacks[0]
    assert hub.translate_document(doc) == doc and hub.segment_fallbacks[0] == fell
    assert searched[-1] == (given.beam, given.lenpen, given.max_len_a, given.max_len_b) == (5, 1.0, 1.2, 10)
    hub.translate_document(doc, max_len_a=0, max_len_b=200)  # fairseq's default limit
    assert searched[-1][2:] == (0, 200) and hub.segment_fallbacks[0] == fell + 1


@pytest.mark.parametrize("arch", ["g_transformer", "doc2doc_transformer"])
def test_language_tokens_through_the_task(arch, monkeypatch):
    """Segments whose every sentence starts with a language token (the data of a pretrained
    M2M-100-style model; the task's tokens stood in for): the biased model of the test below,
    beam 4, through the task under a limit below the longest segments' (``--max-len-a 0
    --max-len-b 6``): every sentence comes back once, starting with the target token, not
    empty besides it and within the window of its source sentence with neither token counted,
    and no segment falls back."""
    import fairseq_docctx.models  # noqa: F401  (registers the architectures)
    from fairseq_docctx.tasks.language_tokens import LanguageTokens

    task = make_task()
    d = task.tgt_dict
    src_tok, tgt_tok = d.add_symbol("__en__"), d.add_symbol("__de__")
    monkeypatch.setattr(LanguageTokens, "source", lambda self: src_tok)
    monkeypatch.setattr(LanguageTokens, "target", lambda self: tgt_tok)
    torch.manual_seed(0)
    model = tilted_toward_ending(task.build_model(tiny_segment_args(arch)).eval(), d)
    plain, docs = toy_pair(d, [17, 1, 9, 4, 12, 3], seed=2, with_target=False)
    src = [torch.cat([torch.LongTensor([src_tok]), plain.src[i]]) for i in range(len(plain))]
    pair = LanguagePairDataset(src, [len(x) for x in src], d, None, None, d)
    ds = seg.SegmentPairDataset(pair, seg.plan_segments(docs, pair.src_sizes, None, 64), d.index("<sep>"),
                                shuffle=False)
    generator = task.build_generator([model], argparse.Namespace(beam=4, max_len_a=0, max_len_b=6))
    hypos = {}
    with torch.no_grad():
        for batch in task.get_batch_iterator(ds, max_sentences=4).next_epoch_itr(shuffle=False):
            out = task.inference_step(generator, [model], batch)  # (the batch rewritten into its sentences)
            hypos.update(zip(batch["id"].tolist(), out))
    assert sorted(hypos) == list(range(len(pair)))
    for i, h in hypos.items():
        tokens, n = h[0]["tokens"], seg.sentence_length(src[i], src_tok)
        assert int(tokens[0]) == tgt_tok and 1 <= seg.sentence_length(tokens, tgt_tok) <= int(1.2 * n + 10), (i, tokens)
    assert task.segment_decoding.fallbacks == 0 and task.segment_decoding.decoded == len(ds)


@pytest.mark.parametrize("arch", ["g_transformer", "doc2doc_transformer"])
def test_misaligned_segments_fall_back_and_the_split_is_counted(arch, caplog):
    """The model biased towards ending (conftest's ``tilted_toward_ending``), beam 4, through
    the task (its batches, its generator, its inference step) on segments of up to 17
    sentences: with the length windows (the default) no segment is misaligned and no output
    sentence is empty, though the generator's limit (``--max-len-a 0 --max-len-b 6``) is
    below the longest segments' (it is raised to the sum of their windows); without them
    (``--no-sentence-length-window``) the empty sentences make their segments misaligned,
    those are decoded again sentence by sentence, counted by reason, and no output sentence
    is empty. Each run logs one line for the split whose denominator is the split's number
    of segments."""
    import logging

    import fairseq_docctx.models  # noqa: F401  (registers the architectures)

    for no_window in (False, True):
        task = make_task(no_sentence_length_window=no_window)
        d = task.tgt_dict
        torch.manual_seed(0)
        model = tilted_toward_ending(task.build_model(tiny_segment_args(arch)).eval(), d)
        pair, docs = toy_pair(d, [17, 1, 9, 4, 12, 3], seed=2, with_target=False)
        ds = seg.SegmentPairDataset(pair, seg.plan_segments(docs, pair.src_sizes, None, 64),
                                    d.index("<sep>"), shuffle=False)
        assert max(ds.plan.counts) > 8  # more sentences than the limit below lets end
        # with the windows a limit that is too short for the longest segments (raised), else a generous one
        limit = 200 if no_window else 6
        generator = task.build_generator([model], argparse.Namespace(beam=4, max_len_a=0, max_len_b=limit))
        assert (model.sentence_length_window is None) == no_window
        caplog.clear()
        hypos = {}
        with caplog.at_level(logging.INFO, logger="fairseq_docctx"), torch.no_grad():
            for batch in task.get_batch_iterator(ds, max_sentences=4).next_epoch_itr(shuffle=False):
                out = task.inference_step(generator, [model], batch)
                hypos.update(zip(batch["id"].tolist(), out))
        assert sorted(hypos) == list(range(len(pair)))
        assert all(hypos[i][0]["tokens"].numel() > 1 for i in hypos), "an empty output sentence"
        assert all(hypos[i][0]["tokens"].numel() - 1 <= int(1.2 * (pair.src[i].numel() - 1) + 10) for i in hypos
                   if not no_window)
        assert task.segment_decoding.decoded == len(ds) > 6
        split = [r.getMessage() for r in caplog.records if "segments of the split" in r.getMessage()]
        assert len(split) == 1 and parse_segment_run_line(split[0]) == (
            task.segment_decoding.fallbacks, len(ds), task.segment_decoding.misaligned), split
        if no_window:  # the sentence count kept, but empty sentences
            assert task.segment_decoding.misaligned["empty"] > 0
            assert task.segment_decoding.misaligned["count"] == task.segment_decoding.misaligned["window"] == 0
        else:  # the 6-token limit is raised to the windows' sum: never a cut segment
            assert task.segment_decoding.fallbacks == 0
