"""Token positions that know the sentences of a concatenation (Lupo et al. 2022, 2023).

A concatenation model reads rows ``s_0 <sep> s_1 <sep> ... s_n`` (farthest sentence first, the
current sentence last; a separator closes its sentence). Two ways of telling the Transformer
which sentence a token belongs to, both computed from the tokens alone, so that teacher
forcing, incremental decoding and scoring give every token the same encoding:

* **segment-shifted positions** (Lupo, Dinarelli & Besacier 2022, "Focused Concatenation for
  Context-Aware Neural Machine Translation", WMT): the position of a token of sentence ``i``
  (``i = 0`` the first sentence of the row) is its position in the concatenation plus
  ``i × shift``, so that the jump between sentences is larger than any step inside one. The
  authors' released scripts use shift 21 (IWSLT17 En→De) and 8 (OpenSubtitles En→Ru).
* **sentence-position embeddings** (Lupo, Dinarelli & Besacier 2023, "Encoding Sentence
  Position in Context-Aware Neural Machine Translation with Concatenation", Insights
  workshop): an embedding of the sentence's distance from the current one (``1`` the current
  sentence, ``2`` the previous one, ...; ``0``, a zero vector, for padding), sinusoidal or
  learned, added to the token embedding with the positional embedding.

A token's sentence is the number of separators before it in its row, counted up to the row's
first ``</s>``: the current sentence of a decoder row starts with fairseq's start token
``</s>``, so a separator the decoder generates inside the current sentence starts no new
sentence (the incremental and the teacher-forced runs agree on it).
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import LearnedPositionalEmbedding, SinusoidalPositionalEmbedding
from torch import Tensor

from ..errors import UsageError

SENTENCE_EMBEDDINGS = ("none", "sinusoidal", "learned")


def sentence_index(tokens: Tensor, sep: int, eos: int) -> Tuple[Tensor, Tensor]:
    """``(index [B, T], count [B, 1])``: each token's sentence in its row (0 = the first
    sentence; the separators before it, up to the row's first ``eos``), and the number of
    sentences before the last one (the separators before the first ``eos``)."""
    before_eos = tokens.eq(eos).long().cumsum(1).eq(0)
    boundary = (tokens.eq(sep) & before_eos).long()
    return boundary.cumsum(1) - boundary, boundary.sum(1, keepdim=True)


class SentenceEmbedding(nn.Module):
    """An embedding of a sentence's distance label (1 = current, 2 = previous, ..., 0 =
    padding, a zero vector): a learned table of ``num_labels`` rows, or fairseq's sinusoids of
    the label (Vaswani et al. 2017, §3.5), computed for any label."""

    def __init__(self, kind: str, num_labels: int, dim: int):
        super().__init__()
        self.kind, self.dim = kind, dim
        if kind == "learned":
            self.table = nn.Embedding(num_labels, dim, padding_idx=0)
            nn.init.normal_(self.table.weight, mean=0, std=dim ** -0.5)
            nn.init.constant_(self.table.weight[0], 0)
        else:
            self.register_buffer("weights", SinusoidalPositionalEmbedding.get_embedding(
                max(num_labels, 2), dim, padding_idx=0), persistent=False)

    def forward(self, labels: Tensor) -> Tensor:
        if self.kind == "learned":
            if int(labels.max()) >= self.table.num_embeddings:
                raise UsageError(f"--sentence-position-embeddings learned: a row holds {int(labels.max())} "
                                 f"sentences, the model was built for {self.table.num_embeddings - 1}")
            return self.table(labels)
        n = int(labels.max()) + 1
        if n > self.weights.size(0):
            self.weights = SinusoidalPositionalEmbedding.get_embedding(n, self.dim, 0).to(self.weights)
        return self.weights.index_select(0, labels.reshape(-1)).view(*labels.shape, -1).detach()


class DocumentPositions:
    """Mixin over fairseq's positional embeddings: segment-shifted positions and sentence
    embeddings (see the module's docstring). ``forward`` takes fairseq's arguments, so the
    encoder's and decoder's own code calls it; :meth:`embed_at` embeds given positions and
    sentence labels (the cached decoder's later steps)."""

    sep_idx: int
    eos_idx: int
    shift: int
    sentence_embeddings: Optional[SentenceEmbedding]

    def document_positions(self, tokens: Tensor) -> Tuple[Tensor, Tensor]:
        """``(positions, labels)`` ``[B, T]``: fairseq's positions of ``tokens`` (the first
        real token at ``padding_idx + 1``) shifted by ``index × shift``, and the sentences'
        distance labels (1 = the row's last sentence; 0 at padding)."""
        real = tokens.ne(self.padding_idx).long()
        index, count = sentence_index(tokens, self.sep_idx, self.eos_idx)
        positions = utils.make_positions(tokens, self.padding_idx) + self.shift * index * real
        return positions, (count - index + 1) * real

    def forward(self, input, incremental_state=None, positions=None, timestep=None):
        if positions is not None or timestep is not None:
            raise ValueError("document positions are computed from the tokens")
        positions, labels = self.document_positions(input)
        if incremental_state is not None:  # fairseq's one-step call: the newest token's
            positions, labels = positions[:, -1:], labels[:, -1:]
        return self.embed_at(positions, labels)

    def embed_at(self, positions: Tensor, labels: Optional[Tensor] = None) -> Tensor:
        """The embedding ``[B, T, C]`` of absolute positions (fairseq's numbering) and, with
        sentence embeddings, of the sentence labels."""
        x = self.lookup(positions)
        if self.sentence_embeddings is not None:
            if labels is None:
                labels = positions.ne(self.padding_idx).long()  # the current sentence
            x = x + self.sentence_embeddings(labels).to(x)
        return x


class DocumentLearnedPositionalEmbedding(DocumentPositions, LearnedPositionalEmbedding):
    def lookup(self, positions: Tensor) -> Tensor:
        if int(positions.max()) >= self.num_embeddings:
            raise UsageError(f"--segment-shifted-positions: position {int(positions.max()) - self.padding_idx} "
                             f"is past the {self.max_positions} learned positions (more sentences in a row "
                             "than the model was built for)")
        return F.embedding(positions, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)


class DocumentSinusoidalPositionalEmbedding(DocumentPositions, SinusoidalPositionalEmbedding):
    def lookup(self, positions: Tensor) -> Tensor:
        n = int(positions.max()) + 1
        if n > self.weights.size(0):
            self.weights = SinusoidalPositionalEmbedding.get_embedding(
                n, self.embedding_dim, self.padding_idx).to(self.weights)
        return self.weights.index_select(0, positions.reshape(-1)).view(*positions.shape, -1).detach()


def document_positional_embedding(current, max_positions: int, sentences: int, sep: int, eos: int,
                                  shift: int = 0, sentence_embeddings: str = "none"):
    """The document positions replacing fairseq's positional embedding ``current`` (learned or
    sinusoidal, of ``max_positions`` positions) for rows of at most ``sentences`` sentences:
    a learned table gets ``(sentences - 1) × shift`` more positions (new rows; the others are
    ``current``'s), so that the current sentence of the longest row still has its own."""
    if isinstance(current, LearnedPositionalEmbedding):
        pad, dim = current.padding_idx, current.embedding_dim
        m = DocumentLearnedPositionalEmbedding(
            max_positions + (sentences - 1) * shift + pad + 1, dim, pad)
        nn.init.normal_(m.weight, mean=0, std=dim ** -0.5)
        with torch.no_grad():
            m.weight[: current.num_embeddings] = current.weight
            m.weight[pad] = 0
    elif isinstance(current, SinusoidalPositionalEmbedding):
        dim = current.embedding_dim
        m = DocumentSinusoidalPositionalEmbedding(
            dim, current.padding_idx, init_size=max_positions + (sentences - 1) * shift + current.padding_idx + 1)
    else:
        raise UsageError("--segment-shifted-positions/--sentence-position-embeddings need fairseq's learned "
                         "or sinusoidal token positions (not --no-token-positional-embeddings)")
    m.sep_idx, m.eos_idx, m.shift = sep, eos, int(shift)
    m.sentence_embeddings = (SentenceEmbedding(sentence_embeddings, sentences + 1, dim)
                             if sentence_embeddings != "none" else None)
    return m
