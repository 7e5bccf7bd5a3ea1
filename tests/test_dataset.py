"""DocumentPairDataset: context tables, document runs, batching that drops nothing."""
import numpy as np
import pytest
import torch
from fairseq.data import Dictionary, LanguagePairDataset

from fairseq_docctx.data.doc_index import DocIndex
from fairseq_docctx.data.document_dataset import DocumentPairDataset

DOC_LENGTHS = [1, 5, 2, 9, 1, 3, 7, 4]


def make_dataset(context_size=3, sides="both", shuffle=True, run_length=4, seed=0,
                 doc_lengths=DOC_LENGTHS, vocab=50, max_words=7, side_data=None):
    """Random documents of ``doc_lengths`` sentences (1 to ``max_words`` words and EOS)."""
    rng = np.random.RandomState(seed)
    d = Dictionary()
    for i in range(vocab):
        d.add_symbol(f"w{i}")
    n = sum(doc_lengths)
    # sentence i starts with a token that encodes i, so rows can be traced back
    src = [torch.LongTensor([d.index(f"w{i}")] + list(rng.randint(5, 40, rng.randint(1, max_words + 1))) + [d.eos()]) for i in range(n)]
    tgt = [torch.LongTensor([d.index(f"w{i}")] + list(rng.randint(5, 40, rng.randint(1, max_words + 1))) + [d.eos()]) for i in range(n)]
    pair = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d, shuffle=shuffle)
    docs = DocIndex([f"d{i}" for i in range(len(doc_lengths))], np.array(doc_lengths))
    ds = DocumentPairDataset(pair, docs, context_size, sides, shuffle=shuffle, run_length=run_length,
                             side_data=side_data)
    return ds, d, src, tgt


def strip(t, pad):
    return t[t.ne(pad)].tolist()


def test_context_tables_follow_documents_and_are_unique():
    ds, d, src, tgt = make_dataset()
    ids = list(range(len(ds)))
    batch = ds.collater([ds[i] for i in ids])
    ctx = batch["net_input"]["context"]
    order = batch["id"].tolist()
    assert sorted(order) == ids
    for side, sents in (("src", src), ("tgt", tgt)):
        table, index, self_ = ctx[side + "_tokens"], ctx[side + "_index"], ctx[side + "_self"]
        rows = [tuple(strip(r, d.pad())) for r in table]
        assert len(rows) == len(set(rows)), "a sentence is stored twice in the table"
        assert index.shape == (len(order), 3)
        for b, i in enumerate(order):
            assert strip(table[self_[b]], d.pad()) == sents[i].tolist()
            pos = int(ds.docs.sent_pos[i])
            for k in range(3):
                if k < pos:  # the (k+1)-th previous sentence of the same document
                    assert strip(table[index[b, k]], d.pad()) == sents[i - k - 1].tolist()
                else:  # before the document start: masked, not borrowed
                    assert index[b, k] == -1


def test_first_sentence_of_document_has_no_context():
    ds, *_ = make_dataset()
    first = ds.docs.offsets  # first sentence of every document
    prev = ds.context_rows(first)
    assert (prev == -1).all()
    # a sentence right after a document boundary never sees the other document
    assert (ds.context_rows(first[1:] )[:, 0] == -1).all()


@pytest.mark.parametrize("mult", [1, 3, 8])
@pytest.mark.parametrize("context_size", [0, 2])
def test_batching_drops_no_sentence(mult, context_size):
    ds, *_ = make_dataset(context_size=context_size)
    indices = ds.ordered_indices()
    batches = ds.batch_by_size(indices, max_tokens=40, required_batch_size_multiple=mult)
    got = np.sort(np.concatenate(batches))
    assert got.tolist() == list(range(len(ds)))


def test_max_tokens_counts_context_tables():
    ds, d, *_ = make_dataset(context_size=3, sides="both")
    max_tokens = 60
    for b in ds.batch_by_size(ds.ordered_indices(), max_tokens=max_tokens):
        batch = ds.collater([ds[int(i)] for i in b])
        ctx = batch["net_input"]["context"]
        held = max(ctx["src_tokens"].numel(), ctx["tgt_tokens"].numel())
        assert held <= max_tokens or len(b) == 1, (held, len(b))


def test_grouped_runs_count_real_tokens_and_fill_batches():
    """``doc_batching="grouped-runs"``: the same document runs, every sentence once, but a
    batch's tables are counted at their real length (models that run them in length
    groups), so batches hold more sentences than padded counting allows."""
    ds, d, *_ = make_dataset(context_size=3, sides="both")
    max_tokens = 60
    sizes = {}
    for mode in ("runs", "grouped-runs"):
        ds.doc_batching = mode
        np.random.seed(1)
        order = ds.ordered_indices()
        batches = ds.batch_by_size(order, max_tokens=max_tokens)
        assert np.sort(np.concatenate(batches)).tolist() == list(range(len(ds)))
        assert np.concatenate(batches).tolist() == order.tolist()  # runs kept in order
        for b in batches:
            ctx = ds.collater([ds[int(i)] for i in b])["net_input"]["context"]
            real = max(int(ctx[k].ne(d.pad()).sum()) for k in ("src_tokens", "tgt_tokens"))
            padded = max(ctx[k].numel() for k in ("src_tokens", "tgt_tokens"))
            held = real if mode == "grouped-runs" else padded
            assert held <= max_tokens or len(b) == 1, (mode, held, len(b))
        sizes[mode] = len(batches)
    ds.doc_batching = "runs"
    assert sizes["grouped-runs"] < sizes["runs"]


def test_runs_keep_documents_together_and_are_reshuffled():
    ds, *_ = make_dataset(context_size=2, run_length=3)
    with_seed = []
    for epoch in (1, 2):
        np.random.seed(epoch)
        order = ds.ordered_indices()
        runs = ds.doc_runs(order)
        assert max(len(r) for r in runs) <= 3
        for r in runs:  # consecutive sentences of one document
            assert (np.diff(r) == 1).all() and len(set(ds.docs.sent_doc[r])) == 1
        with_seed.append(order.tolist())
    assert with_seed[0] != with_seed[1]


def test_unique_table_saves_encodings():
    """With document runs, the table holds far fewer rows than (1 + context) per sentence."""
    ds, *_ = make_dataset(context_size=3, sides="source", run_length=16)
    batches = ds.batch_by_size(np.arange(len(ds)), max_tokens=10_000)
    table = naive = current = 0
    for b in batches:
        ctx = ds.collater([ds[int(i)] for i in b])["net_input"]["context"]
        table += ctx["src_tokens"].size(0)
        naive += len(b) + int((ctx["src_index"] >= 0).sum())
        current += len(b)
    assert table < naive
    assert table <= 1.3 * current + 3 * len(DOC_LENGTHS)


@pytest.mark.parametrize("mult", [1, 8])
def test_sentence_batching_groups_by_length_with_each_sentence_context(mult):
    """``doc_batching="sentences"``: every sentence once, batches sorted by length like
    fairseq's, each with the right context, and --max-tokens counting the current sentences
    padded plus the real tokens of their context sentences."""
    ds, d, src, tgt = make_dataset(context_size=2, sides="both")
    ds.doc_batching = "sentences"
    np.random.seed(0)
    order = ds.ordered_indices()
    assert (np.diff(ds.pair.src_sizes[order]) >= 0).all()  # fairseq's order: by length
    max_tokens = 50
    batches = ds.batch_by_size(order, max_tokens=max_tokens, required_batch_size_multiple=mult)
    assert np.sort(np.concatenate(batches)).tolist() == list(range(len(ds)))
    runs_padding = sentence_padding = 0
    for b in batches:
        batch = ds.collater([ds[int(i)] for i in b])
        ctx = batch["net_input"]["context"]
        for side, sents, toks in (("src", src, batch["net_input"]["src_tokens"]), ("tgt", tgt, batch["target"])):
            table, index, self_ = ctx[side + "_tokens"], ctx[side + "_index"], ctx[side + "_self"]
            ctx_rows = set(index[index >= 0].tolist()) - set(self_.tolist())
            real_ctx = sum(len(strip(table[r], d.pad())) for r in ctx_rows)
            assert toks.numel() + real_ctx <= max_tokens or len(b) == 1
            for row, i in enumerate(batch["id"].tolist()):
                for k in range(min(2, int(ds.docs.sent_pos[i]))):
                    assert strip(table[index[row, k]], d.pad()) == sents[i - k - 1].tolist()
        sentence_padding += batch["net_input"]["src_tokens"].numel() - int(batch["net_input"]["src_lengths"].sum())
    ds.doc_batching = "runs"
    for b in ds.batch_by_size(ds.ordered_indices(), max_tokens=max_tokens):
        batch = ds.collater([ds[int(i)] for i in b])
        runs_padding += batch["net_input"]["src_tokens"].numel() - int(batch["net_input"]["src_lengths"].sum())
    assert sentence_padding < runs_padding


def test_task_resolves_doc_batching_from_the_model(toy_bin):
    import fairseq_docctx  # noqa: F401
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    def task_for(arch, *extra):
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, [str(toy_bin), "--task", "document_translation",
                                                    "--source-lang", "src", "--target-lang", "tgt", "--arch", arch,
                                                    "--encoder-layers", "1", "--decoder-layers", "1", *extra])
        cfg = convert_namespace_to_omegaconf(args)
        task = tasks.setup_task(cfg.task)
        task.build_model(cfg.model)
        return task

    assert task_for("qcn_transformer").doc_batching == "sentences"
    assert task_for("concat_transformer").doc_batching == "runs"
    # (the target HAN decoder reads target context: the task must give it, see
    # test_context_contract.py)
    assert task_for("han_transformer", "--context-sides", "both").doc_batching == "grouped-runs"
    assert task_for("han_encoder_transformer").doc_batching == "runs"  # padded decoder
    assert task_for("qcn_transformer", "--doc-batching", "runs").doc_batching == "runs"
    task = task_for("concat_transformer", "--doc-batching", "sentences")
    task.load_dataset("train")
    task.get_batch_iterator(task.dataset("train"), max_tokens=500)
    assert task.dataset("train").doc_batching == "sentences"


def test_sentence_level_is_plain_language_pair_dataset():
    ds, *_ = make_dataset(context_size=0)
    batch = ds.collater([ds[i] for i in range(5)])
    assert "context" not in batch["net_input"]
    np.random.seed(3)
    a = ds.ordered_indices()
    np.random.seed(3)
    b = ds.pair.ordered_indices()
    assert a.tolist() == b.tolist()


def test_index_and_data_must_agree():
    ds, *_ = make_dataset()
    with pytest.raises(ValueError, match="covers"):
        DocumentPairDataset(ds.pair, DocIndex(["a"], np.array([3])), 3, "source")


# ------------------------------------------------------------------ context-only sentences
def _marked(ds, marks, **kw):
    """``ds``'s data with the sentences ``marks`` context only in its index."""
    co = np.zeros(len(ds), dtype=bool)
    co[list(marks)] = True
    docs = DocIndex(ds.docs.doc_ids, ds.docs.lengths, co)
    return DocumentPairDataset(ds.pair, docs, ds.context_size, ds.context_sides, shuffle=ds.shuffle,
                               run_length=ds.run_length, **kw)


@pytest.mark.parametrize("mode", ["runs", "grouped-runs", "sentences", "no-context", "document-order"])
def test_context_only_sentences_are_context_but_never_samples(mode):
    """Every batching leaves the marked sentences out of its samples and keeps them as the
    context of the next sentences; document-order inference translates them too (their
    translations are target context)."""
    base, d, src, tgt = make_dataset(context_size=0 if mode == "no-context" else 2, sides="both")
    # (DOC_LENGTHS) two inside a document, two first sentences (6, 18), a last one (16), a
    # whole one-sentence document (17)
    marks = {2, 3, 6, 16, 17, 18}
    ds = _marked(base, marks, position_major=mode == "document-order")
    if mode in ("grouped-runs", "sentences"):
        ds.set_doc_batching(mode)
    np.random.seed(0)
    batches = ds.batch_by_size(ds.ordered_indices(), max_tokens=60, required_batch_size_multiple=8)
    got = np.sort(np.concatenate(batches)).tolist()
    want = list(range(len(ds))) if mode == "document-order" else sorted(set(range(len(ds))) - marks)
    assert got == want
    if mode == "no-context":
        return
    seen = set()
    for b in batches:
        batch = ds.collater([ds[int(i)] for i in b])
        ctx = batch["net_input"]["context"]
        for row, i in enumerate(batch["id"].tolist()):
            for k in range(min(2, int(ds.docs.sent_pos[i]))):
                seen.add(i - k - 1)
                for side, sents in (("src", src), ("tgt", tgt)):
                    table, index = ctx[side + "_tokens"], ctx[side + "_index"]
                    assert strip(table[index[row, k]], d.pad()) == sents[i - k - 1].tolist()
    assert marks - {16, 17} <= seen  # every marked sentence with a next one is its context


def test_long_context_sentences_are_cut_to_the_model_positions():
    """A context sentence longer than the model allows keeps its last tokens (EOS
    included); the batch's own sentences and shorter context are untouched, and batching
    counts the cut length."""
    base, d, src, tgt = make_dataset(context_size=2, sides="both", max_words=12, seed=3)
    ds = _marked(base, ())
    limit = 6
    ds.set_context_max_positions((limit, limit + 1))
    assert ds.context_sizes("src", ds.pair.src_sizes).max() == limit
    cut = 0
    for b in ds.batch_by_size(np.arange(len(ds)), max_sentences=2):
        batch = ds.collater([ds[int(i)] for i in b])
        ctx = batch["net_input"]["context"]
        ids = batch["id"].tolist()
        for side, sents, lim in (("src", src, limit), ("tgt", tgt, limit + 1)):
            table, index, self_ = ctx[side + "_tokens"], ctx[side + "_index"], ctx[side + "_self"]
            for row, i in enumerate(ids):
                assert strip(table[self_[row]], d.pad()) == sents[i].tolist()
                for k in range(min(2, int(ds.docs.sent_pos[i]))):
                    j = i - k - 1
                    want = sents[j].tolist() if j in ids else sents[j].tolist()[-lim:]
                    cut += len(want) < len(sents[j])
                    assert strip(table[index[row, k]], d.pad()) == want
    assert cut > 0
    ds.set_context_max_positions(None)
    assert ds.context_sizes("src", ds.pair.src_sizes) is ds.pair.src_sizes


FILTERED_DOCS = [  # (doc id, [(source, target)]); "*" marks a pair the filters below drop
    ("d1", [("a b c", "A B C"),
            ("*" + " ".join(f"l{i}" for i in range(20)), " ".join(f"L{i}" for i in range(20))),  # --max-len
            ("d e", "D E"), ("f g h", "F G H")]),
    ("d2", [("p q", "P Q"), ("*r", "R S T U"), ("m n", "M N")]),  # --max-len-ratio
    ("d3", [("*" + " ".join(f"x{i}" for i in range(9)), "X")]),  # the whole document: gone
    ("d4", [("*" + " ".join(f"y{i}" for i in range(8)), " ".join(f"Y{i}" for i in range(8))),
            ("o", "O")]),  # a dropped first sentence
]


@pytest.fixture(scope="module")
def filtered_bin(tmp_path_factory):
    """FILTERED_DOCS through docctx-prepare with --max-len 6 --max-len-ratio 3."""
    from fairseq_docctx.cli.prepare import main

    root = tmp_path_factory.mktemp("filtered")
    pairs = [(i, x.lstrip("*"), y) for i, ps in FILTERED_DOCS for x, y in ps]
    for ext, k in (("en", 1), ("de", 2), ("docids", 0)):
        (root / f"c.{ext}").write_text("".join(p[k] + "\n" for p in pairs))
    main(["-s", "en", "-t", "de", "--trainpref", str(root / "c"), "--validpref", str(root / "c"),
          "--destdir", str(root / "bin"), "--joined-dictionary", "--max-len", "6", "--max-len-ratio", "3"])
    return root / "bin"


def _filtered_task(data, *extra):
    import fairseq_docctx  # noqa: F401
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(data), "--task", "document_translation", "--arch", "han_encoder_transformer",
        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        # learned positions: a sentence longer than 8 tokens has no position embedding
        "--encoder-learned-pos", "--decoder-learned-pos", "--max-source-positions", "8",
        "--max-target-positions", "8", "--seed", "1", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    task.load_dataset("train")
    max_positions = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    return task, model, task.build_criterion(cfg.criterion), max_positions


def test_a_filtered_pair_is_the_context_of_the_next_sentence_never_a_target(filtered_bin):
    """After docctx-prepare's filters, the batches the task gives a model hold every kept
    pair once as a target and never a dropped one (targets and loss tokens counted); the
    context of the sentence after a dropped pair is that pair (cut to the model's positions
    when longer), then the sentences before it; a long context sentence trains a model with
    learned positions without overrunning them."""
    task, model, criterion, max_positions = _filtered_task(filtered_bin, "--context-sides", "both")
    ds, d = task.dataset("train"), task.source_dictionary
    text = lambda t: d.string(t[t.ne(d.pad())])  # noqa: E731
    pairs = [(x, y) for i, ps in FILTERED_DOCS if i != "d3" for x, y in ps]
    targets = [(x, y) for x, y in pairs if not x.startswith("*")]
    itr = task.get_batch_iterator(ds, max_tokens=200, max_positions=max_positions, seed=1)
    got, loss_tokens, contexts = [], 0, {}
    for sample in itr.next_epoch_itr(shuffle=True):
        ctx = sample["net_input"]["context"]
        for row, i in enumerate(sample["id"].tolist()):
            x, y = text(ds.src[i]), text(ds.tgt[i])
            got.append((x, y))
            contexts[x] = [(text(ctx["src_tokens"][k]), text(ctx["tgt_tokens"][k])) if k >= 0 else None
                           for k in ctx["src_index"][row].tolist()[:2]]
            assert ctx["src_index"][row].tolist()[:2] == ctx["tgt_index"][row].tolist()[:2]
        loss, sample_size, log = criterion(model, sample)
        loss.backward()  # the long context sentence runs through the learned positions
        loss_tokens += sample_size
    assert sorted(got) == sorted(targets)
    assert loss_tokens == sum(len(y.split()) + 1 for _, y in targets)
    long_x, long_y = pairs[1][0].lstrip("*").split(), pairs[1][1].split()
    # cut to 8 positions: the last 7 words and </s> (the dictionary's string drops </s>)
    assert contexts["d e"] == [(" ".join(long_x[-7:]), " ".join(long_y[-7:])), ("a b c", "A B C")]
    assert contexts["m n"] == [("r", "R S T U"), ("p q", "P Q")]
    assert contexts["o"][0] == (" ".join(f"y{i}" for i in range(1, 8)), " ".join(f"Y{i}" for i in range(1, 8)))
    assert contexts["a b c"] == [None, None] and contexts["p q"] == [None, None]
    # the same batches uncut would overrun the learned positions: the cut is what prevents it
    ds.set_context_max_positions(None)
    sample = ds.collater([ds[i] for i in range(len(ds)) if text(ds.src[i]) == "d e"])
    with pytest.raises(IndexError, match="index out of range"):
        criterion(model, sample)


def test_sentence_level_training_skips_the_filtered_pairs_too(filtered_bin):
    task, _, _, max_positions = _filtered_task(filtered_bin, "--context-size", "0")
    ds, d = task.dataset("train"), task.source_dictionary
    itr = task.get_batch_iterator(ds, max_tokens=200, max_positions=max_positions, seed=1)
    got = sorted(d.string(ds.src[i]) for s in itr.next_epoch_itr(shuffle=False) for i in s["id"].tolist())
    assert got == sorted(x for i, ps in FILTERED_DOCS if i != "d3" for x, _ in ps if not x.startswith("*"))
