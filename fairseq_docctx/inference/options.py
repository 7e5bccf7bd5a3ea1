"""The inference commands' shared options: checks of the numeric ones (``--beam``,
``--batch-size``, ``--max-tokens``...: one line naming the option, before any work) and
``docctx-translate``'s search defaults (:data:`TRANSLATE_DEFAULTS`). An engine's own options
are its engine's (:mod:`fairseq_docctx.engines`)."""
from typing import Dict, Optional

#: ``docctx-translate``'s search settings by default (``--beam``, ``--lenpen``, ``--max-len-a``,
#: ``--max-len-b``: a translation has at most 1.2 x the source's tokens + 10); the hub's
#: defaults for segment models (:meth:`~fairseq_docctx.hub.DocumentHubInterface.generate_documents`)
TRANSLATE_DEFAULTS = {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10}


def check_at_least(options: Dict[str, Optional[float]], minimum: int = 1) -> None:
    """Refuse (``ValueError``: ``"--beam 0: must be at least 1"``) an option below
    ``minimum``; ``options``: option name -> value (``None``: not given, not checked)."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise ValueError(f"{name} {value}: must be at least {minimum}")
