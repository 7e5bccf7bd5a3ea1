"""Defaults of named architectures (the ``@register_model_architecture`` functions)."""


def set_defaults(args, **defaults):
    """fairseq's ``args.x = getattr(args, "x", default)`` for every ``x=default``, where an
    attribute that holds ``None`` (an option left unset in a namespace built in code, or
    argparse's default for an option without one) also takes the default. Keyword order is
    the order of assignment."""
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
