"""The memory of document-order inference (``--target-context hypothesis``): the batches come
in document order (position-major, :class:`~fairseq_docctx.data.document_dataset.
DocumentPairDataset`), and a batch's target context is the model's own translations of the
previous sentences, decoded in earlier batches.

:class:`DocumentOrderMemory` keeps, by corpus index of a decoded sentence, its best
translation and what the model caches of it (the cache hand-off of
:mod:`fairseq_docctx.models.document_context`: ``document_cache_entries``, which gets the
encoder output the search computed, captured while it runs); a sentence is forgotten once
the sentence K positions later has been decoded, or its document is done (:meth:`~DocumentOrderMemory.
forget`), so the memory holds at most K sentences per open document.
"""
from ..data import context_batch as cb
from ..errors import UsageError
from ..models import document_context as dc


class DocumentOrderMemory:
    """The document-order inference of ``task`` (its ``cfg``, target dictionary and
    ``language_tokens``, read when asked)."""

    def __init__(self, task):
        self.task = task
        #: the number of workers the split's batch iterator hands batches to (fairseq's
        #: trainer splits a validation split's batches over its workers); document-order
        #: inference refuses more than one (:meth:`inference_step`)
        self.shards = 1
        #: by corpus index: the best translation (target token ids ending in EOS), the
        #: target context of the next sentences
        self.translations = {}
        #: by corpus index: the model's cache entry (``document_cache_entries``)
        self.cache_entries = {}

    def start(self, num_shards: int = 1) -> None:
        """A new split is decoded in document order, its batches handed to ``num_shards``
        workers: forget everything. (In distributed training fairseq's trainer hands each
        worker every num_shards-th batch of the validation split: right for the validation
        loss, which reads the references as target context; document-order inference needs
        the translations of the previous sentences on the same worker.)"""
        self.shards = max(int(num_shards or 1), 1)
        self.translations.clear()
        self.cache_entries.clear()

    def forget(self, sentence_ids) -> None:
        """Forget these sentences (those of a document that is done: no later sentence reads
        them)."""
        for i in sentence_ids:
            self.translations.pop(i, None)
            self.cache_entries.pop(i, None)

    def with_translations(self, sample, with_cache: bool = False):
        """``sample`` with the sides of its context that come from translations replaced by
        the model's own translations of those sentences (decoded earlier: batches come in
        document order), with the model's cached entries for them if asked."""
        ctx = cb.get_context(sample)
        for side in cb.parse_sides(self.task.cfg.context_sides):
            if not cb.get_side(side).from_hypotheses:
                continue
            try:
                ctx = cb.replace_side(ctx, side, self.translations, self.task.tgt_dict.pad(),
                                      cache_entries=self.cache_entries if with_cache else None)
            except KeyError as e:
                raise RuntimeError(
                    f"document-order inference: sentence {e.args[0]} is context of this batch "
                    "but has not been translated yet (batches must come in document order: "
                    "use --target-context reference for oracle context)"
                ) from None
        return cb.with_context(sample, ctx)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """The search of a batch of sentences (as the models read it) in document order: its
        target context replaced by the translations in memory first, its translations (and,
        for a single model whose contract caches, the model's entries for its rows: the model
        gets the batch with the encoder output the search computed,
        :data:`~fairseq_docctx.models.document_context.ENCODER_OUT`, and its hypotheses) kept
        afterwards, and every row's farthest context sentence forgotten (no one's context any
        more)."""
        from_hypotheses = cb.get_context(sample) is not None
        cacher = None
        if from_hypotheses and len(models) == 1 and dc.context_spec(models[0]).caches:
            cacher = models[0].document_cache_entries
        if from_hypotheses:
            if self.shards > 1:
                raise UsageError(
                    "document-order inference (--target-context hypothesis) does not split "
                    "its batches over distributed workers (a sentence needs the translations "
                    "of the previous ones): split the documents with --num-shards N "
                    "--shard-id I instead (docctx-generate runs the N processes and merges)"
                )
            sample = self.with_translations(sample, with_cache=cacher is not None)
        generate = self.task.language_tokens.generate
        # one search for the whole position batch: every row ends at its own length limit
        # (:mod:`~fairseq_docctx.tasks.length_limits`), whatever the lengths beside it
        with _captured_encoder_out(generator if cacher is not None else None) as captured:
            hypos = generate(generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints)
        entries = [None] * len(hypos)
        if cacher is not None:
            entries = cacher({**sample, dc.ENCODER_OUT: captured[0]} if captured else sample, hypos)
        if not from_hypotheses:
            return hypos
        for i, sent_id in enumerate(sample["id"].tolist()):
            self.translations[sent_id] = hypos[i][0]["tokens"]
            if entries[i] is not None:
                self.cache_entries[sent_id] = entries[i]
        ctx_ids = cb.context_ids(cb.get_context(sample))
        self.forget(ctx_ids[:, -1][ctx_ids[:, -1] >= 0].tolist())
        return hypos


class _captured_encoder_out:
    """Within the block, the encoder output fairseq's generator computes (its model's
    ``forward_encoder``; single model) is kept in the list it yields."""

    def __init__(self, generator):
        self.model = getattr(generator, "model", None) if generator is not None else None
        self.found = []

    def __enter__(self):
        fe = getattr(self.model, "forward_encoder", None)
        if fe is None:
            self.model = None
            return self.found

        def capture(net_input):
            out = fe(net_input)
            if out is not None and len(out) == 1:
                self.found.append(out[0])
            return out

        self.model.forward_encoder = capture
        return self.found

    def __exit__(self, *exc):
        if self.model is not None:
            del self.model.forward_encoder
        return False
