"""Looking inside trained document-level models, one sentence at a time.

* :func:`sentence_sample`: the one-row batch (with its context) of one sentence of a document;
* :func:`qcn_routing` / :func:`write_qcn_routing`: the routing of a ``qcn_transformer`` for
  one sentence — coupling coefficients ``c`` and query correlations ``p = tanh(PCC(u_i, q_j))``
  at every routing iteration (Yang et al. 2019, §3.2, Algorithm 1; their Figures 6 and 7),
  with the context words on one axis and the output capsules on the other, as heatmaps and
  JSON. ``docctx-analyze qcn`` is their command line;
* :func:`hrnn_gates` / :func:`write_hrnn_gates`: the context gate ``z_i`` of an
  ``hrnn_context`` with gated auxiliary context (Wang et al. 2017, §2.2, Eq. 5) at every
  target word of one sentence — how much of the summary ``D`` of the previous sentences
  each word reads — as JSON, TSV and a PNG. ``docctx-analyze hrnn`` is their command line;
* :func:`isg_attention` / :func:`write_isg_attention`: what an ``isg_rnnsearch`` (Kuang &
  Xiong 2018) reads of the previous sentence at every target word of one sentence — the
  attention over its tokens, that attention's entropy (§5.4, Eq. 12; their Figures 3 and 4)
  and the inter-sentence gate (Eq. 9) — as JSON, TSV and a PNG. ``docctx-analyze isg`` is
  their command line.
"""
import copy
import json
import math
import os
from typing import Dict

import torch
from fairseq import utils

from ..data import context_batch as cb
from ..modules.entropy import entropy


def sentence_sample(hub, split: str, doc: str, sentence: int):
    """A one-row batch (with its context) of sentence ``sentence`` (0-based) of document
    ``doc`` (its id, or its number) of ``split``."""
    task = hub.task
    task.load_dataset(split)
    ds = task.dataset(split)
    docs = ds.docs
    d = docs.doc_ids.index(doc) if doc in docs.doc_ids else int(doc)
    if not 0 <= d < len(docs) or not 0 <= sentence < docs.lengths[d]:
        raise ValueError(f"{split} has no sentence {sentence} in document {doc}")
    sent_id = int(docs.offsets[d] + sentence)
    return ds.collater([ds[sent_id]])


def qcn_routing(hub, split, doc, sentence):
    """Routing history of one sentence: (context word labels, current sentence, c, p) with
    ``c``/``p`` as ``[iters, words, capsules]``; word labels ``-k:token`` (``k``: distance of
    the word's sentence)."""
    sample = sentence_sample(hub, split, doc, sentence)
    model = hub.models[0]
    enc = getattr(model, "encoder", None)
    if getattr(enc, "qcn", None) is None:
        raise ValueError("this checkpoint has no query-guided capsule network (qcn_transformer without --no-qcn)")
    ni = sample["net_input"]
    context = cb.get_context(ni)
    cur, cur_mask, ctx, ctx_mask, _, _ = enc.capsule_inputs(ni["src_tokens"], context)
    with torch.no_grad():
        _, c, p = enc.qcn(cur, cur_mask, ctx, ctx_mask, return_history=True)
    words = []
    if cb.has_side(context, "src"):
        src = cb.table(context, "src", ctx.size(1))
        table, index = src.tokens, src.index[0]
        for k, row in enumerate(index.tolist()):
            if row >= 0:
                toks = table[row]
                words += [f"-{k + 1}:{hub.src_dict[t]}" for t, m in zip(toks.tolist(), ctx_mask[0, k].tolist()) if m]
    flat = ctx_mask[0].reshape(-1)
    c, p = c[:, 0][:, flat], p[:, 0][:, flat]
    current = hub.src_dict.string(ni["src_tokens"][0])
    return words, current, c, p


def plot_routing(values, words, title, path):
    """Heatmaps ``[words, capsules]`` of ``values [iters, words, capsules]``, one per
    iteration, side by side, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    iters, n, m = values.shape
    fig, axes = plt.subplots(1, iters, figsize=(1.2 + 1.1 * m * iters, 1.5 + 0.22 * max(n, 4)), squeeze=False)
    for t, ax in enumerate(axes[0]):
        im = ax.imshow(values[t].numpy(), aspect="auto", cmap="viridis")
        ax.set_title(f"iteration {t + 1}")
        ax.set_xticks(range(m))
        ax.set_xticklabels([f"v{j + 1}" for j in range(m)])
        ax.set_yticks(range(n))
        ax.set_yticklabels(words if t == 0 else [""] * n, fontsize=7)
        fig.colorbar(im, ax=ax, fraction=0.05)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


#: the files each analysis writes into its folder
FILES = {"qcn": ("qcn_coupling.png", "qcn_pcc.png", "qcn_routing.json"),
         "hrnn": ("hrnn_gates.json", "hrnn_gates.tsv", "hrnn_gates.png"),
         "isg": ("isg_attention.json", "isg_attention.tsv", "isg_attention.png")}


def _guard(outputs):
    """The output guard the files are written through: ``docctx-analyze``'s, or (the Python
    API) one that replaces them, each written whole."""
    from ..data.outputs import Outputs

    return outputs if outputs is not None else Outputs("docctx-analyze", force=True)


def write_qcn_routing(hub, split: str, doc: str, sentence: int, outdir: str, outputs=None) -> Dict:
    """Write ``qcn_coupling.png`` and ``qcn_pcc.png`` (unless the sentence has no context)
    and ``qcn_routing.json`` (sentence, context_words, coupling, pcc) to ``outdir``, through
    the output guard ``outputs`` (:class:`~fairseq_docctx.data.outputs.Outputs`). Returns
    what :func:`qcn_routing` found (``words``, ``current``, ``c``, ``p``) and the ``files``
    written."""
    outputs = _guard(outputs)
    words, current, c, p = qcn_routing(hub, split, doc, sentence)
    files = []
    if words:
        for name, v, title in (("qcn_coupling.png", c, "coupling coefficients c"),
                               ("qcn_pcc.png", p, "query correlations p = tanh(PCC(u, q))")):
            with outputs.open(os.path.join(outdir, name), "wb") as f:
                plot_routing(v, words, f"{title}\n{current}", f)
            files.append(name)
    outputs.write_text(os.path.join(outdir, "qcn_routing.json"), json.dumps(
        {"sentence": current, "context_words": words, "coupling": c.tolist(), "pcc": p.tolist()}, indent=1))
    files.append("qcn_routing.json")
    return {"words": words, "current": current, "c": c, "p": p, "files": files}


def _context_sentences(hub, sample, k=None):
    """``-k: text`` of the previous source sentences of the one-row ``sample``, farthest first."""
    ctx = cb.get_context(sample["net_input"])
    if not cb.has_side(ctx, "src"):
        return []
    src = cb.table(ctx, "src", k)
    pad = hub.src_dict.pad()
    return [f"-{j + 1}: {hub.src_dict.string(src.tokens[r][src.tokens[r].ne(pad)])}"
            for j, r in reversed(list(enumerate(src.index[0].tolist()))) if r >= 0]


def target_words(hub, split: str, doc: str, sentence: int, target: str = "reference", beam: int = 5):
    """The one-row batch of one sentence (on the hub's device) and the target words an
    analysis teacher-forces: its reference (``target="reference"``) or the model's own
    translation (``"hypothesis"``, beam ``beam``). Returns ``(sample, words [T], prev [1, T])``:
    the words end in EOS, ``prev`` is the decoder input (EOS, then the words but the last)."""
    if target not in ("reference", "hypothesis"):
        raise ValueError("target: reference or hypothesis")
    hub.models[0].eval()
    sample = sentence_sample(hub, split, doc, sentence)
    sample = utils.apply_to_sample(lambda t: t.to(hub.device), sample)
    if target == "hypothesis":
        gen_args = copy.deepcopy(hub.cfg.generation)
        from omegaconf import open_dict

        with open_dict(gen_args):
            gen_args.beam = beam
        generator = hub.task.build_generator(hub.models, gen_args)
        words = hub.task.inference_step(generator, hub.models, sample)[0][0]["tokens"]
    else:
        words = sample["target"][0]
        words = words[words.ne(hub.tgt_dict.pad())]
    prev = torch.cat([words.new_full((1,), hub.tgt_dict.eos()), words[:-1]]).unsqueeze(0)
    return sample, words.cpu(), prev


def hrnn_gates(hub, split: str, doc: str, sentence: int, target: str = "reference", beam: int = 5) -> Dict:
    """The context gate ``z_i`` (Wang et al. 2017, Eq. 5) of an ``hrnn_context`` with gated
    auxiliary context at every target word of one sentence: teacher-forced on its reference
    (``target="reference"``) or on the model's own translation (``"hypothesis"``, beam
    ``beam``). Returns ``sentence``, ``context`` (the previous source sentences, farthest
    first), ``has_context`` (without context ``D = 0`` and the gate changes nothing),
    ``target``, ``words`` (the target words, EOS last), ``z`` ``[words][channels]`` and its
    mean, min and max per word."""
    model = hub.models[0]
    if not callable(getattr(model, "gate_values", None)) or not hasattr(model.decoder, "aux_context"):
        raise ValueError(f"{type(model).__name__} is not an hrnn_context: it has no context gate")
    sample, words, prev = target_words(hub, split, doc, sentence, target, beam)
    ni = sample["net_input"]
    z, has = model.gate_values(sample, prev)
    z = z[0].float().cpu()
    return {"sentence": hub.src_dict.string(ni["src_tokens"][0]), "context": _context_sentences(hub, sample),
            "has_context": bool(has[0]), "target": target, "words": [hub.tgt_dict[t] for t in words.tolist()],
            "z": z.tolist(), "z_mean": z.mean(1).tolist(), "z_min": z.min(1).values.tolist(),
            "z_max": z.max(1).values.tolist()}


def plot_gates(values: Dict, path: str):
    """``values`` of :func:`hrnn_gates` as a PNG: the mean gate per target word (bars, the
    min-max range as a line) above the gate's channels (heatmap, channels x words)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    words, z = values["words"], np.array(values["z"], dtype=float)
    n = len(words)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(2.0 + 0.35 * n, 6.5), gridspec_kw={"height_ratios": [1, 2]},
                                      sharex=True)
    x = np.arange(n)
    top.bar(x, values["z_mean"], color="tab:blue")
    top.vlines(x, values["z_min"], values["z_max"], color="black", linewidth=1)
    top.set_ylim(0, 1)
    top.set_ylabel("z (mean, min-max)")
    im = bottom.imshow(z.T, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    bottom.set_ylabel("channel of D")
    bottom.set_xticks(x)
    bottom.set_xticklabels(words, rotation=60, ha="right", fontsize=7)
    fig.colorbar(im, ax=[top, bottom], fraction=0.03)
    head = f"context gate z_i ({values['target']}): {values['sentence']}"
    ctx = "\n".join(values["context"]) if values["has_context"] else "(no context: D = 0)"
    fig.suptitle(f"{head}\n{ctx}", fontsize=8, ha="left", x=0.01)
    fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)


def write_per_word(values: Dict, outdir: str, name: str, columns, plot, outputs=None) -> Dict:
    """Write ``{name}.json`` (all of ``values``), ``{name}.tsv`` (one line per target word:
    position, word and ``values[c][i]`` of each of ``columns``) and ``{name}.png``
    (``plot(values, file)``) to ``outdir``, through the output guard ``outputs``. Returns the
    values and the ``files`` written."""
    outputs = _guard(outputs)
    outputs.write_text(os.path.join(outdir, f"{name}.json"), json.dumps(values, indent=1, ensure_ascii=False))
    lines = ["\t".join(["position", "word", *columns])]
    lines += ["\t".join([str(i), w, *(f"{values[c][i]:.6f}" for c in columns)]) for i, w in enumerate(values["words"])]
    outputs.write_text(os.path.join(outdir, f"{name}.tsv"), "\n".join(lines) + "\n")
    with outputs.open(os.path.join(outdir, f"{name}.png"), "wb") as f:
        plot(values, f)
    return dict(values, files=[f"{name}.json", f"{name}.tsv", f"{name}.png"])


def write_hrnn_gates(hub, split: str, doc: str, sentence: int, outdir: str, target: str = "reference",
                     beam: int = 5, outputs=None) -> Dict:
    """Write ``hrnn_gates.json`` (all of :func:`hrnn_gates`), ``hrnn_gates.tsv`` (one line
    per target word: position, word, mean, min, max of ``z_i``) and ``hrnn_gates.png`` to
    ``outdir``. Returns the values and the ``files`` written."""
    return write_per_word(hrnn_gates(hub, split, doc, sentence, target, beam), outdir, "hrnn_gates",
                          ("z_mean", "z_min", "z_max"), plot_gates, outputs)

def isg_attention(hub, split: str, doc: str, sentence: int, target: str = "reference", beam: int = 5,
                  base: float = 2.0) -> Dict:
    """What an ``isg_rnnsearch`` (Kuang & Xiong 2018) reads of the previous sentence A while
    translating one sentence, at every target word: the attention over A's tokens ``α^a``
    (§4.1), its entropy ``H = -Σ_j α_j log α_j`` (§5.4, Eq. 12, to ``base``: 2 by default, the
    bits of their Figures 3 and 4) and the inter-sentence gate ``z_t`` (Eq. 9). Teacher-forced
    on the sentence's reference (``target="reference"``) or on the model's own translation
    (``"hypothesis"``, beam ``beam``). Returns ``sentence``, ``previous`` (A's text; the null
    sentence ``</s> </s> </s>`` for a document's first sentence), ``null`` (whether it is),
    ``previous_tokens`` (A's tokens, its EOS included: the items of the attention), ``target``,
    ``words`` (the target words, EOS last), ``attention [words][previous_tokens]``,
    ``entropy [words]``, ``max_entropy`` (``log m``: an even attention over A's ``m``
    tokens), ``base``, ``z [words][channels]`` and ``z_mean``, ``z_min``, ``z_max`` per word."""
    if not base > 0 or base == 1:
        raise ValueError(f"the entropy's base must be positive and not 1 (got {base:g})")
    model = hub.models[0]
    if not callable(getattr(model, "previous_sentence_attention", None)):
        raise ValueError(f"{type(model).__name__} is not an isg_rnnsearch: it has no attention over the "
                         "previous sentence")
    sample, words, prev = target_words(hub, split, doc, sentence, target, beam)
    ni = sample["net_input"]
    alpha, a_tokens = model.previous_sentence_attention(ni["src_tokens"], ni["src_lengths"], prev,
                                                        context=cb.get_context(ni))
    a_tokens = a_tokens[0].cpu()
    real = a_tokens.ne(hub.src_dict.pad())
    alpha = alpha[0].cpu()[:, real].float()
    h, log_m = entropy(alpha, torch.ones_like(alpha, dtype=torch.bool), base)  # Eq. 12
    z = model.gate_values(sample, prev)[0].float().cpu()
    a_tokens = a_tokens[real]
    null = bool(a_tokens.eq(hub.src_dict.eos()).all())  # a real sentence has one EOS, last
    a_words = [hub.src_dict[t] for t in a_tokens.tolist()]
    return {"sentence": hub.src_dict.string(ni["src_tokens"][0]),
            "previous": " ".join(a_words if null else a_words[:-1]), "null": null, "previous_tokens": a_words, "target": target,
            "words": [hub.tgt_dict[t] for t in words.tolist()], "attention": alpha.tolist(),
            "entropy": h.tolist(), "max_entropy": float(log_m[0]), "base": base, "z": z.tolist(),
            "z_mean": z.mean(1).tolist(), "z_min": z.min(1).values.tolist(), "z_max": z.max(1).values.tolist()}


def plot_isg(values: Dict, path: str):
    """``values`` of :func:`isg_attention` as a PNG: the entropy curve of the attention over
    the previous sentence per target word (as the paper's Figures 3 and 4, with ``log m``
    dashed), the gate's mean per word with its min-max range, and the attention itself
    (A's tokens x target words)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    words, att = values["words"], np.array(values["attention"], dtype=float)
    n, unit = len(words), {2.0: "bits", math.e: "nats"}.get(values["base"], f"log base {values['base']:g}")
    x = np.arange(n)
    fig, (ent, gate, heat) = plt.subplots(3, 1, figsize=(2.5 + 0.35 * n, 8.5), sharex=True,
                                          gridspec_kw={"height_ratios": [1.2, 1, 0.4 + 0.18 * att.shape[1]]})
    ent.plot(x, values["entropy"], marker="o", color="tab:red")
    ent.axhline(values["max_entropy"], linestyle="--", color="gray", linewidth=1)
    ent.set_ylim(0, values["max_entropy"] * 1.1)
    ent.set_ylabel(f"entropy ({unit})")
    gate.plot(x, values["z_mean"], marker="o", color="tab:blue")
    gate.fill_between(x, values["z_min"], values["z_max"], color="tab:blue", alpha=0.2)
    gate.set_ylim(0, 1)
    gate.set_ylabel("gate z (mean, min-max)")
    heat.imshow(att.T, aspect="auto", cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    heat.set_yticks(range(att.shape[1]))
    heat.set_yticklabels(values["previous_tokens"], fontsize=7)
    heat.set_ylabel("previous sentence")
    heat.set_xticks(x)
    heat.set_xticklabels(words, rotation=60, ha="right", fontsize=7)
    prev = "(null: the stop symbol three times)" if values["null"] else values["previous"]
    fig.suptitle(f"{values['sentence']}\nprevious: {prev}\ntarget ({values['target']})", fontsize=8, ha="left",
                 x=0.01)
    fig.savefig(path, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)


def write_isg_attention(hub, split: str, doc: str, sentence: int, outdir: str, target: str = "reference",
                        beam: int = 5, base: float = 2.0, outputs=None) -> Dict:
    """Write ``isg_attention.json`` (all of :func:`isg_attention`), ``isg_attention.tsv``
    (one line per target word: position, word, entropy, mean, min and max of ``z_t``) and
    ``isg_attention.png`` (:func:`plot_isg`) to ``outdir``. Returns the values and the
    ``files`` written."""
    return write_per_word(isg_attention(hub, split, doc, sentence, target, beam, base), outdir, "isg_attention",
                          ("entropy", "z_mean", "z_min", "z_max"), plot_isg, outputs)
