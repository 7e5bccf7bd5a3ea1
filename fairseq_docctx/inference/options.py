"""Checks of the numeric options the inference commands share (``--beam``, ``--batch-size``,
``--max-tokens``...): one line naming the option, before any work."""
from typing import Dict, Optional


def check_at_least(options: Dict[str, Optional[float]], minimum: int = 1) -> None:
    """Refuse (``ValueError``: ``"--beam 0: must be at least 1"``) an option below
    ``minimum``; ``options``: option name -> value (``None``: not given, not checked)."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise ValueError(f"{name} {value}: must be at least {minimum}")
