from . import concat_transformer, qcn_transformer  # noqa: F401
