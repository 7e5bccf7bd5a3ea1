from . import label_smoothed_cross_entropy_focused  # noqa: F401
from . import label_smoothed_cross_entropy_pcc  # noqa: F401
