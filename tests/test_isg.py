"""isg_rnnsearch (Kuang & Xiong 2018): the model equals its equations (Eqs. 7-11) written out
sentence by sentence, every sentence of a batch runs through the encoder once, a document's
first sentence reads the null sentence, each switch of Table 3 changes the outputs where the
paper says, incremental decoding is exact, initialisation from a trained rnnsearch copies its
weights, and fairseq-generate (beam search, the switches by --model-overrides) and the analysis
commands work."""
import argparse
import json
import re

import pytest
import torch

from conftest import REPO, RNN_TINY, assert_incremental_equals_full, run, run_in_process, toy_document_batch
from fairseq_docctx.data import context_batch as cb
from fairseq_docctx.models.document_context import ContextAttentionUnsupported
from fairseq_docctx.evaluation.entropy import entropy as attention_entropy
from fairseq_docctx.models.isg_rnnsearch import ISGRNNSearchModel, isg_rnnsearch
from fairseq_docctx.models.rnnsearch import is_context_parameter
from test_hrnn import _changed, assert_initialised_from, first_rows, forward, only_context_rows, perturbed
from test_rnnsearch import build as build_rnn
from test_rnnsearch import reference_logits

DOCS = [1, 2, 3, 4, 5]  # documents of 1 to 5 sentences: five first sentences
USER_DIR = ["--user-dir", REPO / "fairseq_docctx"]


def build(seed=0, **flags):
    task_cfg = argparse.Namespace(context_size=1, context_sides="source")
    return build_rnn(ISGRNNSearchModel, isg_rnnsearch, seed=seed, task_cfg=task_cfg, **flags)


def sample(d, seed=1):
    return toy_document_batch(d, DOCS, seed=seed, sides="source")


def previous_words(s, d):
    """The words of the previous sentence A of every row: its table row unpadded, or the null
    sentence (eos, eos, eos)."""
    t = cb.table(s["net_input"]["context"], "src", 1)
    return [t.tokens[r][t.tokens[r].ne(d.pad())] if r >= 0 else torch.full((3,), d.eos())
            for r in t.index[:, 0].tolist()]


def last_sentences(s):
    """The batch of the documents' last sentences only: their previous sentences are context
    only (table rows that are no current sentence of the batch)."""
    ni = s["net_input"]
    last = torch.tensor([sum(DOCS[:i + 1]) - 1 for i in range(len(DOCS))])  # corpus ids
    rows = torch.isin(s["id"], last).nonzero().squeeze(1)  # (the collater sorts rows by length)
    return {**s, "net_input": {**ni, "src_tokens": ni["src_tokens"][rows], "src_lengths": ni["src_lengths"][rows],
                               "prev_output_tokens": ni["prev_output_tokens"][rows],
                               "context": cb.select_rows(ni["context"], rows)}}, rows


def test_model_equals_the_equations_written_out():
    """One packed encoder run for B and A, A's keys per sentence, both attentions, the gate
    (Eq. 9) and the gated state update (Eq. 10) in length groups: the logits of the equations
    run sentence by sentence and step by step (A unpadded, the null sentence for first
    sentences)."""
    model, d = build()
    model.decoder.grouping = {"overhead": 0, "step_overhead": 0}  # the decoder in length groups
    s = sample(d)
    ni = s["net_input"]
    with torch.no_grad():
        fast = forward(model, s)
        ref = reference_logits(model, ni["src_tokens"], ni["prev_output_tokens"], previous=previous_words(s, d))
    real = ni["prev_output_tokens"].ne(d.pad())
    torch.testing.assert_close(fast[real], ref[real], atol=1e-5, rtol=1e-5)


def test_each_sentence_through_the_encoder_once():
    """One GRU run per batch over its current sentences, the previous sentences that are not
    current sentences of the batch, and one null sentence; A's keys once per sentence. A
    batch of the documents' last sentences only (their A's are context only) gives each row
    what the whole batch gives it."""
    model, d = build()
    s = sample(d)
    ni = s["net_input"]
    B = ni["src_tokens"].size(0)
    runs = []
    model.encoder.rnn.register_forward_hook(lambda m, inp, out: runs.append(int(inp[0].batch_sizes[0])))
    full = forward(model, s)
    assert runs == [B + 1]  # every A of a batch of whole documents is one of its current sentences
    sub, last = last_sentences(s)
    runs.clear()
    alone = forward(model, sub)
    assert runs == [len(last) + (len(DOCS) - 1) + 1]  # + the four previous sentences + the null one
    real = sub["net_input"]["prev_output_tokens"].ne(d.pad())
    torch.testing.assert_close(alone[real], full[last][real], atol=1e-5, rtol=1e-5)


def test_first_sentence_reads_the_null_sentence():
    """A document's first sentence reads A = (eos, eos, eos): its previous-sentence tokens,
    and outputs finite and equal to those of a batch without context (every A null) and of
    ``--isg-ablation null``; the other rows' outputs differ there."""
    model, d = build()
    s = sample(d)
    FIRST = first_rows(s)
    ni = s["net_input"]
    with torch.no_grad():
        eo = model.encoder(ni["src_tokens"], ni["src_lengths"], context=ni["context"])
    tokens = eo["context_tokens"][FIRST]
    assert (tokens[:, :3] == d.eos()).all() and (tokens[:, 3:] == d.pad()).all()
    full = forward(model, s)
    assert torch.isfinite(full).all()
    none = forward(model, s, None)
    null, _ = build(isg_ablation="null")
    null.load_state_dict(model.state_dict())
    for other in (none, forward(null, s)):
        torch.testing.assert_close(full[FIRST], other[FIRST], atol=1e-6, rtol=1e-5)
        assert _changed(full, other)[~FIRST].all()


def test_the_previous_sentence_changes_only_its_rows():
    """Changing the words of the previous sentences (context-only table rows of a batch of
    the documents' last sentences) changes the outputs of the rows that read them, and not
    that of a document's first sentence."""
    model, d = build()
    s, _ = last_sentences(sample(d))
    FIRST = first_rows(s)
    ctx = s["net_input"]["context"]
    changed = _changed(forward(model, s), forward(model, s, perturbed(ctx, d, only_context_rows(ctx))))
    assert int(FIRST.sum()) == 1
    assert changed[~FIRST].all() and not changed[FIRST].any()


@pytest.mark.parametrize("switch", ["null", "zero-gate", "random-context"])
def test_each_switch_of_table_3_changes_the_outputs(switch):
    """+NULL changes the rows that have a previous sentence; +z=0 every row, and it is then
    rnnsearch with the same weights (Eq. 10 with z = 0: GRU_2 reads c^b only); +RV every row,
    the same for the same torch seed."""
    model, d = build()
    s = sample(d)
    FIRST = first_rows(s)
    other, _ = build(isg_ablation=switch)
    other.load_state_dict(model.state_dict())
    torch.manual_seed(1)
    a = forward(other, s)
    changed = _changed(forward(model, s), a)
    assert changed[~FIRST].all()
    assert changed[FIRST].all() == (switch != "null") and changed[FIRST].any() == (switch != "null")
    if switch == "zero-gate":
        rnn, _ = build_rnn()
        rnn.load_state_dict({k: v for k, v in model.state_dict().items() if not is_context_parameter(k)})
        ni = s["net_input"]
        with torch.no_grad():
            plain = rnn(ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"])[0]
        torch.testing.assert_close(a, plain, atol=1e-6, rtol=1e-5)
    if switch == "random-context":
        torch.manual_seed(1)
        assert torch.equal(forward(other, s), a)
        assert _changed(forward(other, s), a).all()  # the generator moved on


@pytest.mark.parametrize("switch", ["none", "null"])
def test_incremental_decoding_equals_full_run_under_beam_reordering(switch):
    model, d = build(seed=3, isg_ablation=switch)
    ni = sample(d)["net_input"]
    assert_incremental_equals_full(model, ni["src_tokens"], ni["src_lengths"], ni["prev_output_tokens"],
                                   ni["context"])


def test_attention_entropy():
    """Eq. 12: an even attention over m tokens has entropy log m, a one-hot one 0; bits with
    base 2 (at most log2 3 over the null sentence, as in the paper's Figure 3)."""
    alpha = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0], [0.0, 1.0, 0.0, 0.0]])
    support = torch.tensor([[True, True, True, False], [True, True, True, True]])
    h, log_m = attention_entropy(alpha, support)
    torch.testing.assert_close(h.float(), torch.tensor([torch.log(torch.tensor(3.0)), 0.0]))
    torch.testing.assert_close(log_m.float(), torch.log(torch.tensor([3.0, 4.0])))
    h2, log2_m = attention_entropy(alpha, support, base=2)
    torch.testing.assert_close(h2[0], log2_m[0])
    assert abs(float(log2_m[0]) - 1.585) < 1e-3


def test_attention_and_gate_for_analysis():
    """``previous_sentence_attention``: a distribution over A's tokens at every real target
    position (zeros at padding); ``context_weights`` (docctx-score plot): the gate and the
    attention's entropy over log m, each row's values those of the row alone; the switches
    without an attention over A say so."""
    from test_context_weights import check_panel, same_row_alone

    model, d = build()
    s = sample(d)
    ni = s["net_input"]
    model.train()
    alpha, tokens = model.previous_sentence_attention(**ni)
    assert model.training
    real = ni["prev_output_tokens"].ne(d.pad())
    support = tokens.ne(d.pad())
    assert alpha.shape == (*real.shape, tokens.size(1))
    torch.testing.assert_close(alpha.sum(-1), real.float())
    assert (alpha * ~support[:, None, :] == 0).all()
    (dist,) = model.context_attention(s)
    assert torch.equal(dist["weights"], alpha) and torch.equal(dist["position_mask"], real)
    panels = model.context_weights(s)
    assert [p["rows"] for p in panels] == [["z"], ["H/log m"]]
    for p in panels:
        check_panel(p, s)
        v = p["weights"][:, 0][real]
        assert ((v > 0) & (v <= 1)).all()  # a tiny random model attends almost evenly: H/log m ~ 1
    same_row_alone(model, s, panels, rows=(0, 2, 9, 14))
    for switch in ("zero-gate", "random-context"):
        other, _ = build(isg_ablation=switch)
        with pytest.raises(ContextAttentionUnsupported, match="does not attend"):
            other.context_attention(s)
        assert [p["rows"] for p in other.context_weights(s)] == [["z"]]


def test_named_architecture_has_the_papers_sizes():
    a = argparse.Namespace()
    isg_rnnsearch(a)
    assert (a.encoder_embed_dim, a.encoder_hidden_size, a.decoder_hidden_size, a.decoder_dropout_out,
            a.encoder_dropout_in, a.encoder_dropout_out, a.decoder_dropout_in, a.isg_ablation) == (
        620, 1000, 1000, 0.5, 0.0, 0.0, 0.0, "none")


def test_bahdanau_initialisation():
    """--rnn-init bahdanau: Bahdanau et al. (2015, B.1), the initialisation Kuang & Xiong (2018,
    §5.1) keep with "all the other settings", on rnnsearch's parameters and the gate model's
    own; the default keeps PyTorch's."""
    sizes = dict(encoder_embed_dim=32, decoder_embed_dim=32, encoder_hidden_size=32, decoder_hidden_size=32,
                 attention_dim=32, decoder_out_embed_dim=16)
    model, d = build(rnn_init="bahdanau", **sizes)
    params = dict(model.named_parameters())
    orthogonal = ["encoder.rnn.weight_hh_l0", "encoder.rnn.weight_hh_l0_reverse", "decoder.gru1.weight_hh",
                  "decoder.gru2.weight_hh"]
    attention = ["encoder.attention_keys.weight", "encoder.context_attention_keys.weight",
                 "decoder.attention_query.weight", "decoder.context_attention_query.weight"]
    zero = ["decoder.attention_v", "decoder.context_attention_v"] + [n for n in params if n.rsplit(".", 1)[-1].startswith("bias")]
    other = [n for n in params if n not in orthogonal + attention + zero]
    assert {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.gru2.weight_ih",
            "decoder.context_input.weight", "decoder.context_gate_state.weight", "decoder.context_gate_previous.weight",
            "decoder.init_state.weight", "decoder.out_state.weight", "decoder.fc_out.weight"} <= set(other)
    for n in orthogonal:
        for block in params[n].detach().split(32):  # U_r, U_z, U
            assert torch.allclose(block @ block.T, torch.eye(32), atol=1e-5), n
    for n in zero:
        assert params[n].abs().max() == 0, n
    for names, std in ((attention, 0.001), (other, 0.01)):
        for n in names:
            w = params[n].detach()
            if "embed_tokens" in n:
                assert w[d.pad()].abs().max() == 0
                w = w[torch.arange(len(w)) != d.pad()]
            assert abs(w.mean()) < std / 5 and w.std() == pytest.approx(std, rel=0.2), (n, w.std())
    default, _ = build(**sizes)
    assert default.decoder.attention_v.abs().min() > 0 and default.decoder.gru1.bias_ih.abs().max() > 0.01


# ------------------------------------------------------------------ with fairseq-train
@pytest.fixture(scope="module")
def isg_from_rnnsearch(reverse_bin, rnnsearch_reverse, tmp_path_factory):
    """isg_rnnsearch initialised from the reverse task's rnnsearch (same sizes) and trained
    30 updates with the sentence weights frozen, K = 1."""
    save = tmp_path_factory.mktemp("isg_init")
    p = run(["fairseq-train", reverse_bin, *USER_DIR, "--task", "document_translation", "--context-size", "1",
             "--arch", "isg_rnnsearch", *RNN_TINY, "--init-from-sentence-checkpoint", rnnsearch_reverse["checkpoint"],
             "--freeze-sentence-weights", "--max-tokens", "1000", "--max-update", "30", "--no-epoch-checkpoints",
             "--save-dir", save])
    return save / "checkpoint_last.pt", p.stdout


def test_initialised_from_rnnsearch(isg_from_rnnsearch, rnnsearch_reverse):
    """Every rnnsearch weight is copied (tensor equality, kept through training by
    --freeze-sentence-weights); the new weights are exactly the gate's and the attention
    over A's (``context_*``); the report says so."""
    isg, new = assert_initialised_from(*isg_from_rnnsearch, rnnsearch_reverse["checkpoint"], "isg_rnnsearch")
    assert set(new) == {"encoder.context_attention_keys.weight", "encoder.context_attention_keys.bias",
                        "decoder.context_attention_query.weight", "decoder.context_attention_v",
                        "decoder.context_gate_state.weight", "decoder.context_gate_embed.weight",
                        "decoder.context_gate_current.weight", "decoder.context_gate_previous.weight",
                        "decoder.context_input.weight"}
    assert isg["cfg"]["model"].isg_initialized_from == str(rnnsearch_reverse["checkpoint"])


def fairseq_generate(argv):
    """fairseq-generate in this process (what its console script runs, on ``argv``)."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli.generate import main

    args = options.parse_args_and_arch(options.get_generation_parser(), [str(a) for a in argv])
    main(convert_namespace_to_omegaconf(args))


def _generate(ckpt, data, *extra, beam=10, capsys=None):
    """fairseq-generate of the test split (in this process with ``capsys``): {sentence id:
    (score, hypothesis)}, each id once."""
    argv = [data, *USER_DIR, "--path", ckpt, "--beam", str(beam), "--batch-size", "23",
            "--required-batch-size-multiple", "1", "--gen-subset", "test", "--cpu", *extra]
    if capsys is None:
        stdout = run(["fairseq-generate", *argv]).stdout
    else:
        code, stdout, err = run_in_process(fairseq_generate, argv, capsys)
        assert code == 0, err
    out = {}
    for i, score, h in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", stdout, re.M):
        assert int(i) not in out, f"sentence {i} returned twice"
        out[int(i)] = (float(score), h)
    return out


@pytest.mark.parametrize("task", ["document_translation",
                                  pytest.param("translation", marks=pytest.mark.slow)])  # ~7 s: make test-all
def test_generate_returns_every_sentence_once(isg_from_rnnsearch, reverse_bin, task):
    """Beam 10 (the paper's) through fairseq-generate: every test sentence exactly once, with
    the previous sentence as context (document_translation) or the null sentence for all
    (translation)."""
    hyps = _generate(isg_from_rnnsearch[0], reverse_bin, "--task", task)
    n = len((reverse_bin.parent / "raw" / "test.src").read_text().splitlines())
    assert sorted(hyps) == list(range(n))


@pytest.mark.slow  # ~30 s; the switches' effect on the model's outputs is in make test (test_each_switch_of_table_3...)
def test_switches_at_generation_by_model_overrides(isg_from_rnnsearch, reverse_bin, capsys):
    """--model-overrides "{'isg_ablation': ...}": each switch changes the scores of a clear
    share of the translations (at least a quarter of the sentences it acts on). +NULL acts on
    the sentences after the first only (a first sentence already reads the null sentence: its
    scores stay as they were); z=0 and +RV act on every sentence, first sentences included (the
    gate and c^a of the null sentence feed them too). +RV changes with --seed (the same torch
    seed gives the same vectors: test_each_switch_of_table_3...)."""
    ckpt = isg_from_rnnsearch[0]
    task = ["--task", "document_translation", "--context-size", "1"]
    base = _generate(ckpt, reverse_bin, *task, beam=5, capsys=capsys)
    firsts = set(range(0, len(base), 5))  # the reverse task's documents have 5 sentences
    others = set(base) - firsts
    runs = {}
    for switch, seed in (("null", 1), ("zero-gate", 1), ("random-context", 1), ("random-context", 2)):
        runs[switch, seed] = _generate(ckpt, reverse_bin, *task, "--seed", str(seed), "--model-overrides",
                                       str({"isg_ablation": switch}), beam=5, capsys=capsys)
    for (switch, seed), out in runs.items():
        differs = {i for i in base if abs(out[i][0] - base[i][0]) > 1e-4}
        print(f"{switch} (seed {seed}): {len(differs & firsts)} of {len(firsts)} first sentences, "
              f"{len(differs & others)} of {len(others)} others changed")
        if switch == "null":
            assert not differs & firsts
            assert len(differs) >= len(others) / 4, switch
        else:
            assert differs & firsts, switch
            assert len(differs) >= len(base) / 4, switch
    assert runs["random-context", 1] != runs["random-context", 2]


def test_analyze_and_plot(isg_from_rnnsearch, reverse_bin, tmp_path, capsys):
    """``docctx-analyze isg`` writes the entropy of the attention over the previous sentence
    (bits, at most log2 m) and the gate of every target word (JSON, TSV, PNG), for a first
    sentence (the null sentence) and a later one, on the reference or the translation;
    ``docctx-score plot`` draws the gate and the entropy per word."""
    from fairseq_docctx.cli.analyze import cli_main as analyze
    from fairseq_docctx.cli.score import cli_main as score

    ckpt = isg_from_rnnsearch[0]
    src = (reverse_bin.parent / "raw" / "test.src").read_text().splitlines()
    for sentence, target in ((0, "reference"), (2, "hypothesis")):
        out = tmp_path / target
        code, _, err = run_in_process(analyze, ["isg", "--path", ckpt, "--data", reverse_bin, "--doc", "1",
                                                "--sentence", sentence, "--target", target, "--outdir", out], capsys)
        assert code == 0 and ("null sentence" in err) == (sentence == 0), err
        v = json.loads((out / "isg_attention.json").read_text())
        assert v["null"] == (sentence == 0)
        if sentence == 0:
            assert v["previous_tokens"] == ["</s>"] * 3 and abs(v["max_entropy"] - 1.585) < 1e-3
        else:
            assert v["previous"] == src[5 + sentence - 1] and v["previous_tokens"][-1] == "</s>"
        n = len(v["words"])
        assert v["words"][-1] == "</s>" and len(v["entropy"]) == len(v["z"]) == len(v["attention"]) == n
        assert all(0 <= h <= v["max_entropy"] + 1e-6 for h in v["entropy"])
        assert all(abs(sum(row) - 1) < 1e-4 and len(row) == len(v["previous_tokens"]) for row in v["attention"])
        assert all(0 < x < 1 for row in v["z"] for x in row)
        assert len((out / "isg_attention.tsv").read_text().splitlines()) == n + 1
        assert (out / "isg_attention.png").stat().st_size > 1000
    code, _, err = run_in_process(score, ["plot", "--path", ckpt, "--data", reverse_bin, "--doc", "1",
                                          "--sentence", "2", "--outdir", tmp_path / "plot"], capsys)
    assert code == 0, err
    plotted = json.loads((tmp_path / "plot" / "context_isg_rnnsearch.json").read_text())
    assert [p["row_labels"] for p in plotted["panels"]] == [["z"], ["H/log m"]]


def test_entropy_command(isg_from_rnnsearch, reverse_bin, tmp_path, capsys):
    """``docctx-score entropy`` measures the attention over the previous sentence (Eq. 12) at
    every target word of every sentence, first sentences included: their previous sentence is
    the null sentence of three stop symbols (log2 3 bits at most, the paper's Figure 3)."""
    from fairseq_docctx.cli.score import cli_main as score

    out = tmp_path / "isg.json"
    code, text, err = run_in_process(score, ["entropy", "--path", isg_from_rnnsearch[0], "--data", reverse_bin,
                                             "--max-sentences", "12", "--base", "2", "--json", out], capsys)
    assert code == 0, err
    rep = json.loads(out.read_text())["metrics"]["attention_entropy"]
    (d,) = rep["distributions"]
    assert d["items"] == "previous sentence's tokens" and rep["sentences_without_context"] == 0
    sents = rep["sentences"]
    assert len(sents) == 12 and {s["index"] for s in sents} == set(range(5))
    for s in sents:
        (t,) = s["entropy"]
        assert all(0 <= h <= m + 1e-6 for h, m in zip(s["entropy"][t], s["max"][t]))
        assert (s["index"] == 0) == all(abs(m - 1.585) < 1e-3 for m in s["max"][t])
    assert f"mean {d['mean']:.4f}" in text
