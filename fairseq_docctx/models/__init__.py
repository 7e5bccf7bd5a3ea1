from . import concat_transformer, han_transformer, qcn_transformer  # noqa: F401
