"""fairseq_docctx: document-level NMT for fairseq (use with ``--user-dir fairseq_docctx``)."""
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

# Importing the sub-packages registers tasks, models and criteria with fairseq.
from . import criterions, data, models, modules, tasks  # noqa: E402,F401

__version__ = "0.1.0"
