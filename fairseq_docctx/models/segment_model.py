"""The interface of a segment model: a model whose rows are segments of consecutive sentences
of a document (``--doc-mode segments``), as :class:`~fairseq_docctx.models.document_context.
DocumentContextModel` is that of a model that reads context tables.

The task sets a segment model's decoding rules through it before a search
(:mod:`fairseq_docctx.tasks.segment_decoding`) and checks the same rules on the segments it
decoded; ``g_transformer`` and ``doc2doc_transformer`` implement it inside fairseq's search
(:mod:`fairseq_docctx.models.g_transformer`), a model another engine runs may check them after
its search only. A model without the interface (e.g. a sentence-level ``transformer`` decoding
segments) gets no rules; its decoded segments are still checked for their number of sentences
and for empty ones.
"""
from typing import Optional, Sequence


class SegmentModel:
    """``class MyModel(SegmentModel, FairseqEncoderDecoderModel)``: what the task asks of a
    model over segments. The sentence count and the length windows are the model's own (it
    implements them); the others have defaults for a model without them."""

    #: the task's rows for this model are segments, not sentences
    #: (:func:`~fairseq_docctx.models.document_context.reads_segments`)
    reads_segments = True
    #: whether the model places the token every sentence of a segment starts with
    #: (:meth:`set_sentence_start`); the task refuses data with language tokens for one
    #: that does not
    places_sentence_start = False

    def set_sentence_count_constraint(self, on: bool = True):
        """Whether the search keeps every hypothesis to its source's number of sentences."""
        raise NotImplementedError

    @property
    def keeps_sentence_count(self) -> bool:
        raise NotImplementedError

    def set_sentence_length_window(self, window=None):
        """The :class:`~fairseq_docctx.data.segments.LengthWindow` of every output sentence
        (``None`` or ``False``: none); it acts with the sentence count only."""
        raise NotImplementedError

    @property
    def sentence_length_window(self):
        """The window the search applies: ``None`` when off or when the sentence count is not
        kept. The task checks the decoded sentences against it."""
        raise NotImplementedError

    def set_sentence_start(self, source: Optional[int] = None, target: Optional[int] = None):
        """The tokens every source and target sentence of a segment starts with (``None``:
        none); a model that places them (:attr:`places_sentence_start`) forces the target one
        first in every output sentence."""
        raise NotImplementedError(f"{type(self).__name__} places no sentence-start tokens")

    def set_preallocated_kv_cache(self, on: bool = True):
        """Where incremental decoding keeps the decoder's keys and values (a model without a
        cache of its own: nothing to set)."""
        return self

    def set_language_tokens(self, tokens: Sequence[int]):
        """The indices of the data's language tokens, which training noise leaves as they are
        (a model without such noise: nothing to set)."""
        return self
