"""The inference commands' shared options: checks of the numeric ones (``--beam``,
``--batch-size``, ``--max-tokens``...: one line naming the option, before any work) and
``docctx-translate``'s search defaults (:data:`TRANSLATE_DEFAULTS`) and the ctranslate2
engine's prefix modes (:data:`CT2_PREFIX_MODES`, :func:`check_ct2_prefix`)."""
from typing import Dict, Optional

#: ``docctx-translate``'s search settings by default (``--beam``, ``--lenpen``, ``--max-len-a``,
#: ``--max-len-b``: a translation has at most 1.2 x the source's tokens + 10); the hub's
#: defaults for segment models (:meth:`~fairseq_docctx.hub.DocumentHubInterface.generate_documents`)
TRANSLATE_DEFAULTS = {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10}

#: how the ctranslate2 engine decodes a sentence after a target prefix (``--ct2-prefix``, the
#: first the default): ``stepwise``, fairseq's beam search with the prefix forced one step at a
#: time on every beam; ``one-pass``, the prefix run in one decoder pass, the ``beam`` best
#: first tokens, each continued greedily; ``one-pass-beam``, the prefix in one pass, the best
#: first token, then beam search (:class:`~fairseq_docctx.inference.ctranslate2.CTranslate2Generator`)
CT2_PREFIX_MODES = ("stepwise", "one-pass", "one-pass-beam")


def check_ct2_prefix(mode: str) -> str:
    """``mode`` if it is one of :data:`CT2_PREFIX_MODES`, else ``ValueError`` (one line)."""
    if mode not in CT2_PREFIX_MODES:
        raise ValueError(f"--ct2-prefix {mode}: must be one of {', '.join(CT2_PREFIX_MODES)}")
    return mode


def check_at_least(options: Dict[str, Optional[float]], minimum: int = 1) -> None:
    """Refuse (``ValueError``: ``"--beam 0: must be at least 1"``) an option below
    ``minimum``; ``options``: option name -> value (``None``: not given, not checked)."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise ValueError(f"{name} {value}: must be at least {minimum}")
