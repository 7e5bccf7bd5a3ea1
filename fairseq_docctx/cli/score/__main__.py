"""``python -m fairseq_docctx.cli.score``: ``docctx-score``."""
from . import cli_main

cli_main()
