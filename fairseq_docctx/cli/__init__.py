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


def exit_on_errors(prog, main, argv, errors):
    """``main(argv)``; a failing shard process (``ShardError``) prints ``prog: error: ...``
    and exits with code 1, one of ``errors`` (bad input or arguments) with code 2."""
    import sys

    from ..inference.shards import ShardError

    try:
        return main(argv)
    except ShardError as e:
        code, message = 1, str(e)
    except tuple(errors) as e:
        code, message = 2, str(getattr(e, "cli_message", e))
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(code)
