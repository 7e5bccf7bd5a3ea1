"""Segment models (``g_transformer``, ``doc2doc_transformer``, trained a few updates on the toy
documents with ``--doc-mode segments``) in the hub, ``docctx-translate``, contrastive scoring
and CXMI: every sentence translated once and in order, the score of a candidate the sum of the
log-probabilities of its own tokens in the segment, CXMI with the context inside the segment."""
import copy
import math
import subprocess

import numpy as np
import pytest
import torch
from omegaconf import open_dict

from conftest import REPO, TINY_MODEL, run_in_process, venv_env
from fairseq_docctx.data import segments as seg
from fairseq_docctx.data.doc_index import DocIndex
from fairseq_docctx.evaluation import contrastive as ct
from fairseq_docctx.evaluation import cxmi
from fairseq_docctx.evaluation.scoring import ModelScorer
from fairseq_docctx.hub import export_ctranslate2, from_pretrained
from fairseq_docctx.inference.ctranslate2 import ExportError

ARCHS = {
    "g_transformer": ["--encoder-ctxlayers", "1", "--decoder-ctxlayers", "1", "--cross-ctxlayers", "1"],
    "doc2doc_transformer": [],
}
LIMIT = 48  # --max-segment-tokens of the checkpoints: most toy documents take several segments
LEN = (0, 60)  # --max-len-a/b: one length limit whatever the batch, which a barely trained model reaches


@pytest.fixture(scope="module")
def seg_ckpts(toy_bin, tmp_path_factory):
    """Both segment models, 2+2 layers, trained 30 updates side by side."""
    procs, ckpts = [], {}
    for name, extra in ARCHS.items():
        save = tmp_path_factory.mktemp(name)
        cmd = ["fairseq-train", toy_bin, "--user-dir", REPO / "fairseq_docctx", "--task", "document_translation",
               "--doc-mode", "segments", "--max-segment-tokens", str(LIMIT), "--arch", name, *TINY_MODEL,
               "--encoder-layers", "2", "--decoder-layers", "2", *extra, "--max-tokens", "400",
               "--max-update", "30", "--no-epoch-checkpoints", "--save-dir", save]
        procs.append((cmd, subprocess.Popen([str(c) for c in cmd], env=venv_env(), stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)))
        ckpts[name] = save / "checkpoint_last.pt"
    for cmd, p in procs:
        out = p.communicate(timeout=600)[0]
        assert p.returncode == 0, f"{' '.join(map(str, cmd))}\n{out[-4000:]}"
    return ckpts


@pytest.fixture(scope="module")
def hubs(seg_ckpts, toy_bin):
    return {name: from_pretrained(str(path), data=str(toy_bin)) for name, path in seg_ckpts.items()}


def toy_documents(hub, n_docs=12, seed=3):
    """Documents of 1..n_docs sentences of toy words, binarized."""
    rng = np.random.RandomState(seed)
    docs = [[" ".join(f"w{w}" for w in rng.randint(0, 30, rng.randint(2, 9))) for _ in range(n)]
            for n in range(1, n_docs + 1)]
    return docs, [[hub.encode(s) for s in d] for d in docs]


def segment_plan(hub, doc):
    """The segments the hub packs a document (binarized sentences) into."""
    return seg.plan_segments(DocIndex(["d"], [len(doc)]), np.array([t.numel() for t in doc]), None,
                             hub.segment_limit(), packing=str(hub.task.cfg.segment_packing))


def reference_translation(hub, doc, beam):
    """A document decoded segment by segment, each alone, straight through the generator (its
    length limit raised to the sum of the sentences' length windows as the task raises it), the
    best hypothesis split at the separator (``None`` for a segment whose hypothesis has
    another number of sentences)."""
    plan = segment_plan(hub, doc)
    sep, eos = hub.tgt_dict.index("<sep>"), hub.tgt_dict.eos()
    gen_args = copy.deepcopy(hub.cfg.generation)
    with open_dict(gen_args):
        gen_args.beam = beam
        gen_args.max_len_a, gen_args.max_len_b = LEN
    generator = hub.task.build_generator(hub.models, gen_args)
    out = []
    for i in range(len(plan)):
        sents = [doc[j] for j in plan.sentences(i)]
        src = torch.cat(sents)
        src[torch.as_tensor(np.cumsum([t.numel() for t in sents])[:-1] - 1, dtype=torch.long)] = sep
        sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src[None], "src_lengths": torch.tensor([len(src)])}}
        window = hub.task.segment_decoding.decoding_window(hub.models)
        with torch.no_grad(), hub.task.segment_decoding.length_limit(generator, src[None], window):
            best = generator.generate(hub.models, sample)[0][0]["tokens"]
        pieces = seg.split_tokens(best, sep, eos)
        out.extend(pieces if len(pieces) == len(sents) else [None] * len(sents))
    return out


@pytest.mark.parametrize("name", [pytest.param("g_transformer", marks=pytest.mark.slow), "doc2doc_transformer"])
def test_hub_translates_every_sentence_once_in_order(hubs, name):
    """Documents of 1..12 sentences (several segments each from 6 sentences on), 16 documents
    a batch: every sentence gets one translation, the one decoding its segment alone gives
    it, in document order; beam 1 and 4."""
    hub = hubs[name]
    _, docs = toy_documents(hub)
    assert [len(d) for d in docs] == list(range(1, 13))
    for beam in (1, 4):
        before = hub.segment_fallbacks
        out = hub.generate_documents(docs, beam=beam, batch_size=16, sentence_done=lambda h: h[0]["tokens"],
                                     max_len_a=LEN[0], max_len_b=LEN[1])
        assert [len(o) for o in out] == [len(d) for d in docs]
        compared = 0
        for d, o in zip(docs, out):
            for mine, ref in zip(o, reference_translation(hub, d, beam)):
                if ref is not None:
                    assert torch.equal(mine, ref)
                    compared += 1
        fell, decoded = (a - b for a, b in zip(hub.segment_fallbacks, before))
        # every segment counted once: the denominator is the documents' segments
        assert decoded == sum(len(segment_plan(hub, d)) for d in docs) >= len(docs) + 4
        if name == "g_transformer":  # by construction: never a fallback
            assert fell == 0 and compared == sum(len(d) for d in docs)
        assert compared > 0
    report = hub.segment_report
    assert report[:2] == hub.segment_fallbacks and sum(report[2].values()) == report[0]
    assert report[2]["window"] == 0  # the windows bound every output sentence


def test_forced_fallback_still_gives_every_sentence(hubs):
    """doc2doc_transformer without its sentence-count constraint miscounts segments: those
    are decoded again sentence by sentence, counted, and every sentence still comes back
    once, each the translation of its own sentence decoded alone where it fell back."""
    hub = hubs["doc2doc_transformer"]
    _, docs = toy_documents(hub, n_docs=8, seed=5)
    hub.task.cfg.no_sentence_count_constraint = True  # --no-sentence-count-constraint
    try:
        before = hub.segment_fallbacks
        out = hub.generate_documents(docs, beam=2, batch_size=16, sentence_done=lambda h: h[0]["tokens"],
                                     max_len_a=LEN[0], max_len_b=LEN[1])
        fell = hub.segment_fallbacks[0] - before[0]
        assert fell > 0, "no segment was miscounted without the constraint: nothing fell back"
        assert [len(o) for o in out] == [len(d) for d in docs]
        sep = hub.tgt_dict.index("<sep>")
        assert all(t[-1] == hub.tgt_dict.eos() and not (t == sep).any() for o in out for t in o)
        assert not hub.models[0].keeps_sentence_count
    finally:
        hub.task.cfg.no_sentence_count_constraint = False


def test_docctx_translate_writes_every_sentence_and_the_fallbacks(seg_ckpts, hubs, toy_bin, tmp_path, capsys):
    """docctx-translate on the toy test documents (docids format): one line per input line,
    each the hub's translation of that sentence; the fallback count on one line, summed over
    the shard processes of --processes 2."""
    from fairseq_docctx.cli.translate import cli_main

    raw = toy_bin.parent / "raw"
    code, _, err = run_in_process(cli_main, [raw / "test.src", "--path", seg_ckpts["g_transformer"], "--data",
                                             toy_bin, "--beam", "2", "-o", tmp_path / "out.tgt", "--quiet"], capsys)
    assert code == 0, err
    src = (raw / "test.src").read_text().splitlines()
    ids = (raw / "test.docids").read_text().splitlines()
    out = (tmp_path / "out.tgt").read_text().splitlines()
    assert len(out) == len(src) and (tmp_path / "out.docids").read_text().splitlines() == ids
    docs, order = {}, []
    for s, d in zip(src, ids):
        if d not in docs:
            order.append(d)
        docs.setdefault(d, []).append(s)
    expected = hubs["g_transformer"].translate_documents([docs[d] for d in order], beam=2, max_len_a=1.2,
                                                         max_len_b=10)  # docctx-translate's defaults
    assert out == [t for d in expected for t in d]
    lines = [ln for ln in err.splitlines() if "segments decoded again sentence by sentence" in ln]
    # one line: no fallback, of every segment of the test documents
    segments = sum(len(segment_plan(hubs["g_transformer"], [hubs["g_transformer"].encode(s) for s in docs[d]]))
                   for d in order)
    assert len(lines) == 1 and lines[0] == (f"docctx-translate: 0 of {segments} segments decoded again sentence by "
                                            "sentence (misaligned: 0 sentence count, 0 empty sentence, 0 outside "
                                            "the length window)"), err
    # two shard processes: the same output, their fallback counts summed
    code, _, err2 = run_in_process(cli_main, [raw / "test.src", "--path", seg_ckpts["g_transformer"], "--data",
                                              toy_bin, "--beam", "2", "-o", tmp_path / "two.tgt", "--quiet",
                                              "--processes", "2"], capsys)
    assert code == 0, err2
    assert (tmp_path / "two.tgt").read_text().splitlines() == out
    assert [ln for ln in err2.splitlines() if "segments decoded again sentence by sentence" in ln] == lines


def test_no_sentence_length_window_reaches_the_models(seg_ckpts, toy_bin, tmp_path):
    """docctx-translate --no-sentence-length-window: the task option, also for a checkpoint
    whose recorded configuration predates it; the generator's models then decode without
    windows (with them by default)."""
    from fairseq_docctx.cli.translate import build_parser, load_model

    state = torch.load(seg_ckpts["g_transformer"], map_location="cpu", weights_only=False)
    for k in ("no_sentence_length_window", "sentence_max_len_a", "sentence_max_len_b"):
        del state["cfg"]["task"][k]  # as fairseq saves it: plain containers
    old = tmp_path / "older.pt"
    torch.save(state, old)
    for path in (seg_ckpts["g_transformer"], old):
        for flag, window in (([], seg.LengthWindow(1.2, 10, 1)), (["--no-sentence-length-window"], None)):
            hub = load_model(build_parser().parse_args(["--path", str(path), "--data", str(toy_bin), *flag]))
            hub.build_generator(hub.cfg.generation)
            assert hub.models[0].sentence_length_window == window, (path, flag)


def test_ctranslate2_exports_doc2doc_and_refuses_g_transformer(seg_ckpts, toy_bin, tmp_path):
    """doc2doc_transformer exports as a segment model (tests/test_ctranslate2_segments.py
    decodes it); g_transformer's group attention does not export."""
    with pytest.raises(ExportError, match="architecture 'g_transformer' does not export to CTranslate2: .*group "
                       "attention"):
        export_ctranslate2(str(seg_ckpts["g_transformer"]), str(tmp_path / "g"), data=str(toy_bin))
    assert not (tmp_path / "g").exists()
    record = export_ctranslate2(str(seg_ckpts["doc2doc_transformer"]), str(tmp_path / "d2d"), data=str(toy_bin))
    assert record["segments"] == {"max_segment_tokens": LIMIT, "segment_packing": "g-transformer", "constrained": True}


def direct_score(hub, src_sents, tgt_sents):
    """Log-probabilities of the last sentence's target tokens (</s> included) by one forward
    pass over the segment of all the sentences, built by hand."""
    d = hub.tgt_dict
    sep, eos = d.index("<sep>"), d.eos()

    def join(sents):
        return torch.tensor([x for s in sents[:-1] for x in s[:-1].tolist() + [sep]] + sents[-1].tolist())

    src, tgt = join(src_sents), join(tgt_sents)
    prev = torch.cat([tgt.new_tensor([eos]), tgt[:-1]])
    model = hub.models[0]  # in eval mode since the hub prepared it for inference
    with torch.no_grad():
        out = model(src[None], torch.tensor([len(src)]), prev[None])
        lp = model.get_normalized_probs(out, log_probs=True)[0].gather(-1, tgt[:, None]).squeeze(-1)
    n = tgt_sents[-1].numel()
    assert (tgt[-n:] == tgt_sents[-1]).all() and (len(tgt_sents) == 1 or tgt[-n - 1] == sep)
    return float(lp[-n:].sum()), float(lp.sum())


def toy_examples(n=6, context=(0, 1, 3, 9), seed=0):
    rng = np.random.RandomState(seed)

    def sent():
        return " ".join(f"w{w}" for w in rng.randint(0, 30, rng.randint(2, 7)))

    out = []
    for i in range(n):
        k = context[i % len(context)]
        src_ctx = [sent() for _ in range(k)]
        tgt_ctx = [s.upper() for s in src_ctx]
        cur = sent()
        out.append(ct.ContrastiveExample(cur, src_ctx, [ct.Candidate(cur.upper(), tgt_ctx),
                                                        ct.Candidate(sent().upper(), tgt_ctx)], where=f"ex{i}"))
    return out


@pytest.mark.parametrize("name", list(ARCHS))
def test_contrastive_score_is_the_current_sentence_in_the_segment(hubs, name):
    """Each candidate's score is the sum of its own tokens' log-probabilities in the segment of
    the context and the candidate; a context longer than the segment keeps the nearest
    sentences that fit (9 context sentences of up to 7 words do not fit in 48 tokens)."""
    hub = hubs[name]
    scorer = ModelScorer(hub, batch_size=5)
    examples = toy_examples()
    scores = ct.score_examples(scorer, examples)
    trimmed = 0
    for ex, sc in zip(examples, scores):
        src = [scorer.encode_source(s) for s in ex.source_context + [ex.source]]
        for c, got in zip(ex.candidates, sc):
            tgt = [scorer.encode_target(t) for t in c.target_context + [c.target]]
            keep = scorer.segment_context(src, tgt)
            assert sum(t.numel() for t in src[len(src) - 1 - keep:]) <= LIMIT
            trimmed += keep < len(src) - 1
            current, whole = direct_score(hub, src[len(src) - 1 - keep:], tgt[len(tgt) - 1 - keep:])
            assert math.isclose(got, current, rel_tol=1e-4, abs_tol=1e-4), (got, current)
            if keep:
                assert not math.isclose(got, whole, abs_tol=1e-3)
                alone = direct_score(hub, src[-1:], tgt[-1:])[0]
                assert not math.isclose(got, alone, abs_tol=1e-5), "the context changed nothing"
    assert trimmed > 0


def test_cxmi_of_a_segment_model(hubs, toy_bin):
    """CXMI on the toy test split: every sentence scored, with the previous sentences that fit
    in the segment as context against a one-sentence segment; the G-Transformer's combined
    layers read the context, so the log-likelihoods differ."""
    scorer = ModelScorer(hubs["g_transformer"])
    src, tgt, ids = cxmi.scorer_documents(scorer, "test")
    assert len(src) == len(ids) == len(set(ids)) > 1
    rep = cxmi.compute_cxmi(scorer, src, tgt)
    n_sents = sum(len(d) for d in src)
    assert rep["sentences"] == n_sents and rep["tokens"] == sum(t.numel() for d in tgt for t in d)
    assert rep["with_context"]["sentences"] == n_sents - len(src)
    assert rep["segment_tokens"] == LIMIT and rep["mean_context_sentences"] > 1
    assert all(math.isfinite(rep[k]) for k in ("cxmi", "cxmi_random", "true_vs_random"))
    assert rep["cxmi"] != 0.0 and rep["logprob_true_context"] != rep["logprob_no_context"]
    assert "segment model: context in segments of at most 48 tokens" in cxmi.format_report(rep)
    # the no-context score of a sentence is its score as a one-sentence segment
    one = scorer.score_documents([([src[0][0]], [tgt[0][0]])])[0].logprob
    assert math.isclose(one, direct_score(hubs["g_transformer"], [src[0][0]], [tgt[0][0]])[0], abs_tol=1e-4)
