from . import concat_transformer  # noqa: F401
