"""The settings ``docctx-drafts`` makes drafts with by default (:mod:`.drafts`), in a module of
their own that imports nothing, so that the command's ``--help`` does not import torch."""

DEFAULT_BEAM = 4
DEFAULT_SPLITS = ("train", "valid", "test")
#: sentences per chunk (a chunk ends at the first batch boundary past this many)
DEFAULT_CHUNK_SENTENCES = 5000
#: batch size when neither max_tokens nor batch_size is given
DEFAULT_MAX_TOKENS = 8000
