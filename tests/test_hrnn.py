"""hrnn_context (Wang et al. 2017): the hierarchical summary of the previous source sentences
equals a sentence-by-sentence transcription of Eqs. 1-2 and runs each context sentence once,
every switch of §2.2 changes the computation where the paper says, a document's first sentence
gets D = 0 (and the rnnsearch output), incremental decoding is exact, initialisation from a
trained rnnsearch copies its weights, and fairseq-generate / the analysis commands work."""
import argparse
import itertools
import json
import re

import pytest
import torch

from conftest import REPO, RNN_TINY, assert_incremental_equals_full, run, toy_document_batch
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models.document_context import context_spec
from fairseq_docctx.models.hrnn_context import HRNNContextModel, hrnn_context, is_context_parameter
from fairseq_docctx.models.rnnsearch import rnnsearch_nematus
from test_rnnsearch import build as build_rnn
from test_rnnsearch import reference_logits

DOCS = [1, 2, 3, 4, 5]  # documents of 1 to 5 sentences: five first sentences
SWITCHES = dict(init_enc=(False, True), init_dec=(False, True), aux_context=("none", "plain", "gated"))
CONFIGS = [dict(zip(SWITCHES, v)) for v in itertools.product(*SWITCHES.values())]


def build(seed=0, **flags):
    task_cfg = argparse.Namespace(context_size=3, context_sides="source")
    return build_rnn(HRNNContextModel, hrnn_context, seed=seed, task_cfg=task_cfg, **flags)


def sample(d, seed=1):
    return toy_document_batch(d, DOCS, seed=seed, sides="source")


def first_rows(s):
    """The batch rows that are first sentences of their document (no context)."""
    return (cb.index(s["net_input"]["context"], "src") < 0).all(1)


def forward(model, s, context="same"):
    ni = s["net_input"]
    ctx = ni["context"] if context == "same" else context
    with torch.no_grad():
        return model(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"], context=ctx)[0]


def perturbed(ctx, d, rows):
    """``ctx`` with the words of source-table rows ``rows`` replaced."""
    t = ctx["src_tokens"].clone()
    for r in rows:
        words = t[r].ne(d.pad()) & t[r].ne(d.eos())
        t[r][words] = (t[r][words] - 5 + 7) % 30 + 5
    return {**ctx, "src_tokens": t}


def only_context_rows(ctx):
    """Table rows that are some row's context (the previous sentences of the batch)."""
    index = cb.index(ctx, "src")
    return torch.unique(index[index >= 0]).tolist()


def reference_summary(model, s):
    """D of every row by Eqs. 1-2 written out: each previous sentence alone (unpadded)
    through the sentence RNN, then the document RNN over S_K..S_1 (farthest first)."""
    enc = model.encoder
    t = cb.table(s["net_input"]["context"], "src")
    pad = enc.padding_idx
    out = []
    for b in range(t.index.size(0)):
        S = []
        for r in reversed([r for r in t.index[b].tolist() if r >= 0]):
            x = enc.embed_tokens(t.tokens[r][t.tokens[r].ne(pad)]).unsqueeze(0)
            rnn = enc.rnn if enc.context_sentence_rnn is None else enc.context_sentence_rnn
            states, last = rnn(x)
            if enc.summary == "mean":  # --context-summary mean: the states' mean over the words
                S.append(states[0].mean(0))
            elif enc.context_sentence_rnn is None:
                S.append(torch.cat([last[0, 0], last[1, 0]]))
            else:
                S.append(last[0, 0])
            if enc.context_summary_norm is not None:
                S[-1] = enc.context_summary_norm(S[-1])
        out.append(enc.context_document_rnn(torch.stack(S).unsqueeze(0))[1][0, 0] if S
                   else torch.zeros(enc.context_dim))
    return torch.stack(out)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("summary", ["last", "mean", "mean+norm"])
def test_summary_equals_the_equations_sentence_by_sentence(share, summary):
    """Eq. 1 over the batch's table (each context sentence once, packed) and Eq. 2 over
    every row (packed, farthest first) against the sentence-by-sentence transcription; D = 0
    for first sentences. Also with ``--context-summary mean`` (the mean of the sentence
    RNN's states) and ``--context-summary-norm``."""
    model, d = build(share_context_encoder=share, context_summary=summary.split("+")[0],
                     context_summary_norm="norm" in summary)
    s = sample(d)
    FIRST = first_rows(s)
    ni = s["net_input"]
    with torch.no_grad():
        D = model.encoder(ni["src_tokens"], ni["src_lengths"], context=ni["context"])["doc_context"]
        ref = reference_summary(model, s)
    torch.testing.assert_close(D, ref, atol=1e-6, rtol=1e-5)
    assert (D[FIRST] == 0).all() and (D[~FIRST] != 0).any(1).all()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_model_equals_the_equations_written_out(config):
    """Every combination of the switches: the logits equal the equations of §2.2 run
    sentence by sentence and step by step (with the written-out D)."""
    model, d = build(**config)
    model.decoder.grouping = {"overhead": 0, "step_overhead": 0}  # the decoder in length groups
    s = sample(d)
    ni = s["net_input"]
    with torch.no_grad():
        fast = forward(model, s)
        ref = reference_logits(model, ni["src_tokens"], ni["prev_output_tokens"], reference_summary(model, s))
    real = ni["prev_output_tokens"].ne(d.pad())
    torch.testing.assert_close(fast[real], ref[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("share", [True, False], ids=["encoder", "own"])
def test_each_context_sentence_through_the_sentence_rnn_once(share):
    """The sentence RNN runs once per batch, over the table rows that are some row's
    context, each once; the document RNN once, over the rows with context. With the
    encoder as the sentence RNN (the default), the encoder's GRU runs twice: over those
    context rows, then over the batch's sentences."""
    model, d = build(share_context_encoder=share)
    s = sample(d)
    FIRST = first_rows(s)
    seen = {}
    sentence_rnn = "rnn" if share else "context_sentence_rnn"
    for name in (sentence_rnn, "context_document_rnn"):
        getattr(model.encoder, name).register_forward_hook(
            lambda m, inp, out, name=name: seen.setdefault(name, []).append(int(inp[0].batch_sizes[0])))
    forward(model, s)
    rows = len(only_context_rows(s["net_input"]["context"]))
    assert seen[sentence_rnn] == ([rows, s["id"].numel()] if share else [rows])
    assert seen["context_document_rnn"] == [int((~FIRST).sum())]


def _changed(a, b):
    return (a - b).abs().flatten(1).max(1).values > 1e-6


@pytest.mark.parametrize("switch", ["none", "init_enc", "init_dec", "plain", "gated"])
def test_each_switch_changes_the_computation(switch):
    """Changing the previous sentences changes, for the rows with context only: nothing
    without a switch; the encoder states with Init-enc only; s_0 (not the encoder) with
    Init-dec only; the later states (not s_0) with the auxiliary context, plain or gated."""
    flags = dict(init_enc=switch == "init_enc", init_dec=switch == "init_dec",
                 aux_context=switch if switch in ("plain", "gated") else "none")
    model, d = build(**flags)
    s = sample(d)
    FIRST = first_rows(s)
    ni = s["net_input"]
    other = perturbed(ni["context"], d, only_context_rows(ni["context"]))
    enc, dec = model.encoder, model.decoder
    with torch.no_grad():
        eo = [enc(ni["src_tokens"], ni["src_lengths"], context=c) for c in (ni["context"], other)]
        s0 = [dec.start(e)["s"] for e in eo]
    assert _changed(*[e["doc_context"] for e in eo]).tolist() == (~FIRST).tolist()
    annotations = _changed(*[e["annotations"] for e in eo])
    start = _changed(*s0)
    logits = _changed(forward(model, s), forward(model, s, other))
    assert not (annotations | start | logits)[FIRST].any()
    assert annotations[~FIRST].all() == (switch == "init_enc") and annotations[~FIRST].any() == (switch == "init_enc")
    assert start[~FIRST].all() == (switch in ("init_enc", "init_dec"))
    assert start[~FIRST].any() == (switch in ("init_enc", "init_dec"))
    assert logits[~FIRST].all() == (switch != "none") and logits[~FIRST].any() == (switch != "none")


@pytest.mark.parametrize("config", [dict(init_enc=True, init_dec=True, aux_context="gated"),
                                    dict(init_enc=False, init_dec=False, aux_context="plain")], ids=["best", "plain"])
def test_incremental_decoding_equals_full_run_under_beam_reordering(config):
    model, d = build(seed=3, **config)
    ni = sample(d)["net_input"]
    assert_incremental_equals_full(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"],
                                   ni["context"])


def test_first_sentences_equal_rnnsearch():
    """A document's first sentence: D = 0 (finite), and the output is that of the
    rnnsearch holding the same weights, in a batch with context elsewhere, in a batch of
    first sentences only, and without any context (``--task translation``)."""
    model, d = build()
    rnn, _ = build_rnn(arch=rnnsearch_nematus)  # the sizes of hrnn_context
    rnn.load_state_dict({k: v for k, v in model.state_dict().items() if not is_context_parameter(k)})
    s = sample(d)
    FIRST = first_rows(s)
    ni = s["net_input"]
    full = forward(model, s)
    assert torch.isfinite(full).all()
    with torch.no_grad():
        plain = rnn(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])[0]
    torch.testing.assert_close(full[FIRST], plain[FIRST], atol=1e-6, rtol=1e-5)
    rows = FIRST.nonzero().squeeze(1)
    src = ni["src_tokens"][rows]
    with torch.no_grad():
        firsts = model(src, ni["src_lengths"][rows], ni["prev_output_tokens"][rows],
                       context=cb.select_rows(ni["context"], rows))[0]
        none = model(src, ni["src_lengths"][rows], ni["prev_output_tokens"][rows], context=None)[0]
    torch.testing.assert_close(firsts, plain[FIRST], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(none, plain[FIRST], atol=1e-6, rtol=1e-5)


def test_packed_training_output():
    """In training mode the logits of the real target positions only (``[1, R, V]``), equal
    to the eval-mode ``[B, T, V]`` there; ``get_targets`` gives the matching targets."""
    model, d = build()
    s = sample(d)
    ni = s["net_input"]
    full = forward(model, s)
    model.train()
    with torch.no_grad():
        packed = model(**ni)
    real = ni["prev_output_tokens"].ne(d.pad())
    assert packed[0].shape == (1, int(real.sum()), full.size(-1))
    torch.testing.assert_close(packed[0][0], full[real], atol=1e-5, rtol=1e-5)
    assert torch.equal(model.get_targets(s, packed)[0], s["target"][real])


def test_init_enc_needs_the_encoder_size():
    with pytest.raises(ValueError, match="--context-hidden-size"):
        build(init_enc=True, context_hidden_size=5)


def test_context_weights_panel():
    """``context_weights`` (docctx-score plot): the gate z per target word, rows without
    context masked; each row's values those of the row alone."""
    from test_context_weights import check_panel, same_row_alone

    model, d = build()
    s = sample(d)
    FIRST = first_rows(s)
    model.train()
    (p,) = model.context_weights(s)
    assert model.training
    check_panel(p, s)
    assert p["rows"] == ["z"] and p["row_mask"][:, 0].tolist() == (~FIRST).tolist()
    z = p["weights"][:, 0][p["row_mask"][:, 0:1] & p["column_mask"]]
    assert ((z > 0) & (z < 1)).all()
    same_row_alone(model, s, [p], rows=(0, 2, 9, 14))
    with pytest.raises(ValueError, match="gated"):
        build(aux_context="plain")[0].context_weights(s)


def test_named_architecture_is_the_papers_best_system():
    a = argparse.Namespace()
    hrnn_context(a)
    assert (a.init_enc, a.init_dec, a.aux_context, a.share_context_encoder) == (True, True, "gated", True)
    assert (a.encoder_embed_dim, a.encoder_hidden_size, a.context_hidden_size) == (600, 1000, 1000)


def test_batches_are_length_sorted_sentences_with_context_words_at_their_cost():
    """--doc-batching auto gives sentences (the summary reads source context only); a context
    word counts its multiply-adds in the sentence RNN, 3(E+C)C (E 8, C 6 here; the encoder's
    Bi-GRU, 2·3(E+H)H, when shared), over those of a current word: every weight matrix of the
    rnnsearch of the same sizes but the embeddings (the context parameters are not counted)."""
    model, _ = build(share_context_encoder=False)
    sentence_level, _ = build_rnn(arch=rnnsearch_nematus)
    current = sum(p.numel() for n, p in sentence_level.named_parameters() if p.dim() == 2 and "embed_tokens" not in n)
    assert model.current_word_macs() == current
    spec = context_spec(model)
    assert spec.doc_batching == "sentences"
    assert spec.context_token_cost == pytest.approx(3 * (8 + 6) * 6 / current)
    small = build(context_hidden_size=3, init_enc=False, share_context_encoder=False)[0]
    assert context_spec(small).context_token_cost == pytest.approx(3 * (8 + 3) * 3 / current)
    shared = build()[0]  # the default: the encoder's Bi-GRU
    assert context_spec(shared).context_token_cost == pytest.approx(2 * 3 * (8 + 6) * 6 / current)


# ------------------------------------------------------------------ with fairseq-train
@pytest.fixture(scope="module")
def hrnn_from_rnnsearch(reverse_bin, rnnsearch_reverse, tmp_path_factory):
    """hrnn_context (K=2) initialised from the reverse task's rnnsearch (same sizes, output
    layer and initial decoder state) and trained 30 updates with the sentence weights frozen."""
    save = tmp_path_factory.mktemp("hrnn_init")
    p = run(["fairseq-train", reverse_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
             "--context-size", "2", "--arch", "hrnn_context", *RNN_TINY, "--decoder-output-activation", "maxout",
             "--decoder-init", "backward",
             "--init-from-sentence-checkpoint", rnnsearch_reverse["checkpoint"], "--freeze-sentence-weights",
             "--max-tokens", "1000", "--max-update", "30", "--no-epoch-checkpoints", "--save-dir", save])
    return save / "checkpoint_last.pt", p.stdout


def assert_initialised_from(ckpt, log, sentence_ckpt, name):
    """A context model of the family trained from ``sentence_ckpt`` with
    --freeze-sentence-weights holds every weight of it (tensor equality); the report of
    ``name`` in the training ``log`` counts them and the new ones, all ``context_*``. Returns
    the checkpoint and the new weights' names."""
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))
    sent = checkpoint_utils.load_checkpoint_to_cpu(str(sentence_ckpt))["model"]
    model = state["model"]
    new = sorted(set(model) - set(sent))
    m = re.search(name + r": initialised from \S+: (\d+) loaded, (\d+) new, 0 ignored", log)
    assert m and int(m.group(1)) == len(sent) and int(m.group(2)) == len(new)
    assert new and all(is_context_parameter(k) for k in new)
    for k, v in sent.items():
        assert torch.equal(model[k], v), k
    return state, new


@pytest.mark.slow  # ~40 s with its training: make test-all
def test_initialised_from_rnnsearch(hrnn_from_rnnsearch, rnnsearch_reverse):
    """Every rnnsearch weight is copied (tensor equality, kept through training by
    --freeze-sentence-weights); the new weights are exactly the context ones; the report
    says so."""
    hrnn, new = assert_initialised_from(*hrnn_from_rnnsearch, rnnsearch_reverse["checkpoint"], "hrnn_context")
    model = hrnn["model"]
    assert any(not torch.equal(model[k], torch.zeros_like(model[k])) for k in new)
    assert hrnn["cfg"]["model"].hrnn_initialized_from == str(rnnsearch_reverse["checkpoint"])


@pytest.mark.slow  # with the rnnsearch-initialised model's training (~20 s): make test-all; make test
# decodes hrnn_context on the context probe (tests/test_context_probe.py)
@pytest.mark.parametrize("task", ["document_translation", "translation"])
def test_generate_returns_every_sentence_once(hrnn_from_rnnsearch, reverse_bin, task):
    """Beam 5 through fairseq-generate: every test sentence exactly once, with the previous
    sentences as context (document_translation) or none (translation: D = 0)."""
    p = run(["fairseq-generate", reverse_bin, "--user-dir", REPO / "fairseq_docctx", "--task", task,
             "--path", hrnn_from_rnnsearch[0], "--beam", "5", "--batch-size", "23", "--gen-subset", "test", "--cpu"])
    ids = sorted(int(i) for i in re.findall(r"^H-(\d+)\t", p.stdout, re.M))
    n = len((reverse_bin.parent / "raw" / "test.src").read_text().splitlines())
    assert ids == list(range(n))


@pytest.mark.slow  # ~20 s: make test-all
def test_analyze_and_plot_the_gate(hrnn_from_rnnsearch, reverse_bin, tmp_path):
    """``docctx-analyze hrnn`` writes the gate values of every target word (JSON, TSV, PNG),
    teacher-forced on the reference or on the model's translation; ``docctx-score plot``
    draws the mean gate per word."""
    ckpt = hrnn_from_rnnsearch[0]
    for target in ("reference", "hypothesis"):
        out = tmp_path / target
        run(["docctx-analyze", "hrnn", "--path", ckpt, "--data", reverse_bin, "--doc", "1", "--sentence", "2",
             "--target", target, "--outdir", out])
        values = json.loads((out / "hrnn_gates.json").read_text())
        assert values["has_context"] and len(values["context"]) == 2
        n = len(values["words"])
        assert values["words"][-1] == "</s>" and len(values["z"]) == n and len(values["z"][0]) == 64
        assert all(0 < v < 1 for row in values["z"] for v in row)
        tsv = (out / "hrnn_gates.tsv").read_text().splitlines()
        assert len(tsv) == n + 1 and tsv[0].split("\t")[:2] == ["position", "word"]
        assert (out / "hrnn_gates.png").stat().st_size > 1000
        if target == "reference":
            ref = (reverse_bin.parent / "raw" / "test.tgt").read_text().splitlines()[7].split()
            assert values["words"] == ref + ["</s>"]
    run(["docctx-score", "plot", "--path", ckpt, "--data", reverse_bin, "--doc", "1", "--sentence", "2",
         "--outdir", tmp_path / "plot"])
    plotted = json.loads((tmp_path / "plot" / "context_hrnn_context.json").read_text())
    assert plotted["panels"][0]["row_labels"] == ["z"]
    assert (tmp_path / "plot" / "context_hrnn_context.png").exists()


def test_no_attention_over_the_context():
    """The hierarchical summary ``D`` has no attention over the context sentences:
    ``docctx-score entropy`` refuses the model with one line (docs/limits.md)."""
    from fairseq_docctx.models import document_context as dc

    model, d = build()
    with pytest.raises(dc.ContextAttentionUnsupported, match="HRNNContextModel does not give"):
        dc.context_attention(model, toy_document_batch(d, [1, 2, 3], sides="source"))


def test_a_checkpoint_without_the_summary_options_keeps_the_last_state():
    """A checkpoint written before --context-summary / --context-summary-norm existed is built
    with the summary it was trained with (the last state, no normalisation)."""
    from fairseq_docctx.models.document_context import apply_checkpoint_defaults

    old = argparse.Namespace(arch="hrnn_context")
    assert {"context_summary", "context_summary_norm"} <= set(apply_checkpoint_defaults(old))
    assert (old.context_summary, old.context_summary_norm) == ("last", False)
    a = argparse.Namespace()
    hrnn_context(a)
    assert (a.context_summary, a.context_summary_norm) == ("last", False)
    with pytest.raises(Exception, match="--context-summary"):
        build(context_summary="max")
