"""The context schema (``data/context_batch.py``) and the model contract
(``models/document_context.py``)."""
import numpy as np
import pytest
import torch

from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models import document_context as dc
from test_dataset import make_dataset


def _dataset(sides, side_data=None, lengths=(3, 4), K=2, seed=0):
    return make_dataset(K, sides, shuffle=False, run_length=16, seed=seed, doc_lengths=list(lengths),
                        vocab=40, max_words=5, side_data=side_data)


@pytest.mark.parametrize("spelling,sides", [
    ("source", ("src",)), ("target", ("tgt",)), ("both", ("src", "tgt")), ("none", ()),
    ("src,tgt", ("src", "tgt")), ("tgt, src", ("src", "tgt")), ("source,target", ("src", "tgt")),
])
def test_context_sides_spellings(spelling, sides):
    assert cb.parse_sides(spelling) == sides


def test_unknown_side_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown side 'drafts'"):
        cb.parse_sides("src,drafts")


class _Reversed(list):
    """The sentences of a declared side that is not in the pair dataset."""

    @property
    def sizes(self):
        return np.array([len(x) for x in self])


def test_a_declared_side_is_collated_selected_and_packed_without_editing_dataset_or_task():
    """A model module declares a side (here ``rev``: the source reversed, standing for e.g.
    drafts); the dataset collates it, rows are selected, and batches count its table."""
    cb.register_side(cb.ContextSide("rev", "source", left_pad=False, aliases=("reversed",)))
    assert cb.parse_sides("source,reversed") == ("src", "rev")
    ds0, d, src, _ = _dataset("src")
    rev = _Reversed([torch.cat([s[:-1].flip(0), s[-1:]]) for s in src])
    ds, d, src, _ = _dataset("src,rev", side_data={"rev": rev})
    batch = ds.collater([ds[i] for i in range(len(ds))])
    ctx = cb.get_context(batch)
    assert cb.sides(ctx) == ("src", "rev")
    t = cb.table(ctx, "rev")
    for b, i in enumerate(batch["id"].tolist()):
        for k in range(2):
            if k < ds.docs.sent_pos[i]:
                row = t.tokens[t.index[b, k]]
                assert row[row.ne(d.pad())].tolist() == rev[i - k - 1].tolist()
            else:
                assert t.index[b, k] == -1
    rows = torch.tensor([5, 1])
    sub = cb.select_rows(ctx, rows)
    assert torch.equal(cb.index(sub, "rev"), t.index[rows]) and cb.table(sub, "rev").tokens is t.tokens
    assert torch.equal(cb.context_ids(sub), cb.context_ids(ctx)[rows])
    # the side's table counts toward --max-tokens: more batches than without it
    n_with = len(ds.batch_by_size(ds.ordered_indices(), max_tokens=30))
    n_without = len(ds0.batch_by_size(ds0.ordered_indices(), max_tokens=30))
    assert n_with >= n_without


def test_replace_side_and_cache_alignment():
    ds, d, src, tgt = _dataset("both")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    ctx = cb.get_context(batch)
    own = {i: torch.LongTensor([7] * (i + 1) + [d.eos()]) for i in range(len(ds))}
    new = cb.replace_side(ctx, "tgt", own, d.pad(), cache_entries={i: i for i in own})
    t = cb.table(new, "tgt")
    assert t.self_rows is None and cb.table(new, "src").tokens is cb.table(ctx, "src").tokens
    ids = cb.context_ids(new)
    for b in range(ids.size(0)):
        for k in range(ids.size(1)):
            if ids[b, k] >= 0:
                row = t.tokens[t.index[b, k]]
                assert row[row.ne(d.pad())].tolist() == own[int(ids[b, k])].tolist()
                assert cb.cache(new)[t.index[b, k]] == int(ids[b, k])
    with pytest.raises(KeyError):
        cb.replace_side(ctx, "tgt", {}, d.pad())


def test_gather_tokens_and_row_map():
    ds, d, src, tgt = _dataset("both")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    ctx = cb.get_context(batch)
    toks, present = cb.gather_tokens(ctx, "src", d.pad())
    for b, i in enumerate(batch["id"].tolist()):
        for k in range(2):
            row = toks[b, k]
            if present[b, k]:
                assert row[row.ne(d.pad())].tolist() == src[i - k - 1].tolist()
            else:
                assert row.eq(d.pad()).all()
    m = cb.row_map(ctx, "tgt", "src")
    s, t = cb.table(ctx, "src"), cb.table(ctx, "tgt")
    for b in range(len(ds)):  # same sentence in both tables
        assert m[t.self_rows[b]] == s.self_rows[b]
    assert cb.left_padded(s.tokens, d.pad()) and not cb.left_padded(t.tokens, d.pad())


# ------------------------------------------------------------------ the contract
def _task_and_model(toy_bin, arch, *extra):
    import fairseq_docctx  # noqa: F401
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(toy_bin), "--task", "document_translation",
                                                "--source-lang", "src", "--target-lang", "tgt", "--arch", arch,
                                                "--encoder-layers", "1", "--decoder-layers", "1",
                                                "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, task.build_model(cfg.model), cfg


def test_model_asking_for_a_side_the_task_does_not_give_is_an_error(toy_bin):
    with pytest.raises(dc.ContextMismatchError, match=r"reads the tgt side .* --context-sides src: "
                       r"use --context-sides src,tgt"):
        _task_and_model(toy_bin, "han_transformer")  # target HAN decoder, task: source only


def test_model_asking_for_more_sentences_than_the_task_gives_is_an_error(toy_bin):
    with pytest.raises(dc.ContextMismatchError, match="reads K=4 previous sentences but the task gives --context-size 2"):
        _task_and_model(toy_bin, "han_encoder_transformer", "--context-size", "2", "--han-context-size", "4")
    with pytest.raises(dc.ContextMismatchError, match="K=3"):
        _task_and_model(toy_bin, "qcn_transformer", "--context-size", "1", "--qcn-context-size", "3")


@pytest.mark.parametrize("arch,option", [("han_encoder_transformer", "han_context_size"),
                                         ("qcn_transformer", "qcn_context_size")])
def test_one_source_of_k(toy_bin, arch, option):
    """Without the model's own option K is the task's --context-size, recorded in the args
    (so the checkpoint keeps it)."""
    task, model, cfg = _task_and_model(toy_bin, arch, "--context-size", "2")
    assert getattr(cfg.model, option) == 2 and model.context_size == 2
    assert dc.context_spec(model).sides == ("src",)
    assert cfg.model.context_size == 2 and cfg.model.context_sides == "source"


def test_sentence_level_models_and_the_public_sample_function(toy_bin):
    task, model, _ = _task_and_model(toy_bin, "transformer", "--context-size", "2")
    assert dc.context_spec(model) == dc.SENTENCE_LEVEL and task.doc_batching == "runs"
    task.load_dataset("valid")
    ds = task.dataset("valid")
    sample = ds.collater([ds[i] for i in range(4)])
    assert cb.get_context(sample) is not None
    assert cb.get_context(dc.sample_for_model(sample, model)) is None
    _, concat, _ = _task_and_model(toy_bin, "concat_transformer", "--context-size", "2")
    assert dc.sample_for_model(sample, concat) is sample
    with pytest.raises(ValueError, match="must not mix"):
        dc.sample_for_model(sample, [model, concat])


def test_qcn_context_counts_at_its_real_cost(toy_bin):
    """QCN only embeds its context words: with the sentences batching they count at a
    fraction of a current token, so its batches hold about as many sentences as a
    sentence-level model's instead of several times fewer."""
    task, model, _ = _task_and_model(toy_bin, "qcn_transformer", "--context-size", "3",
                                     "--encoder-ffn-embed-dim", "64")
    cost = dc.context_spec(model).context_token_cost
    E, D, m, r, L, F = 16, 16, 4, 4, 1, 64
    assert cost == pytest.approx((E * D + 3 * r * m * D) / (L * (4 * E * E + 2 * E * F)))
    assert 0 < cost < 1
    task.load_dataset("train")
    ds = task.dataset("train")
    n = {}
    for c in (1.0, cost, 0.0):
        ds.set_doc_batching("sentences", c)
        np.random.seed(1)
        n[c] = len(ds.batch_by_size(ds.ordered_indices(), max_tokens=200))
    assert n[0.0] <= n[cost] < n[1.0]
    np.random.seed(1)
    sentence_level = ds.pair.ordered_indices()
    assert len(ds.pair.batch_by_size(sentence_level, max_tokens=200)) == n[0.0]


def _reversed_sources(task, split, data_path, pair):
    """A ``load`` hook: the split's source sentences reversed (standing for drafts read from
    the data directory); the ``short`` split of the test has one sentence too few."""
    if split == "test":
        return None
    rev = _Reversed([torch.cat([pair.src[i][:-1].flip(0), pair.src[i][-1:]]) for i in range(len(pair))])
    return rev[:-1] if getattr(task, "_short", False) else rev


def test_the_task_loads_a_declared_side_through_its_load_hook(toy_bin):
    """A side declared with a ``load`` hook reaches the batches through ``load_dataset``
    (no edit of the task or the dataset); a split without it has no such side; a hook
    whose sentence count differs from the split's is refused, naming the side."""
    cb.register_side(cb.ContextSide("revl", "source", left_pad=False, load=_reversed_sources))
    task, _, _ = _task_and_model(toy_bin, "transformer", "--context-size", "2",
                                 "--context-sides", "src,revl")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    batch = ds.collater([ds[i] for i in range(len(ds))])
    ctx = cb.get_context(batch)
    assert cb.sides(ctx) == ("src", "revl")
    t = cb.table(ctx, "revl")
    pad = task.source_dictionary.pad()
    for b, i in enumerate(batch["id"].tolist()):
        row = t.tokens[t.self_rows[b]]
        src = ds.pair.src[i]
        assert row[row.ne(pad)].tolist() == src[:-1].flip(0).tolist() + [src[-1].item()]
    task.load_dataset("test")
    ds = task.dataset("test")
    assert cb.sides(cb.get_context(ds.collater([ds[0], ds[1]]))) == ("src",)
    task._short = True
    with pytest.raises(ValueError, match="'revl' sentences of 'valid'"):
        task.load_dataset("valid")
