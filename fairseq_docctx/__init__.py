"""fairseq_docctx: document-level NMT for fairseq (use with ``--user-dir fairseq_docctx``).

Importing the package registers the plugin with fairseq (:func:`register`: its tasks, models
and criteria, safe checkpoint loading, one-line refusals inside fairseq's commands), as
``--user-dir`` needs. Inside the package's own ``docctx-*`` commands the registration waits
until a command loads a model or runs fairseq (the library calls :func:`register` there), so
that parsing the command line, ``--help`` and a refused option do not import torch and
fairseq (seconds).
"""
import os
import sys

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Register the plugin with fairseq (idempotent): safe checkpoint loading of the
    plugin's and fairseq's objects, the one-line refusals inside fairseq's commands, the
    bfloat16 fix, and the tasks, models, criteria and data sides of the sub-packages."""
    global _registered
    if _registered:
        return
    _registered = True
    from .bf16 import install_bf16_fix
    from .errors import report_usage_errors
    from .safe_loading import register_safe_globals, report_unreadable_checkpoints

    register_safe_globals()
    # inside fairseq-train, fairseq-generate...: the plugin's refusals are one line, not a traceback
    report_usage_errors()
    # ...and a checkpoint file fairseq cannot read (truncated) is one line naming it
    report_unreadable_checkpoints()
    # fairseq-train --bf16 trains in bfloat16 on the GPU (or --cpu) where torch_xla is missing
    install_bf16_fix()
    # importing the sub-packages registers tasks, models and criteria with fairseq; data.drafts
    # declares the draft context side, data.background stops fairseq's batch threads at exit
    from . import criterions, models, modules, tasks  # noqa: F401
    from .data import background, drafts  # noqa: F401


def _deferred() -> bool:
    """Whether this process is one of the package's ``docctx-*`` console scripts that has not
    imported fairseq yet: then :func:`register` waits until the command needs it."""
    return os.path.basename(sys.argv[0] if sys.argv else "").startswith("docctx-") and "fairseq" not in sys.modules


if not _deferred():
    register()
