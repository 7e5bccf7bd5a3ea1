"""The layout of a batch's document context, ``net_input["context"]`` — the one module that
knows it. The dataset builds it, the task selects and replaces parts of it, models and
evaluation read it, all through the functions below; nobody else spells its keys.

The context is a plain dict of tensors (fairseq's ``move_to_cuda``, fp16 conversion and
``apply_to_sample`` walk it like any batch). It describes the ``K`` previous sentences of
each of the ``B`` rows of a batch, on one or more named **sides**:

* ``src`` — the previous source sentences; ``tgt`` — the previous target sentences
  (references in training; in document-order inference the model's own translations);
* more sides are declared with :func:`register_side` (e.g. a model module declaring a
  ``draft`` side: sentence-level translations of the context), without editing the task or
  the dataset.

Per side (``side`` is its name):

``<side>_tokens`` ``[U, L]`` *(table, shared)*
    the batch's *unique* sentences of that side (the current sentences and their context,
    each stored once), padded like the side's sentences (source: ``--left-pad-source``;
    target: right-padded, ending in EOS).
``<side>_lengths`` ``[U]`` *(table, shared)*
    their lengths.
``<side>_index`` ``[B, K]`` *(per row)*
    the table row of the ``(k+1)``-th previous sentence of batch row ``b`` (column 0 = the
    previous sentence), ``-1`` where the document has no such sentence.
``<side>_self`` ``[B]`` *(per row, optional)*
    the table row of batch row ``b``'s own sentence. For the target side it is the current
    reference, there so a model can teacher-force each sentence once per batch: it must never
    be read to predict that sentence. Absent when a table holds context only (the model's
    own translations in document-order inference).

Shared by the sides:

``ids`` ``[B, K]`` *(per row)*
    corpus indices of the context sentences (``-1`` if none).
``cache`` *(shared, document-order inference only)*
    a list aligned with the rows of the ``tgt`` table: what the model kept for each of those
    sentences (:class:`~fairseq_docctx.models.document_context.DocumentContextModel`).

Context never crosses a document boundary: a document's first sentence has an all ``-1``
index row.

**Context variants** (``sample["context_variants"]``, beside ``net_input``; validation with
``--validate-cxmi`` only): other contexts of the same rows, by name (``none``, ``random``:
:mod:`~fairseq_docctx.data.context_variants`), each a context in the layout above, for scoring
the batch's references with them (:func:`variant_sample`).
"""
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

#: the key of ``net_input`` holding the context (the ``context`` keyword of models' forward)
NET_INPUT_KEY = "context"
#: fields of a side's table (shared by all rows) and fields with one entry per batch row
TABLE_FIELDS = ("tokens", "lengths")
ROW_FIELDS = ("index", "self")
IDS = "ids"
CACHE = "cache"
#: the key of a sample holding its context variants (see the module doc)
VARIANTS_KEY = "context_variants"


@dataclass(frozen=True)
class ContextSide:
    """One kind of context sentence.

    Attributes:
        name: the side's key prefix (``src``, ``tgt``, ...): a Python identifier without ``_``.
        dictionary: ``"source"`` or ``"target"``: the dictionary its tokens come from.
        item_key: the key of a :class:`~fairseq.data.LanguagePairDataset` item that holds the
            side's sentence (``"source"``, ``"target"``); ``None`` for a side whose sentences
            come from elsewhere (``load``).
        left_pad: the table's padding: ``None`` = like the current source sentences
            (``--left-pad-source``), ``False`` = right-padded.
        from_hypotheses: in document-order inference (``--target-context hypothesis``) the
            side is the model's own translations, filled in by the task batch by batch.
        aliases: other spellings accepted by ``--context-sides``.
        load: for sides without ``item_key``: ``load(task, split, data_path, pair)`` returns
            the side's sentences of a binarized split (an indexable of token tensors, one per
            sentence, with a ``sizes`` array), or ``None`` if the split has none. Those of raw
            input come from the side's raw-input hook (:func:`register_raw_input`).
    """

    name: str
    dictionary: str = "source"
    item_key: Optional[str] = None
    left_pad: Optional[bool] = None
    from_hypotheses: bool = False
    aliases: Tuple[str, ...] = ()
    load: Optional[Callable] = None


_SIDES: Dict[str, ContextSide] = {}
_SPELLINGS: Dict[str, Tuple[str, ...]] = {"none": (), "both": ("src", "tgt")}


def register_side(side: ContextSide) -> ContextSide:
    """Declare a context side (at import time, e.g. in a model module). Re-registering the
    same declaration is harmless; a different one under a taken name is an error."""
    if not side.name.isidentifier() or "_" in side.name:
        raise ValueError(f"context side name {side.name!r}: an identifier without '_'")
    if side.dictionary not in ("source", "target"):
        raise ValueError(f"context side {side.name}: dictionary must be 'source' or 'target'")
    old = _SIDES.get(side.name)
    if old is not None and old != side:
        raise ValueError(f"context side {side.name!r} is already declared differently")
    for spelling in (side.name,) + side.aliases:
        taken = _SPELLINGS.get(spelling)
        if taken is not None and taken != (side.name,):
            raise ValueError(f"--context-sides spelling {spelling!r} is taken")
        _SPELLINGS[spelling] = (side.name,)
    _SIDES[side.name] = side
    return side


register_side(ContextSide("src", "source", item_key="source", left_pad=None, aliases=("source",)))
register_side(ContextSide("tgt", "target", item_key="target", left_pad=False, from_hypotheses=True,
                          aliases=("target",)))


@dataclass(frozen=True)
class RawInputRequest:
    """What a raw-input hook (:func:`register_raw_input`) is given when a checkpoint is
    loaded to translate or score raw input: the checkpoint file ``path`` and its ``state``,
    its loaded ``models``, their data directory ``data``, the loading ``options`` (keyword
    options of the hub's ``from_pretrained``, e.g. the checkpoint a side's sentences come
    from) and the device settings."""

    path: str
    state: dict
    models: Sequence
    data: Optional[str]
    options: Mapping
    cpu: bool = True
    fp16: bool = False


_RAW_INPUTS: Dict[str, Callable] = {}


def register_raw_input(name: str, hook: Callable) -> None:
    """Declare how raw input (text binarized on the fly, which has no stream of side
    ``name`` beside it) gets side ``name``'s sentences: ``hook(request)``, called once when a
    model that reads the side is loaded (:class:`RawInputRequest`), returns the maker
    ``make(sentences, batch_size=None, max_tokens=None)`` of the side's sentences of binarized
    source sentences (an indexable of token tensors with a ``sizes`` array, one per
    sentence), or ``None`` when it has none to give (the side is then absent from the
    batches). The side's other hook, ``load``, reads a binarized split's
    (:class:`ContextSide`)."""
    get_side(name)
    _RAW_INPUTS[name] = hook


def raw_input_makers(sides: Sequence[str], request: RawInputRequest) -> Dict[str, Callable]:
    """The makers of the sentences of those of ``sides`` that raw input lacks (sides without
    ``item_key`` that have a raw-input hook, :func:`register_raw_input`), by side."""
    makers = {}
    for name in sides:
        hook = _RAW_INPUTS.get(name) if get_side(name).item_key is None else None
        make = hook(request) if hook is not None else None
        if make is not None:
            makers[name] = make
    return makers


def get_side(name: str) -> ContextSide:
    if name not in _SIDES:
        raise ValueError(f"unknown context side {name!r} (declared: {', '.join(_SIDES)})")
    return _SIDES[name]


def declared_sides() -> Tuple[str, ...]:
    return tuple(_SIDES)


def parse_sides(spec: Union[None, str, Sequence[str]]) -> Tuple[str, ...]:
    """``--context-sides`` -> side names, in declaration order: a comma-separated set of
    side names or aliases (``src,tgt``, ``source``, ``target,draft``), or ``both`` (src and
    tgt) or ``none``."""
    if spec is None:
        return ()
    parts = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [str(p) for p in spec]
    names = set()
    for p in parts:
        if p == "":
            continue
        if p not in _SPELLINGS:
            raise ValueError(f"--context-sides: unknown side {p!r} (use a comma-separated set of "
                             f"{', '.join(sorted(s for s in _SPELLINGS if s not in ('none', 'both')))}, "
                             "or both / none)")
        names.update(_SPELLINGS[p])
    return tuple(s for s in _SIDES if s in names)


def format_sides(sides: Sequence[str]) -> str:
    """Side names -> the ``--context-sides`` spelling (``none`` when empty)."""
    return ",".join(sides) if sides else "none"


def _key(side: str, field: str) -> str:
    return f"{side}_{field}"


def _is_row_key(key: str) -> bool:
    if key == IDS:
        return True
    side, _, field = key.rpartition("_")
    return side in _SIDES and field in ROW_FIELDS


# ------------------------------------------------------------------ samples
def get_context(sample_or_net_input) -> Optional[dict]:
    """The context of a batch (a sample or its ``net_input``), ``None`` if it has none."""
    if sample_or_net_input is None:
        return None
    ni = sample_or_net_input.get("net_input", sample_or_net_input)
    return ni.get(NET_INPUT_KEY) if isinstance(ni, dict) else None


def with_context(sample: dict, context: Optional[dict]) -> dict:
    """A shallow copy of ``sample`` whose ``net_input`` holds ``context`` (none if ``None``)."""
    ni = {k: v for k, v in sample["net_input"].items() if k != NET_INPUT_KEY}
    if context is not None:
        ni[NET_INPUT_KEY] = context
    return {**sample, "net_input": ni}


def without_context(sample: dict) -> dict:
    """The batch for a sentence-level model: ``sample`` without its context."""
    if get_context(sample) is None:
        return sample
    return with_context(sample, None)


def with_variants(sample: dict, variants: Mapping[str, dict]) -> dict:
    """``sample`` (in place; returned) with the context variants ``variants`` (name ->
    context of the same rows)."""
    sample[VARIANTS_KEY] = dict(variants)
    return sample


def variants(sample: dict) -> Optional[dict]:
    """The context variants of a sample (name -> context), ``None`` if it carries none."""
    return sample.get(VARIANTS_KEY) if isinstance(sample, dict) else None


def variant_sample(sample: dict, name: str) -> dict:
    """A shallow copy of ``sample`` whose context is its variant ``name`` (and that carries
    no variants): the same rows, sentences and targets with that context."""
    ctx = variants(sample)[name]
    return with_context({k: v for k, v in sample.items() if k != VARIANTS_KEY}, ctx)


# ------------------------------------------------------------------ building
def new_context(ids: Tensor) -> dict:
    """An empty context for rows whose context sentences are ``ids [B, K]`` (corpus indices,
    -1 = none); tables are added with :func:`add_table`."""
    return {IDS: ids}


def add_table(context: dict, side: str, tokens: Tensor, lengths: Tensor, index: Tensor,
              self_rows: Optional[Tensor] = None) -> dict:
    """Put (or replace) the table of ``side`` into ``context`` (in place; returned)."""
    get_side(side)
    for field in TABLE_FIELDS + ROW_FIELDS:
        context.pop(_key(side, field), None)
    context[_key(side, "tokens")] = tokens
    context[_key(side, "lengths")] = lengths
    context[_key(side, "index")] = index
    if self_rows is not None:
        context[_key(side, "self")] = self_rows
    return context


# ------------------------------------------------------------------ reading
class SideTable(NamedTuple):
    """One side of a batch's context: ``tokens [U, L]``, ``lengths [U]`` (``None`` in a
    context written by hand without them), ``index [B, K]`` and ``self_rows [B]`` (``None``
    if the table holds context only)."""

    tokens: Tensor
    lengths: Optional[Tensor]
    index: Tensor
    self_rows: Optional[Tensor]


def has_side(context: Optional[dict], side: str) -> bool:
    return context is not None and _key(side, "index") in context


def sides(context: Optional[dict]) -> Tuple[str, ...]:
    """The sides a context holds, in declaration order."""
    return tuple(s for s in _SIDES if has_side(context, s))


def table(context: dict, side: str, k: Optional[int] = None) -> SideTable:
    """The table of ``side``; with ``k`` its index cut to the ``k`` nearest sentences."""
    if not has_side(context, side):
        raise KeyError(f"the batch's context has no {side!r} side (it has: "
                       f"{format_sides(sides(context))})")
    index = context[_key(side, "index")]
    if k is not None:
        index = index[:, :k]
    return SideTable(context[_key(side, "tokens")], context.get(_key(side, "lengths")), index,
                     context.get(_key(side, "self")))


def index(context: dict, side: str, k: Optional[int] = None) -> Tensor:
    """``[B, K]`` (or ``[B, min(k, K)]``) table rows of the previous sentences of ``side``."""
    return table(context, side, k).index


def context_ids(context: dict) -> Tensor:
    """``[B, K]`` corpus indices of the context sentences (-1 = none)."""
    return context[IDS]


def cache(context: Optional[dict]) -> Optional[list]:
    """The model's cached entries for the ``tgt`` table's rows (document-order inference),
    ``None`` if the batch carries none."""
    return None if context is None else context.get(CACHE)


def row_map(context: dict, from_side: str, to_side: str) -> Tensor:
    """``[U_from]``: the row of ``to_side``'s table holding the same corpus sentence as each
    row of ``from_side``'s table (0 where the batch does not say; both tables index the same
    sentences through the per-row maps)."""
    a, b = table(context, from_side), table(context, to_side)
    m = a.index.new_full((a.tokens.size(0),), -1)
    valid = a.index >= 0
    m[a.index[valid]] = b.index[valid]
    if a.self_rows is not None and b.self_rows is not None:
        m[a.self_rows] = b.self_rows
    return m.clamp(min=0)


# ------------------------------------------------------------------ transforming
def select_rows(context: dict, rows: Tensor) -> dict:
    """The context of batch rows ``rows``: per-row maps selected, tables shared."""
    return {k: (v.index_select(0, rows) if _is_row_key(k) else v) for k, v in context.items()}


def replace_side(context: dict, side: str, sentences: Mapping[int, Tensor], pad: int,
                 cache_entries: Optional[Mapping] = None) -> dict:
    """A copy of ``context`` whose ``side`` table holds ``sentences[i]`` for every context
    sentence ``i`` of the batch (corpus index; e.g. the model's own translations), right
    padded, context only (no self map); with ``cache_entries`` also the ``cache`` list
    aligned with the new table (``cache_entries.get(i)``). Raises ``KeyError`` naming the
    first context sentence missing from ``sentences``."""
    from fairseq.data import data_utils

    ids = context[IDS]
    needed = torch.unique(ids[ids >= 0])
    order = needed.tolist()
    for i in order:
        if i not in sentences:
            raise KeyError(i)
    new = {k: v for k, v in context.items() if not (k.startswith(side + "_") or k == CACHE)}
    if order:
        rows = [sentences[i] for i in order]
        tokens = data_utils.collate_tokens(rows, pad, left_pad=bool(get_side(side).left_pad)).to(ids.device)
        lengths = torch.tensor([len(r) for r in rows], device=ids.device)
    else:  # no row of the batch has context (first sentences of documents)
        tokens, lengths = ids.new_full((1, 1), pad), ids.new_zeros(1)
    where = torch.searchsorted(needed, ids.clamp(min=0).contiguous())
    add_table(new, side, tokens, lengths, torch.where(ids >= 0, where, ids.new_tensor(-1)))
    if cache_entries is not None:
        new[CACHE] = [cache_entries.get(i) for i in order]
    return new


# ------------------------------------------------------------------ gathering
def gather_rows(values: Tensor, index: Tensor, fill=None) -> Tensor:
    """Rows of a table for every (row, distance): ``values [U, ...]``, ``index [B, K]`` (or
    ``[B]``; -1 = none) -> ``[B, K, ...]``; where ``index < 0`` the result is ``fill``
    (left as table row 0 when ``fill`` is None: callers that mask those rows need not pay
    for filling them)."""
    out = values.index_select(0, index.clamp(min=0).reshape(-1)).view(*index.shape, *values.shape[1:])
    if fill is not None:
        out = out.masked_fill(index.lt(0).view(*index.shape, *([1] * (values.dim() - 1))), fill)
    return out


def gather_tokens(context: dict, side: str, pad: int, k: Optional[int] = None) -> Tuple[Tensor, Tensor]:
    """The ``K`` previous sentences of ``side`` of every batch row as padded per-row tensors:
    ``tokens [B, K, L]`` (all padding where there is no sentence) and ``present [B, K]``."""
    t = table(context, side, k)
    return gather_rows(t.tokens, t.index, fill=pad), t.index.ge(0)


def left_padded(tokens: Tensor, pad: int) -> bool:
    """Whether a table of sentences (each at least one token, e.g. EOS) is padded on the
    left: its last column holds no padding. The one place that decides it from a tensor."""
    return bool(tokens[:, -1].ne(pad).all()) if tokens.numel() else False


def cut_width(tokens: Tensor, width: int, left_pad: bool) -> Tensor:
    """``tokens [N, L]`` cut to ``width`` columns, keeping the side that holds the words."""
    return tokens[:, tokens.size(1) - width:] if left_pad else tokens[:, :width]


__all__ = [
    "ContextSide", "SideTable", "register_side", "RawInputRequest", "register_raw_input", "raw_input_makers",
    "get_side", "declared_sides", "parse_sides",
    "format_sides", "get_context", "with_context", "without_context", "with_variants", "variants",
    "variant_sample", "new_context",
    "add_table", "has_side", "sides", "table", "index", "context_ids", "cache", "row_map",
    "select_rows", "replace_side", "gather_rows", "gather_tokens", "left_padded", "cut_width",
]
