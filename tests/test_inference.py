"""Document-order inference: fairseq-generate, the hub API and docctx-translate."""
import re

import pytest
import torch

from conftest import REPO, run, write_toy_documents
from fairseq_docctx.data.readers import read_file


@pytest.fixture(scope="module")
def hub(concat_both_ckpt, toy_bin):
    from fairseq_docctx.hub import from_pretrained

    return from_pretrained(concat_both_ckpt, data=str(toy_bin))


def toy_docs(lengths, seed=3):
    import random

    rng = random.Random(seed)
    return [[" ".join(rng.choice([f"w{i}" for i in range(30)]) for _ in range(rng.randint(2, 7)))
             for _ in range(n)] for n in lengths]


def test_generate_decodes_in_document_order_with_own_translations(toy_bin, concat_both_ckpt):
    p = run(["fairseq-generate", toy_bin, "--user-dir", REPO / "fairseq_docctx",
             "--task", "document_translation", "--context-size", "2", "--context-sides", "both",
             "--path", concat_both_ckpt, "--beam", "3", "--nbest", "2", "--max-tokens", "200",
             "--max-len-b", "12", "--scoring", "sacrebleu"])
    n = sum(int(l.split("\t")[1]) for l in (toy_bin / "test.src-tgt.docs").read_text().splitlines())
    ids = [int(m) for m in re.findall(r"^H-(\d+)\t", p.stdout, re.M)]
    assert sorted(set(ids)) == list(range(n)) and len(ids) == 2 * n  # --nbest 2, nothing lost
    assert re.search(r"BLEU = [\d.]+", p.stdout)


def test_outputs_complete_and_in_order_for_uneven_documents(hub):
    lengths = [1, 9, 1, 17, 3, 1, 6]
    docs = toy_docs(lengths)
    out = hub.translate_documents(docs, beam=2, batch_size=3, max_len_b=8)
    assert [len(d) for d in out] == lengths
    # each sentence's output is where it belongs: the same as translating its document alone
    for d, o in zip(docs, out):
        assert hub.translate_document(d, beam=2, max_len_b=8) == o
    assert hub.translate_documents([], beam=2) == []
    assert hub.translate_documents([[], docs[0]], beam=2, max_len_b=8) == [[], out[0]]


@pytest.mark.parametrize("beam", [1, 4])
def test_batching_and_beam_reordering_do_not_mix_contexts(hub, beam):
    """Decoding many documents side by side (beam search reorders the encoder output,
    the target prefix included) gives exactly what decoding each document alone gives."""
    docs = toy_docs([5, 4, 6, 2], seed=7)
    together = hub.generate_documents([[hub.encode(s) for s in d] for d in docs], beam=beam,
                                      batch_size=4, max_len_b=8)
    for d, hyps in zip(docs, together):
        alone = hub.generate_documents([[hub.encode(s) for s in d]], beam=beam, max_len_b=8)[0]
        for a, b in zip(hyps, alone):
            assert a[0]["tokens"].tolist() == b[0]["tokens"].tolist()
            torch.testing.assert_close(a[0]["score"], b[0]["score"], atol=1e-4, rtol=1e-4)


def test_changing_a_sentence_changes_only_its_documents_later_context(hub):
    seen = {}
    task = hub.task
    pad = hub.tgt_dict.pad()
    original = task.inference_step

    def spy(generator, models, sample, **kw):
        ctx = task.document_order.with_translations(sample)["net_input"]["context"]
        hypos = original(generator, models, sample, **kw)
        for b, i in enumerate(sample["id"].tolist()):
            rows = []
            for side in ("src", "tgt"):
                idx = ctx[side + "_index"][b]
                table = ctx[side + "_tokens"]
                rows.append(tuple(tuple(t for t in table[r].tolist() if t != pad) if r >= 0 else ()
                                  for r in idx.tolist()))
            seen[i] = (tuple(rows), hypos[b][0]["tokens"].tolist())
        return hypos

    task.inference_step = spy
    try:
        docs = toy_docs([5, 5], seed=11)
        hub.translate_documents(docs, beam=2, max_len_b=8)
        before = dict(seen)
        changed = [list(docs[0]), docs[1]]
        changed[0][1] = "w1 w2 w3 w4 w5 w6 w7 w8 w9"
        seen.clear()
        hub.translate_documents(changed, beam=2, max_len_b=8)
    finally:
        task.inference_step = original
    # document 0: sentence 1 changed -> the context of sentences 2 and 3 (K=2) changed
    for j in (2, 3):
        assert seen[j][0] != before[j][0]
    assert seen[0] == before[0]
    # document 1 (ids 5..9): nothing changed, neither context nor output
    for j in range(5, 10):
        assert seen[j] == before[j]


@pytest.mark.parametrize("fmt", [
    "docids", "xml",
    # the formats without document ids (~8 s each: make test-all; their readers and writers:
    # tests/test_readers.py)
    pytest.param("blank", marks=pytest.mark.slow), pytest.param("marker", marks=pytest.mark.slow)])
def test_docctx_translate_round_trips_each_format(fmt, tmp_path, toy_bin, concat_both_ckpt):
    docs = toy_docs([3, 1, 4], seed=5)
    src = tmp_path / "in.txt"
    if fmt == "docids":
        src.write_text("".join(s + "\n" for d in docs for s in d))
        (tmp_path / "in.docids").write_text("".join(f"talk{i}\n" for i, d in enumerate(docs) for _ in d))
    elif fmt == "blank":
        src.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    elif fmt == "marker":
        src.write_text("".join("<d>\r\n" + "".join(s + "\r\n" for s in d) for d in docs))
    else:
        src = tmp_path / "in.xml"
        src.write_text('<?xml version="1.0"?>\n<mteval><srcset setid="x" srclang="src">\n' + "".join(
            f'<doc docid="talk{i}"><talkid>{i}</talkid>\n'
            + "".join(f'<seg id="{10 * j + 1}"> {s} </seg>\n' for j, s in enumerate(d)) + "</doc>\n"
            for i, d in enumerate(docs)) + "</srcset></mteval>\n")
    out = tmp_path / ("out.xml" if fmt == "xml" else "out.txt")
    run(["docctx-translate", src, "--path", concat_both_ckpt, "--data", toy_bin, "--beam", "2",
         "--max-len-b", "6", "-o", out, "--quiet"])
    got, got_fmt = read_file(str(out), fmt, str(tmp_path / "out.docids"))
    want, _ = read_file(str(src), fmt, str(tmp_path / "in.docids"))
    assert got_fmt == fmt
    assert [len(d) for d in got] == [len(d) for d in want] == [3, 1, 4]
    if fmt in ("docids", "xml"):
        assert [d.doc_id for d in got] == [d.doc_id for d in want]
    if fmt == "xml":
        assert [d.seg_ids for d in got] == [d.seg_ids for d in want]


def test_docctx_translate_reads_stdin(toy_bin, concat_both_ckpt):
    import subprocess

    from conftest import venv_env

    p = subprocess.run(["docctx-translate", "--path", str(concat_both_ckpt), "--data", str(toy_bin),
                        "--beam", "1", "--max-len-b", "4", "--input-format", "blank", "--quiet"],
                       input="w1 w2\nw3\n\nw4 w5\n", capture_output=True, text=True, env=venv_env(),
                       check=True)
    docs = p.stdout.strip("\n").split("\n\n")
    assert [len(d.split("\n")) for d in docs] == [2, 1]


def test_docctx_translate_bad_input_names_file_and_line(tmp_path, toy_bin, concat_both_ckpt):
    bad = tmp_path / "bad.txt"
    bad.write_text("<d>\nw1 w2\n   \nw3\n")
    p = run(["docctx-translate", bad, "--path", concat_both_ckpt, "--data", toy_bin],
            check=False)
    assert p.returncode == 2
    assert f"{bad}:3:" in p.stderr and "Traceback" not in p.stderr


def test_model_cache_protocol_delivers_entries_of_context_sentences(hub):
    """A model that declares ``document_cache_entries`` gets back, for every batch, the
    entries it kept for the batch's context sentences (aligned with the target table),
    and the task forgets a sentence once it can no longer be context."""
    model, task = hub.models[0], hub.task
    received = []
    encoder_forward = model.encoder.forward

    def keep(sample, hypos):  # what a model would cache: here, its own sentence id
        return [{"id": i} for i in sample["id"].tolist()]

    def record(*args, context=None, **kw):
        if context is not None and "cache" in context:
            received.append((context["ids"].clone(), context["tgt_index"].clone(), list(context["cache"])))
        return encoder_forward(*args, context=context, **kw)

    model.document_cache_entries = keep
    model.encoder.forward = record
    try:
        docs = toy_docs([6, 3, 5], seed=2)
        hub.translate_documents(docs, beam=2, max_len_b=6)
    finally:
        del model.document_cache_entries
        model.encoder.forward = encoder_forward
    checked = 0
    for ids, index, cache in received:
        for b in range(ids.size(0)):
            for k in range(ids.size(1)):
                if ids[b, k] >= 0:
                    assert cache[index[b, k]] == {"id": int(ids[b, k])}
                    checked += 1
    assert checked == sum(max(0, n - 1) + max(0, n - 2) for n in (6, 3, 5))
    # memory is bounded: only the last K=2 sentences of each document are left
    assert len(task.document_order.translations) <= 2 * 3 and len(task.document_order.cache_entries) <= 2 * 3
