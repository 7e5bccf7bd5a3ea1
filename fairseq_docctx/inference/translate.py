"""``docctx-translate`` over several processes: raw documents sharded, translations merged.

Every process reads the same input and translates the documents of its shard
(:func:`shard_documents`), writing them as they complete to a shard file (JSON Lines: a first
line with the model's languages, then ``{"doc": <number in the input>, "hyp": [...]}`` per
document); :func:`translate_sharded` runs the processes
(:func:`~fairseq_docctx.inference.shards.run_shards`) and returns the translations of all
documents in input order.
"""
import json
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from ..data.doc_index import balanced_shards, check_shard
from .shards import ShardError, run_shards, shard_environment


def shard_documents(lengths: Sequence[int], num_shards: int, shard_id: int) -> List[int]:
    """The numbers (in input order) of the documents of shard ``shard_id`` of ``num_shards``,
    given every document's sentence count (balanced by sentences, as ``fairseq-generate
    --num-shards`` shards a binarized split)."""
    return balanced_shards(lengths, num_shards)[check_shard(num_shards, shard_id)].tolist()


class ShardWriter:
    """A shard's translations, written to ``path`` as documents complete."""

    def __init__(self, path: str, source_lang: Optional[str], target_lang: Optional[str]):
        self.f = open(path, "w", encoding="utf-8")
        self._line({"source_lang": source_lang, "target_lang": target_lang})

    def _line(self, obj):
        self.f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.f.flush()

    def write(self, doc: int, translation: Sequence[str]):
        self._line({"doc": int(doc), "hyp": list(translation)})

    def close(self):
        self.f.close()


def read_shard(path: str) -> Tuple[dict, Dict[int, List[str]]]:
    """A shard file: (its languages, translations by document number)."""
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines:
        raise ShardError(f"{path}: empty shard output")
    return lines[0], {int(o["doc"]): o["hyp"] for o in lines[1:]}


def translate_sharded(command: Sequence[str], lengths: Sequence[int], processes: int,
                      devices: Optional[Sequence[str]] = None, work_dir: Optional[str] = None
                      ) -> Tuple[dict, List[List[str]]]:
    """Run ``command + [--num-shards N --shard-id I --shard-output FILE]`` for each shard I
    (N = ``processes``, at most one per document), on ``devices`` in turn or on the CPU; return
    (the languages the shards report, the translations of the documents in input order,
    checked: every document once, one translation per sentence)."""
    n = max(1, min(processes, len(lengths)))
    tmp = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="docctx-translate-") if tmp else work_dir
    os.makedirs(work_dir, exist_ok=True)
    try:
        files = [os.path.join(work_dir, f"shard-{i}.jsonl") for i in range(n)]
        commands = [list(command) + ["--num-shards", str(n), "--shard-id", str(i), "--shard-output", files[i]]
                    for i in range(n)]
        run_shards(commands, [shard_environment(i, n, devices) for i in range(n)], work_dir,
                   name="docctx-translate shard")
        langs, found = {}, {}
        for i, path in enumerate(files):
            header, docs = read_shard(path)
            langs = langs or header
            for d, hyp in docs.items():
                if d in found:
                    raise ShardError(f"document {d} was translated by two shards")
                found[d] = hyp
    finally:
        if tmp:
            shutil.rmtree(work_dir, ignore_errors=True)
    out = []
    for d, n_sents in enumerate(lengths):
        if d not in found or len(found[d]) != n_sents:
            raise ShardError(f"document {d}: {len(found.get(d, []))} translations from the shards, "
                             f"{n_sents} sentences in the input")
        out.append(found[d])
    return langs, out


def check_lengths(hub, docs, max_tokens: Optional[int] = None) -> list:
    """The documents' sentences encoded (``hub.encode``), refusing, before any decoding, a
    sentence longer than the model takes (its encoder's positions, end-of-sentence token
    included) or than ``max_tokens`` (``--max-tokens``):
    :class:`~fairseq_docctx.data.readers.DocumentFormatError` naming its file and line.
    ``docs``: the documents read (:class:`~fairseq_docctx.data.readers.Document`), ``hub``: a
    :class:`~fairseq_docctx.hub.DocumentHubInterface` (its SentencePiece model and
    dictionary count the tokens). The tokens go to ``hub.translate_documents(tokens=...)``,
    so each sentence is encoded once; they are returned packed, one
    :class:`~fairseq_docctx.data.packed_tokens.PackedTokens` a document, so that a long
    input costs a few bytes a token."""
    from ..data.packed_tokens import PackedTokens
    from ..data.readers import DocumentFormatError

    limit = hub.max_positions
    if isinstance(limit, (tuple, list)):
        limit = limit[0]
    encoded = []
    for d in docs:
        encoded.append(PackedTokens())
        for s, line in zip(d.sentences, d.lines):
            t = hub.encode(s)
            encoded[-1].append(t)
            n = int(t.numel())  # with the end-of-sentence token
            if limit is not None and n > limit:
                raise DocumentFormatError(
                    d.path, line, f"a sentence of {n - 1:,} tokens; the model takes at most {limit - 1:,}: "
                    "split the line into sentences")
            if max_tokens is not None and n > max_tokens:
                raise DocumentFormatError(
                    d.path, line, f"a sentence of {n - 1:,} tokens ({n:,} with the end-of-sentence token), "
                    f"more than --max-tokens {max_tokens}: raise --max-tokens or split the line")
    return encoded
