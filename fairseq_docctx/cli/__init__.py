def quiet_logging():
    """Warnings only on stderr (fairseq's and the plugin's INFO lines are noise for a command
    that prints its own progress), and no DataLoader pin_memory warning."""
    import logging
    import sys
    import warnings

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("fairseq", "fairseq_docctx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
