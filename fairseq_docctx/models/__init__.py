from . import concat_transformer, han_transformer, mht_transformer, qcn_transformer, rnnsearch, hrnn_context, isg_rnnsearch, g_transformer  # noqa: F401
