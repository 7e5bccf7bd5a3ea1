"""A document's translation does not depend on what is decoded beside it.

fairseq's generator ends every row of a batch at one length limit taken from the batch's
widest source; the task gives every row the limit of its own source instead
(``fairseq_docctx/tasks/length_limits.py``). With limits that bind (``--max-len-a 0.5
--max-len-b 2``: most hypotheses of the probe's models are cut), each model family's probe
model translates every document alone exactly as it translates them all together, at any
batch size, in two shards (what ``--processes 2`` runs), at beam 1 and 4; so do the command
lines (``fairseq-generate``, ``docctx-generate --processes 2``, ``docctx-translate
--processes 2``). The models are the context probe's session models (no training here).
"""
import os
import re

import pytest
import torch

from conftest import REPO, run, run_in_process

#: limits that cut most hypotheses of the probe's models, so that a batch limit shows
A, B = 0.5, 2
#: the first documents of the probe's test split decoded here (32 sentences)
DOCS = 6


def probe_documents(probe, split="test", n=DOCS):
    """The first ``n`` documents of a probe split, as lists of raw sentences."""
    with open(os.path.join(probe["text"], f"{split}.src"), encoding="utf-8") as f:
        src = f.read().splitlines()
    with open(os.path.join(probe["text"], f"{split}.docids"), encoding="utf-8") as f:
        ids = f.read().splitlines()
    docs, last = [], None
    for s, d in zip(src, ids):
        if d != last:
            if len(docs) == n:
                break
            docs.append([])
            last = d
        docs[-1].append(s)
    return docs


# ------------------------------------------------------------------ the search, one model
@pytest.fixture(scope="module")
def sentence_hub(probe, sentence_model):
    from fairseq_docctx.hub import from_pretrained

    return from_pretrained(sentence_model["checkpoint"], data=probe["data_bin"])


def _generate(hub, generator, sentences):
    """fairseq's hypotheses of ``sentences`` (token tensors), decoded as one batch, in the
    order of ``sentences`` (the collater sorts the batch by length)."""
    from fairseq.data import LanguagePairDataset

    ds = LanguagePairDataset(sentences, [len(s) for s in sentences], hub.src_dict, shuffle=False)
    sample = ds.collater([ds[i] for i in range(len(sentences))])
    with torch.no_grad():
        hypos = generator.generate(hub.models, sample)
    by_id = dict(zip(sample["id"].tolist(), hypos))
    return [by_id[i] for i in range(len(sentences))]


def _gen_args(hub, beam, **extra):
    import copy

    from omegaconf import open_dict

    args = copy.deepcopy(hub.cfg.generation)
    with open_dict(args):
        args.beam, args.max_len_a, args.max_len_b = beam, A, B
        for k, v in extra.items():
            setattr(args, k, v)
    return args


@pytest.mark.parametrize("search", [dict(beam=4), dict(beam=1), dict(beam=4, diverse_beam_groups=2),
                                    dict(beam=4, diversity_rate=0.5), dict(beam=4, match_source_len=True)],
                         ids=["beam4", "beam1", "diverse-beam", "diverse-siblings", "match-source-len"])
def test_a_row_gets_its_own_limit_alone_and_in_a_batch(sentence_hub, probe, search):
    """Each sentence decoded alone by the task's generator gives exactly what fairseq's own
    generator gives it alone (tokens and scores), and the same tokens in a batch of every
    sentence, where fairseq's own generator gives some another translation (its batch limit;
    its diverse beam search also reads one row's state for another); for every
    deterministic search strategy."""
    from fairseq.tasks.translation import TranslationTask

    from fairseq_docctx.tasks.length_limits import RowLengthLimit

    hub = sentence_hub
    sentences = [hub.encode(s) for d in probe_documents(probe, n=5) for s in d][:30]
    args = _gen_args(hub, **search)
    ours = hub.task.build_generator(hub.models, args)
    theirs = TranslationTask.build_generator(hub.task, hub.models, args)  # fairseq's, unchanged
    assert isinstance(ours.search, RowLengthLimit) and not isinstance(theirs.search, RowLengthLimit)
    batched, theirs_batched = _generate(hub, ours, sentences), _generate(hub, theirs, sentences)
    differ = 0
    for i, s in enumerate(sentences):
        alone, fairseq_alone = _generate(hub, ours, [s])[0], _generate(hub, theirs, [s])[0]
        assert [h["tokens"].tolist() for h in alone] == [h["tokens"].tolist() for h in fairseq_alone]
        assert [float(h["score"]) for h in alone] == [float(h["score"]) for h in fairseq_alone]
        assert [h["tokens"].tolist() for h in batched[i]] == [h["tokens"].tolist() for h in alone]
        differ += theirs_batched[i][0]["tokens"].tolist() != alone[0]["tokens"].tolist()
    if not args.match_source_len:  # fairseq's --match-source-len already ends each row at its own length
        assert differ >= 3  # the limits bind: fairseq's batch gives these sentences other translations


def test_limits_below_min_len_or_a_prefix_are_refused(sentence_hub, probe):
    """A sentence whose own limit is below ``--min-len`` is refused (fairseq refuses it
    alone), and so is a prefix (``--prefix-size``) longer than its sentence's limit."""
    hub = sentence_hub
    short, long = hub.encode("it is red ."), hub.encode(" ".join(["my friend bought a red flower ."] * 3))
    gen = hub.task.build_generator(hub.models, _gen_args(hub, beam=2, max_len_a=0.5, max_len_b=0, min_len=4))
    with pytest.raises(ValueError, match=r"--min-len 4 is above the length limit of a sentence of 5 source"):
        _generate(hub, gen, [short, long])
    gen = hub.task.build_generator(hub.models, _gen_args(hub, beam=2))
    from fairseq.data import LanguagePairDataset

    ds = LanguagePairDataset([short], [len(short)], hub.src_dict, [long], [len(long)], hub.tgt_dict, shuffle=False)
    sample = ds.collater([ds[0]])
    with pytest.raises(ValueError, match=r"--prefix-size: the prefix of sentence 0 has 5 tokens, more than its "
                                         r"length limit of 4"):
        hub.task.inference_step(gen, hub.models, sample, prefix_tokens=sample["target"][:, :5])


# ------------------------------------------------------------------ every family, the hub
def _shards(hub, docs, **kw):
    """What ``--processes 2`` does: each shard's documents translated on their own."""
    from fairseq_docctx.inference.translate import shard_documents

    out = [None] * len(docs)
    for i in range(2):
        mine = shard_documents([len(d) for d in docs], 2, i)
        for k, t in zip(mine, hub.translate_documents([docs[k] for k in mine], **kw)):
            out[k] = t
    return out


def documents_alone_equal_the_file(probe, family, checkpoint, **overrides):
    """The first :data:`DOCS` test documents, each translated alone through the hub, equal
    them all translated together at batch sizes 1, 16 and 64 and in two shards, at beam 1
    and 4, byte for byte."""
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(checkpoint, data=probe["data_bin"], **overrides)
    docs = probe_documents(probe)
    for beam in (1, 4):
        kw = dict(beam=beam, max_len_a=A, max_len_b=B)
        alone = [hub.translate_documents([d], **kw)[0] for d in docs]
        runs = {f"--batch-size {n}": hub.translate_documents(docs, batch_size=n, **kw) for n in (1, 16, 64)}
        runs["2 shards"] = _shards(hub, docs, **kw)
        for name, out in runs.items():
            differ = sum(a != b for x, y in zip(alone, out) for a, b in zip(x, y))
            assert out == alone, f"{family}, beam {beam}, {name}: {differ} sentences differ from their documents alone"


def test_concat_transformer_with_target_context(probe, concat_model):
    documents_alone_equal_the_file(probe, "concat_transformer", concat_model["checkpoint"])


def test_han_decoder(probe, han_decoder_model):
    documents_alone_equal_the_file(probe, "han_decoder", han_decoder_model["checkpoint"])


def test_mht_transformer_with_drafts_made_on_the_fly(probe, mht_model, sentence_model):
    documents_alone_equal_the_file(probe, "mht_transformer", mht_model["checkpoint"],
                                   draft_path=sentence_model["checkpoint"])


def test_hrnn_context(hrnn_model):
    """(On the probe hrnn_context trains on: short sentences, distractors.)"""
    documents_alone_equal_the_file(hrnn_model["probe"], "hrnn_context", hrnn_model["checkpoint"])


def test_g_transformer_without_length_windows(probe, g_model):
    """The segment's own limit binds (no sentence windows to raise it)."""
    documents_alone_equal_the_file(probe, "g_transformer", g_model["checkpoint"], no_sentence_length_window=True)


# ------------------------------------------------------------------ the command lines
def _hypotheses(text):
    return dict(re.findall(r"^H-(\d+)\t[^\t]*\t(.*)$", text, re.M))


def test_generate_at_any_batch_size_and_in_two_processes(probe, concat_model, capsys):
    """``fairseq-generate --batch-size 1`` (on the documents of one of 5 shards, for time)
    prints the hypotheses ``docctx-generate --processes 2`` prints with ``--batch-size 64``
    (concat_transformer, document order, beam 4, the probe's valid split)."""
    from fairseq_docctx.cli.generate import cli_main

    args = [probe["data_bin"], "--user-dir", str(REPO / "fairseq_docctx"), "--task", "document_translation",
            "--path", concat_model["checkpoint"], "--gen-subset", "valid", "--beam", "4", "--max-len-a", str(A),
            "--max-len-b", str(B), "--required-batch-size-multiple", "1", "--cpu", "--num-workers", "0"]
    one = _hypotheses(run(["fairseq-generate", *args, "--batch-size", "1", "--num-shards", "5",
                           "--shard-id", "0"]).stdout)
    code, out, err = run_in_process(cli_main, ["--processes", "2", "--", *args, "--batch-size", "64"], capsys)
    assert code == 0, err
    two = _hypotheses(out)
    assert len(two) == sum(1 for _ in open(os.path.join(probe["text"], "valid.src"))) and len(one) > 40
    differ = sum(one[i] != two[i] for i in one)
    assert differ == 0, f"{differ} of {len(one)} sentences differ between --batch-size 1 and 64 in 2 processes"


@pytest.mark.slow  # ~20 s; the 2 shards of the g_transformer test above decode as its processes do
def test_translate_a_segment_model_in_two_processes(probe, g_model, tmp_path, capsys):
    """``docctx-translate --processes 2`` gives a segment model's single-process output (its
    segments' limits bind: no length window)."""
    from fairseq_docctx.cli.translate import cli_main

    src = tmp_path / "in.txt"
    docs = probe_documents(probe, "valid", n=20)
    src.write_text("".join(s + "\n" for d in docs for s in d))
    (tmp_path / "in.docids").write_text("".join(f"d{i}\n" for i, d in enumerate(docs) for _ in d))
    common = [src, "--path", g_model["checkpoint"], "--data", probe["data_bin"], "--beam", "4",
              "--max-len-a", str(A), "--max-len-b", str(B), "--no-sentence-length-window", "--cpu", "--quiet"]
    code, _, err = run_in_process(cli_main, common + ["-o", tmp_path / "one.txt"], capsys)
    assert code == 0, err
    code, _, err = run_in_process(cli_main, common + ["--processes", "2", "-o", tmp_path / "two.txt"], capsys)
    assert code == 0, err
    one, two = (tmp_path / "one.txt").read_text().splitlines(), (tmp_path / "two.txt").read_text().splitlines()
    differ = sum(a != b for a, b in zip(one, two))
    assert one == two, f"{differ} of {len(one)} sentences differ between 1 and 2 processes"
