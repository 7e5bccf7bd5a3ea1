"""A Transformer encoder over a table of sentences, run in groups of similar length.

A document-level batch holds a table of unique sentences (each current sentence and each
context sentence once). Encoding the whole table as one padded batch pads every sentence to
the longest one; run in groups of similar length (:func:`~fairseq_docctx.data.length_groups.length_buckets`)
the encoder gives the same states (positions ignore padding) with a fraction of the padding.

:func:`encode_rows` is what a context model that encodes its context sentences with its own
encoder calls (``han_transformer`` encodes its source table with it); :func:`run_bucketed` is
the grouping itself, for any per-row computation (the HAN decoder's teacher-forced pass over
the target table uses it too).
"""
import torch

from ..data import context_batch as cb
from ..data import length_groups


def run_bucketed(lengths, width, run, left_pad, grad_rows=None, **grouping):
    """``run(rows, w)`` on length groups of rows of lengths ``lengths [N]`` (``w``: the
    group's longest) -> each of its outputs ``[n, w, ...]`` re-assembled ``[N, width, ...]``
    in row order, zero-padded back to ``width`` (on the left for left-padded rows); ``None``
    outputs pass through. With ``grad_rows`` (row numbers) the other rows run in groups of
    their own without autograd (states only ever read detached: no backward through them).
    ``grouping``: the cost options of :func:`~fairseq_docctx.data.length_groups.length_buckets`."""
    track = torch.is_grad_enabled()
    if grad_rows is not None and track:
        keep = torch.zeros(len(lengths), dtype=torch.bool, device=lengths.device)
        keep[grad_rows] = True
        groups = []
        for rows, grad in ((keep.nonzero().squeeze(1), True), ((~keep).nonzero().squeeze(1), False)):
            if rows.numel():
                groups += [(rows[g], grad) for g in length_groups.length_buckets(lengths[rows], **grouping)]
    else:
        groups = [(g, track) for g in length_groups.length_buckets(lengths, **grouping)]
    parts = []
    for g, grad in groups:
        with torch.set_grad_enabled(grad):
            parts.append(run(g, int(lengths[g].max())))
    return assemble(parts, [g for g, _ in groups], width, left_pad)


def assemble(parts, groups, width, left_pad):
    """The outputs of length groups back in row order: ``parts[i]`` is the list of outputs
    ``[n_i, w_i, C]`` (or ``None``) of the rows ``groups[i]``; each output is returned
    ``[N, width, C]``, zero-padded back to ``width`` (on the left for left-padded rows)."""
    lengths_device = groups[0].device
    inv = torch.empty(sum(len(g) for g in groups), dtype=torch.long, device=lengths_device)
    inv[torch.cat(groups)] = torch.arange(len(inv), device=lengths_device)
    outs = []
    for k in range(len(parts[0])):
        if parts[0][k] is None:
            outs.append(None)
            continue
        padded = []
        for part in parts:
            extra = width - part[k].size(1)
            before = [0, 0] * (part[k].dim() - 2)  # F.pad counts from the last dimension
            padded.append(torch.nn.functional.pad(part[k], before + ([extra, 0] if left_pad else [0, extra])))
        outs.append(torch.cat(padded).index_select(0, inv))
    return outs


def encode_rows(encoder, tokens, grad_rows=None, return_all_hiddens=False):
    """A fairseq Transformer encoder (``TransformerEncoderBase``) over every row of a table
    of sentences ``tokens [U, L]`` (left- or right-padded), in groups of similar length: the
    same states as one padded pass, with a fraction of the padding. Returns an encoder output
    dict as ``forward_scriptable``'s, with ``encoder_out [L, U, C]`` (zeros at padding),
    ``encoder_padding_mask [U, L]`` and ``encoder_embedding [U, L, C]``; with
    ``return_all_hiddens`` also ``encoder_states``, fairseq's list of the embedding output and
    every layer's output, each ``[L, U, C]``, and ``fc_results``, what each layer returns
    besides its output (fairseq's slot for a layer that returns ``(x, extra)``), each
    ``[L, U, C]`` (empty for layers that return their output only). Rows not in
    ``grad_rows`` (row numbers, default all) run without autograd."""
    pad = encoder.padding_idx
    left = cb.left_padded(tokens, pad)  # fairseq pads sources on the left by default
    n_states = len(encoder.layers) + 1 if return_all_hiddens else 0

    def run(rows, width):
        t = tokens.index_select(0, rows)
        t = t[:, t.size(1) - width:] if left else t[:, :width]
        o = encoder.forward_scriptable(t, t.ne(pad).sum(1), return_all_hiddens, None)
        states = [s.transpose(0, 1) for s in o["encoder_states"]] if return_all_hiddens else []
        extra = [f.transpose(0, 1) for f in o["fc_results"] if f is not None] if return_all_hiddens else []
        return [o["encoder_out"][0].transpose(0, 1), o["encoder_embedding"][0]] + states + extra

    x, emb, *outs = run_bucketed(tokens.ne(pad).sum(1), tokens.size(1), run, left, grad_rows=grad_rows)
    mask = tokens.eq(pad)
    return {"encoder_out": [x.transpose(0, 1)], "encoder_padding_mask": [mask],
            "encoder_embedding": [emb], "encoder_states": [s.transpose(0, 1) for s in outs[:n_states]],
            "fc_results": [f.transpose(0, 1) for f in outs[n_states:]],
            "src_tokens": [], "src_lengths": [tokens.ne(pad).sum(1, dtype=torch.int32).view(-1, 1)]}
