"""The copying of the segment models' key/value caches in beam search: fairseq's cache
against the preallocated buffers and shared encoder keys (``fairseq_docctx/modules/kv_cache.py``).

A random (untrained) ``doc2doc_transformer`` and ``g_transformer`` of ``bench_segments``'
small size (3+3 x 256/1024, 4 heads; a dictionary of ``--vocab`` words and ``<sep>``) decode
the same segments with fairseq's SequenceGenerator (beam ``--beam``, sentence count and length
windows on: each output sentence at most int(1.2 |s_i| + 10) tokens; the random model runs
most sentences to that maximum, so the target segments are about 25 tokens a sentence),
once with each cache (``set_preallocated_kv_cache``). Measured, per model and cache, work
rather than time (the CPU may be shared):

* the tensor copies of the whole search, read at PyTorch's dispatcher (a ``TorchDispatchMode``:
  every ``aten`` call made from Python, not those a kernel makes inside): calls and MB written
  of ``cat``, ``index_select``, ``copy_`` (slice assignment), ``index_copy_`` and ``clone``;
* the share of the search's time that cProfile puts in ``cat`` + ``index_select`` (and in the
  buffers' own writes, ``__setitem__`` + ``index_copy_`` + ``copy_``), one thread;
* the hypotheses: identical tokens, scores within 1e-5 (as tests/test_kv_cache.py checks);
* the wall time of one search without the profilers (noisy on a shared CPU).

Usage (from the repository root): OMP_NUM_THREADS=1 python -m benchmarks.bench_kv_cache
       [--beam 4] [--sentences 12,15,18,21] [--words 12] [--vocab 4000] [--models doc2doc_transformer,g_transformer]
"""
import argparse
import collections
import contextlib
import cProfile
import pstats
import re
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: the copying operations counted (aten overload packet names)
COPY_OPS = ("cat", "index_select", "copy_", "index_copy_", "index_copy", "clone", "index_put_")
#: the columns printed (the others stay at 0 in these searches)
SHOWN = ("cat", "index_select", "copy_", "index_copy_", "clone")
#: the model size: bench_segments' small (3+3 x 256/1024, 4 heads)
SIZE = dict(encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_attention_heads=4, encoder_layers=3,
            decoder_embed_dim=256, decoder_ffn_embed_dim=1024, decoder_attention_heads=4, decoder_layers=3,
            share_all_embeddings=True, dropout=0.0)


class CopyCounter(TorchDispatchMode):
    """Calls and bytes written of the copying operations (:data:`COPY_OPS`) under the mode,
    those made inside a decoder attention (self or encoder-decoder: its incremental forward and
    its ``reorder_incremental_state``, the key/value cache) apart from all the others (the
    search's own, the encoder output's reordering, ...); bytes: the output (``index_copy_``:
    the rows copied; ``copy_``: the destination)."""

    def __init__(self):
        super().__init__()
        self.calls, self.bytes = collections.Counter(), collections.Counter()
        self.in_cache = 0  # depth of decoder attention calls (set by attributed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in COPY_OPS:
            if name.startswith("index_copy"):
                written = args[3]
            elif name == "index_put_":
                written = args[2]
            elif "out" in (kwargs or {}):
                written = kwargs["out"]
            else:
                written = out
            key = (name, "cache" if self.in_cache else "other")
            self.calls[key] += 1
            self.bytes[key] += written.numel() * written.element_size()
        return out


@contextlib.contextmanager
def attributed(counter: CopyCounter):
    """Within the block, the copies made inside a decoder attention's incremental forward or
    reordering (self-attention and encoder-decoder attention) count as the cache's
    (``counter.in_cache``)."""
    from fairseq_docctx.modules.kv_cache import PreallocatedKVAttention

    forward, reorder = PreallocatedKVAttention.forward, PreallocatedKVAttention.reorder_incremental_state

    def mark(method):
        def marked(self, *a, **kw):
            cache = method is reorder or kw.get("incremental_state") is not None
            counter.in_cache += cache
            try:
                return method(self, *a, **kw)
            finally:
                counter.in_cache -= cache
        return marked

    PreallocatedKVAttention.forward = mark(forward)
    PreallocatedKVAttention.reorder_incremental_state = mark(reorder)
    try:
        with counter:
            yield counter
    finally:
        PreallocatedKVAttention.forward, PreallocatedKVAttention.reorder_incremental_state = forward, reorder


class Task:
    def __init__(self, d):
        self.source_dictionary = self.target_dictionary = d
        self.cfg = argparse.Namespace(context_separator="<sep>")


def dictionary(vocab):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocab):
        d.add_symbol(f"w{i}")
    d.add_symbol("<sep>")
    return d


def build_model(name, d, seed=0, size=None):
    """A random ``name`` (``doc2doc_transformer`` or ``g_transformer``) of ``size`` (fairseq's
    arguments; :data:`SIZE` by default)."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    from fairseq_docctx.models.g_transformer import Doc2DocTransformerModel, GTransformerModel

    cls = {"doc2doc_transformer": Doc2DocTransformerModel, "g_transformer": GTransformerModel}[name]
    args = argparse.Namespace(arch=name, **(size or SIZE))
    ARCH_CONFIG_REGISTRY[name](args)
    torch.manual_seed(seed)
    return cls.build_model(args, Task(d)).eval()


def segments(d, sentences, words, seed=0):
    """Source segments of ``sentences[i]`` sentences of ``words`` random words each."""
    from fairseq.data import data_utils

    g = torch.Generator().manual_seed(seed)
    sep, rows = d.index("<sep>"), []
    for n in sentences:
        row = []
        for i in range(n):
            row += (torch.randint(d.nspecial, d.nspecial + len(d) - d.nspecial - 1, (words,), generator=g)).tolist()
            row.append(sep if i < n - 1 else d.eos())
        rows.append(torch.LongTensor(row))
    src = data_utils.collate_tokens(rows, d.pad(), d.eos(), left_pad=True)
    return {"id": torch.arange(len(rows)),
            "net_input": {"src_tokens": src, "src_lengths": torch.LongTensor([len(r) for r in rows])}}


def search(model, d, sample, beam):
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], d, beam_size=beam, max_len_a=0, max_len_b=1000)
    with torch.no_grad():
        return gen.generate([model], sample)


def _builtin(fn: str, names) -> bool:
    """Whether cProfile's name ``fn`` is one of torch's built-in functions or methods ``names``
    (``<built-in method cat of type object at 0x...>``, ``<method 'index_select' of ...>``)."""
    return fn.startswith("<") and any(re.search(rf"[ ']{re.escape(n)}[ ']", fn) for n in names)


def profile_shares(model, d, sample, beam):
    """(seconds of the search under cProfile, share in cat + index_select, share in the
    buffers' writes: ``__setitem__`` + ``index_copy_`` + ``copy_``)."""
    prof = cProfile.Profile()
    prof.enable()
    search(model, d, sample, beam)
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # tottime of every function
    moved = sum(v[2] for (_, _, fn), v in stats.stats.items() if _builtin(fn, ("cat", "index_select")))
    writes = ("__setitem__", "index_copy_", "copy_")
    written = sum(v[2] for (_, _, fn), v in stats.stats.items() if _builtin(fn, writes))
    return total, moved / total, written / total


def measure(name, d, sample, beam):
    model = build_model(name, d)
    rows = {}
    hyps = {}
    for cache in ("fairseq", "preallocated"):
        model.set_preallocated_kv_cache(cache == "preallocated")
        with attributed(CopyCounter()) as counter:
            hyps[cache] = search(model, d, sample, beam)
        total, moved, written = profile_shares(model, d, sample, beam)
        t = time.perf_counter()
        search(model, d, sample, beam)
        rows[cache] = (counter, total, moved, written, time.perf_counter() - t)
    same = all(torch.equal(a["tokens"], b["tokens"]) and abs(float(a["score"]) - float(b["score"])) <= 1e-5
               for x, y in zip(hyps["fairseq"], hyps["preallocated"]) for a, b in zip(x, y))
    lengths = [h[0]["tokens"].numel() for h in hyps["preallocated"]]
    return rows, same, lengths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--sentences", default="12,15,18,21", help="sentences of each source segment")
    ap.add_argument("--words", type=int, default=12, help="words of every source sentence")
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--models", default="doc2doc_transformer,g_transformer")
    args = ap.parse_args()
    import fairseq_docctx.models  # noqa: F401  (registers the architectures)

    torch.set_num_threads(1)
    d = dictionary(args.vocab)
    sample = segments(d, [int(n) for n in args.sentences.split(",")], args.words)
    src_len = sample["net_input"]["src_lengths"].tolist()
    for name in args.models.split(","):
        rows, same, lengths = measure(name, d, sample, args.beam)
        print(f"\n{name}, 3+3 x 256/1024, random weights, beam {args.beam}, {len(src_len)} segments of "
              f"{src_len} source tokens -> best hypotheses of {lengths} tokens; identical hypotheses and "
              f"scores with both caches: {same}")
        print(f"{'cache':13s} {'where':5s} " + " ".join(f"{op + ' calls':>18s} {'MB':>8s}" for op in SHOWN)
              + f" {'total MB':>9s}")
        for cache, (c, *_rest) in rows.items():
            for where in ("cache", "other"):
                ops = " ".join(f"{c.calls[op, where]:18d} {c.bytes[op, where] / 1e6:8.1f}" for op in SHOWN)
                mb = sum(v for (_, w), v in c.bytes.items() if w == where) / 1e6
                print(f"{cache:13s} {where:5s} {ops} {mb:9.1f}")
        print(f"{'cache':13s} {'cProfile s':>10s} {'in cat+index_select':>20s} {'in buffer writes':>17s} "
              f"{'wall s (no profiler)':>21s}")
        for cache, (_, total, moved, written, wall) in rows.items():
            print(f"{cache:13s} {total:10.1f} {moved:20.1%} {written:17.1%} {wall:21.1f}")


if __name__ == "__main__":
    main()
