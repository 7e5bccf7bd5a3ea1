"""Data: readers of raw documents, ``docctx-prepare``, the document index, the context batch
layout and the datasets. Importing the package imports nothing else; the modules that
declare something to the rest (``drafts``: the draft context side; ``background``: the exit
handler that stops fairseq's batch-making threads) are imported by
:func:`fairseq_docctx.register`."""
