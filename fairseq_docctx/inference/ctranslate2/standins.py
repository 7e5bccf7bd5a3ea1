"""The stand-in models of an export: what the task and the hub ask of a model (its
positions, its context contract, a segment model's rules) for a model that CTranslate2 runs,
built from the export record (:func:`exported_model`)."""
import torch

from ...models.document_context import DocumentContextModel
from ...models.segment_model import SegmentModel


class ExportedModel(torch.nn.Module):
    """What the task and the hub ask of a model (its positions, its context contract),
    for a model that CTranslate2 runs."""

    def __init__(self, record: dict):
        super().__init__()
        self.record = record
        self.max_source_positions = int(record["max_source_positions"])
        self.max_target_positions = int(record["max_target_positions"])

    def max_positions(self):
        return self.max_source_positions, self.max_target_positions

    def max_decoder_positions(self):
        return self.max_target_positions

    def prepare_for_inference_(self, cfg):
        pass


class ExportedContextModel(DocumentContextModel, ExportedModel):
    """An exported ``concat_transformer``: it reads the source and target sides."""


class ExportedSegmentModel(SegmentModel, ExportedModel):
    """An exported ``doc2doc_transformer``: a Transformer over segments whose fairseq search
    keeps every hypothesis to its source's number of sentences and each output sentence to
    its length window (:class:`~fairseq_docctx.models.g_transformer.SegmentDecoder`).
    CTranslate2 searches without those rules; the task checks the same rules on the decoded
    segment instead (:class:`~fairseq_docctx.tasks.segment_decoding.SegmentDecoding` reads
    :attr:`sentence_length_window` and decodes a segment that breaks one again sentence by
    sentence). It is a :class:`~fairseq_docctx.models.segment_model.SegmentModel`, so the
    task sets its rules as those of the fairseq segment models; it places no sentence-start
    tokens (an export of data with language tokens is refused)."""

    def __init__(self, record: dict):
        super().__init__(record)
        self.keep_sentence_count = True
        self.length_window = None

    def set_sentence_count_constraint(self, on: bool = True):
        self.keep_sentence_count = bool(on)
        return self

    @property
    def keeps_sentence_count(self) -> bool:
        return self.keep_sentence_count

    def set_sentence_length_window(self, window=None):
        from ...data.segments import LengthWindow

        self.length_window = window if isinstance(window, LengthWindow) else None
        return self

    @property
    def sentence_length_window(self):
        """The window each output sentence is checked against after the search (``None``:
        off, or with the sentence count off, as in fairseq's search)."""
        return self.length_window if self.keep_sentence_count else None


def exported_model(record: dict, task) -> ExportedModel:
    """The stand-in model of an export record, its context declared as the model's."""
    if (record.get("segments") or {}).get("constrained"):
        return ExportedSegmentModel(record)
    if record["model"] != "concat_transformer":
        return ExportedModel(record)
    from ...models.document_context import task_context

    sides, _ = task_context(task)
    return ExportedContextModel(record).declare_context([s for s in sides if s in ("src", "tgt")], None)

