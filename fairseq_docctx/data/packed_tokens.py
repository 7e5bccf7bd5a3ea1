"""Sentences of token ids packed in one buffer.

A document of N sentences held as N ``LongTensor`` objects costs about a kilobyte a sentence
in object overhead alone, whatever the sentences' lengths; document-order inference over a
long input (``docctx-translate``) holds every sentence of its open documents. Packed, a
sentence costs its token ids (4 bytes each) and one offset; the tensor of a sentence is made
when a dataset asks for it.
"""
from array import array
from typing import Iterable, Sequence

import numpy as np
import torch


class PackedTokens(Sequence):
    """Token-id sequences in one ``int32`` buffer with offsets; item ``i`` is sentence ``i``
    as a new ``LongTensor``. A sequence, so that fairseq's
    :class:`~fairseq.data.LanguagePairDataset` reads it as it reads a list of tensors."""

    def __init__(self, sequences: Iterable = ()):
        self._ids = array("i")
        self._offsets = array("q", [0])
        for s in sequences:
            self.append(s)

    def append(self, tokens) -> None:
        """Add one sentence (a tensor or any sequence of ints)."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        self._ids.extend(tokens)
        self._offsets.append(len(self._ids))

    def extend(self, sequences: Iterable) -> None:
        """Add the sentences of ``sequences`` (another :class:`PackedTokens` is copied as a
        buffer)."""
        if isinstance(sequences, PackedTokens):
            base = len(self._ids)
            self._ids.extend(sequences._ids)
            self._offsets.extend(base + o for o in sequences._offsets[1:])
            return
        for s in sequences:
            self.append(s)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sentence {i} of {n}")
        return torch.tensor(self._ids[self._offsets[i]:self._offsets[i + 1]], dtype=torch.long)

    @property
    def sizes(self) -> np.ndarray:
        """The number of tokens of every sentence."""
        return np.diff(np.frombuffer(self._offsets, dtype=np.int64))

    @classmethod
    def join(cls, documents: Sequence[Sequence]) -> "PackedTokens":
        """The sentences of all ``documents`` (lists of tensors or :class:`PackedTokens`), in
        order, in one buffer."""
        out = cls()
        for d in documents:
            out.extend(d)
        return out
