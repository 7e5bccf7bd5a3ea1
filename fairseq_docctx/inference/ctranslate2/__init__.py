"""The CTranslate2 engine (Klein et al. 2020, "Efficient and High-Quality Neural Machine
Translation with OpenNMT"): a trained ``transformer``, ``concat_transformer`` or
``doc2doc_transformer`` exported to a CTranslate2 model folder, and decoded through the same
document-order scheduling as the fairseq models (the task's batches, its store of the model's
own previous translations).

A segment model (``--doc-mode segments``: ``doc2doc_transformer``, or a ``transformer``
trained on segments) is a Transformer over the joined sentences of a segment: the task packs
and decodes the segments as on the fairseq path (``segment_inference_step``), with this
engine's generator. CTranslate2 cannot apply ``doc2doc_transformer``'s sentence-count and
length-window rules inside its search, so the task checks them on the decoded segment
(:class:`~fairseq_docctx.inference.ctranslate2.standins.ExportedSegmentModel` carries them)
and decodes a segment that breaks one again sentence by sentence. ``g_transformer`` (group
attention) does not export.

A concatenation model is a Transformer over the joined tokens: the source context is joined
to the current sentence as the model's encoder joins it
(:func:`~fairseq_docctx.modules.context_concat.concat_with_context`: ``x_{j-K} <sep> ...
x_{j-1} <sep> x_j </s>``, positions counted from the first token, no other embedding), and
the target context (``y_{j-K} <sep> ... y_{j-1} <sep>``) followed by fairseq's decoder start
token ``</s>`` is the decoder's forced prefix (``target_prefix``), cut from the output.

The exported folder holds CTranslate2's ``model.bin`` and vocabularies, the data directory's
dictionaries and SentencePiece model, and the export record (what the checkpoint was: its
architecture, language pair, task settings with the context settings K, sides and separator).

The modules, by role:

* :mod:`.exportable`: which checkpoints export (architectures, segments, what CTranslate2
  computes as fairseq does);
* :mod:`.spec`: the CTranslate2 ``TransformerSpec`` of a model, its weights copied by
  CTranslate2's own fairseq converter;
* :mod:`.record`: the export record (``docctx-export.json``), written and read back;
* :mod:`.export`: ``docctx-export ctranslate2``'s writing of the folder behind the output guard;
* :mod:`.standins`: the stand-in models the task and the hub ask for positions and context;
* :mod:`.generator`: fairseq's beam search over a ``ctranslate2.Translator``;
* :mod:`.load`: an exported folder loaded: its task, stand-in model, translator, drafts.

This package's ``__init__`` imports nothing heavy (the command lines read :data:`PREFIX_MODES`
to parse their options). The ``ctranslate2`` package is an optional dependency (``pip install
fairseq_docctx[ctranslate2]``), imported only by :func:`import_ctranslate2`, when it is used.
"""

#: how the engine decodes a sentence after a target prefix (``--ct2-prefix``, the first the
#: default): ``stepwise``, fairseq's beam search with the prefix forced one step at a time on
#: every beam; ``one-pass``, the prefix run in one decoder pass, the ``beam`` best first tokens,
#: each continued greedily; ``one-pass-beam``, the prefix in one pass, the best first token, then
#: beam search (:class:`~fairseq_docctx.inference.ctranslate2.generator.CTranslate2Generator`)
PREFIX_MODES = ("stepwise", "one-pass", "one-pass-beam")


class ExportError(ValueError):
    """A checkpoint that does not export, or an exported folder that cannot be used; one line."""


def check_prefix_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`PREFIX_MODES`, else ``ValueError`` (one line)."""
    if mode not in PREFIX_MODES:
        raise ValueError(f"--ct2-prefix {mode}: must be one of {', '.join(PREFIX_MODES)}")
    return mode


def import_ctranslate2():
    """The ``ctranslate2`` package, or :class:`ExportError` saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ExportError("the ctranslate2 engine needs the ctranslate2 package: "
                          "pip install fairseq_docctx[ctranslate2]") from None
    return ctranslate2
