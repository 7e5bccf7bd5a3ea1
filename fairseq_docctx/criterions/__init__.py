from . import label_smoothed_cross_entropy_pcc  # noqa: F401
