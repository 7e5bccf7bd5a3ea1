"""``docctx-export transformers``: a trained ``transformer``, ``concat_transformer`` or
``doc2doc_transformer`` written as a Hugging Face ``transformers`` model folder that
``AutoModelForSeq2SeqLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load without
this package (docs/transformers.md).

The network is written as the one ``transformers`` class that computes it as fairseq does
(:mod:`.classes`: FSMT for fairseq's post-norm Transformer with sinusoidal positions, M2M-100
for pre-norm with sinusoidal positions, mBART for pre-norm with ``--layernorm-embedding`` and
learned positions, BART for post-norm with ``--layernorm-embedding`` and learned positions);
a concatenation model is that network over the joined tokens, a segment model that network
over segments, so the same classes serve them, and the folder's ``config.json`` records the
context settings (K, sides, separator, target prefix, segment packing) under ``docctx``
(:mod:`.card`), which the model card (``README.md``) explains.

The modules, by role:

* :mod:`.classes`: which checkpoints export and the ``transformers`` class and configuration of one;
* :mod:`.weights`: the fairseq parameters under the ``transformers`` names;
* :mod:`.tokenizer`: ``tokenizer.json`` over the fairseq dictionary (ids identical);
* :mod:`.card`: the ``docctx`` metadata and the model card;
* :mod:`.export`: the folder written behind the output guard.

``transformers`` and ``tokenizers`` are imported only inside the functions that use them.
"""


class ExportError(ValueError):
    """A checkpoint that does not export to transformers; one line."""


def import_transformers():
    """The ``transformers`` package, or :class:`ExportError` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ExportError("docctx-export transformers and the transformers engine need the transformers package: "
                          "pip install fairseq_docctx[transformers]") from None
    return transformers
