"""A Hugging Face transformers folder through the real command lines, per family (marian,
m2m100, nllb, mbart50, mbart25, fsmt; tests/hf_fixtures.py: the family's own tokenizer, a
tiny model of its config class with spread random weights): ``docctx-prepare --pretrained
DIR`` on the first talk of Maruf et al.'s IWSLT17 TED test split (../shared/data), then

* ``fairseq-train --init-from-pretrained DIR`` at K=0 for one update at learning rate 0 (the
  checkpoint holds the folder's weights) and ``fairseq-generate --beam 1`` from it: every
  hypothesis is transformers' ``generate(num_beams=1, do_sample=False)`` on the same
  sentence, token for token, with the family's conventions (the source language set on the
  tokenizer; ``forced_bos_token_id`` the target language token for M2M-100, NLLB-200 and
  mBART-50; mBART-25's decoder start the target language token; Marian's the pad) and the
  same limits (fairseq's ``--max-len-b N``: N tokens, then ``</s>``; ``--min-len 1`` ->
  ``min_new_tokens=1``; fairseq never selects ``<pad>``). The separator the data adds never
  appears: its new rows start as the average of the checkpoint's (models/pretrained_init.py,
  ``grow``);
* a ``concat_transformer`` with source and target context (K=1) started from the folder
  trains two updates and ``fairseq-generate`` decodes every test sentence, in document
  order, the references given back as the folder's tokenizer decodes them.
"""
import re

import pytest
import torch

from conftest import REPO, run
from hf_fixtures import FAMILIES, IWSLT17, make_random_folder

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(not IWSLT17.is_dir(), reason=f"needs the shared corpora at {IWSLT17}")

#: family -> (--pretrained-langs, the tokenizer's source and target codes, placement)
LANGS = {
    "marian": (None, None, None, None),
    "m2m100": (None, "en", "de", "prepend"),
    "nllb": ("eng_Latn,deu_Latn", "eng_Latn", "deu_Latn", "prepend"),
    "mbart50": (None, "en_XX", "de_DE", "prepend"),
    "mbart25": (None, "en_XX", "de_DE", "bart"),
    "fsmt": (None, None, None, None),
}
#: M2M-100's language tokens (its codes are plain ``en``/``de``)
LANGTOK = {"en": "__en__", "de": "__de__"}
#: the sentences of each of the two test documents (the first of two TED talks)
TALK = 8
#: fairseq's --max-len-b: at most this many tokens, then </s>
MAX_LEN = 12
COMMON = ["--user-dir", REPO / "fairseq_docctx", "--task", "document_translation", "--cpu", "--num-workers", "0"]
TRAIN = [*COMMON, "--arch", "concat_transformer", "--optimizer", "adam", "--max-tokens", "4000",
         "--no-epoch-checkpoints", "--no-save-optimizer-state", "--disable-validation", "--seed", "1"]


def generate_lines(stdout):
    """fairseq-generate's ``{kind: {id: fields after the id}}`` for the T, H and P lines."""
    return {kind: {int(m.group(1)): m.group(2).split("\t") for m in re.finditer(rf"^{kind}-(\d+)\t(.*)$", stdout, re.M)}
            for kind in "THP"}


#: the families whose pipeline runs in ``make test``: none, every family's under ``make
#: test-all`` (``slow``, ~35 s each); in ``make test`` tests/test_hf_import.py checks every
#: family's logits and greedy search in the test's process, tests/test_hf_prepare.py the data
#: of a transformers folder, tests/test_pretrained_infer.py M2M-100's language tokens through
#: the command lines (from a fairseq release)
FAST = ()


@pytest.fixture(scope="module", params=[f if f in FAST else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES])
def pipeline(request, tmp_path_factory):
    """A family's folder, its data (docctx-prepare --pretrained, the first TED talk as train
    and test), the two checkpoints (K=0 at learning rate 0; K=1 both sides, two updates) and
    fairseq-generate's output of each."""
    from fairseq_docctx.cli.prepare import main
    from fairseq_docctx.data.readers import read_parallel

    family = request.param
    langs = LANGS[family][0]
    root = tmp_path_factory.mktemp(family)
    # 1024 positions: a context model reads two TED sentences of a tiny vocabulary's pieces
    folder, hf = make_random_folder(root, family, options={"max_position_embeddings": 1024})
    for lang in ("en", "de"):  # two documents: the first sentences of the first two talks, CRLF as the files are
        talks = (IWSLT17 / f"concatenated_en2de_test_{lang}.txt").read_bytes().split(b"<d>")[1:3]
        (root / f"test.{lang}").write_bytes(b"".join(b"<d>" + b"\r\n".join(t.split(b"\r\n")[:TALK + 1]) + b"\r\n"
                                                     for t in talks))
    pd = read_parallel(str(root / "test"), "en", "de")
    text = {"en": [s for d in pd.src for s in d.sentences], "de": [s for d in pd.tgt for s in d.sentences]}
    assert len(pd.src) == 2 and len(text["en"]) == len(text["de"]) == 2 * TALK
    data, k0, k1 = root / "bin", root / "k0", root / "k1"
    main(["-s", "en", "-t", "de", "--trainpref", str(root / "test"), "--testpref", str(root / "test"),
          "--destdir", str(data), "--pretrained", str(folder), *(["--pretrained-langs", langs] if langs else [])])
    start = ["--init-from-pretrained", folder]
    run(["fairseq-train", data, *TRAIN, *start, "--context-size", "0", "--lr", "0", "--max-update", "1",
         "--save-dir", k0])
    run(["fairseq-train", data, *TRAIN, *start, "--context-size", "1", "--context-sides", "both", "--lr", "1e-3",
         "--max-update", "2", "--save-dir", k1])
    gen = ["fairseq-generate", data, *COMMON, "--gen-subset", "test", "--beam", "1", "--max-len-a", "0",
           "--max-len-b", str(MAX_LEN), "--batch-size", "64"]
    outs = [run([*gen, "--path", k / "checkpoint_last.pt"]).stdout for k in (k0, k1)]
    return {"family": family, "folder": folder, "hf": hf, "data": data, "text": text, "k0": k0,
            "gen": {0: generate_lines(outs[0]), 1: generate_lines(outs[1])}}


def hf_generate(p):
    """transformers' greedy translations of the test sentences (ids of the folder, the
    decoder start left out), with the family's conventions and fairseq's limits."""
    from transformers import AutoTokenizer, GenerationConfig

    family, hf = p["family"], p["hf"]
    _, src, tgt, placement = LANGS[family]
    tok = AutoTokenizer.from_pretrained(str(p["folder"]))
    if src:
        tok.src_lang, tok.tgt_lang = src, tgt
    cfg = hf.config
    eos, pad = cfg.eos_token_id, cfg.pad_token_id
    tgt_tok = tgt and tok.convert_tokens_to_ids(LANGTOK.get(tgt, tgt))
    gc = GenerationConfig(num_beams=1, do_sample=False, max_new_tokens=MAX_LEN + 1, min_new_tokens=1,
                          eos_token_id=eos, pad_token_id=pad, forced_eos_token_id=eos, bad_words_ids=[[pad]],
                          decoder_start_token_id=tgt_tok if placement == "bart" else cfg.decoder_start_token_id,
                          forced_bos_token_id=tgt_tok if placement == "prepend" else None)
    enc = tok(p["text"]["en"], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf.generate(**enc, generation_config=gc)
    hyps = []
    for row in out[:, 1:].tolist():
        hyps.append(row[: row.index(eos) + 1] if eos in row else row)
    return hyps, tgt_tok


def test_generate_equals_transformers(pipeline):
    """fairseq-generate --beam 1 from the K=0 checkpoint of ``--init-from-pretrained DIR`` gives
    transformers' ``generate(num_beams=1)`` on every test sentence, token for token (the H- line's
    symbols, which leave out ``<s>``, ``</s>`` and the target language token, and as many
    positional scores as transformers' tokens); the checkpoint holds the folder's weights."""
    from fairseq.data import Dictionary

    from fairseq_docctx.data.hf_folder import folder_vocabularies
    from fairseq_docctx.models import hf_import

    p = pipeline
    ckpt = torch.load(p["k0"] / "checkpoint_last.pt", weights_only=False)["model"]
    weights, _, _ = hf_import.read_folder(str(p["folder"]))
    for k, v in weights.items():
        assert torch.equal(ckpt[k][: v.shape[0]], v), k
    td = Dictionary.load(str(p["data"] / "dict.de.txt"))
    sep = td.index("<sep>")
    assert sep >= len(folder_vocabularies(str(p["folder"]))["target"].symbols)  # a symbol the data added
    table = ckpt["decoder.embed_tokens.weight"]
    torch.testing.assert_close(table[sep], table[:sep].mean(0))  # grown as the average row

    vocab = folder_vocabularies(str(p["folder"]))["target"]
    theirs, tgt_tok = hf_generate(p)
    lines = p["gen"][0]
    n = len(p["text"]["de"])
    assert sorted(lines["H"]) == list(range(n))
    strip = {td.bos(), td.eos()} | ({vocab.fairseq_ids([tgt_tok])[0]} if tgt_tok is not None else set())
    lengths = []
    for i in range(n):
        want = vocab.fairseq_ids(theirs[i])
        got = [td.index(s) for s in lines["H"][i][-1].split()]
        assert got == [t for t in want if t not in strip], (i, got, want)
        assert len(lines["P"][i][-1].split()) == len(want), i
        assert sep not in want and td.bos() not in want  # no <s> either: the H- symbols are all the tokens
        lengths.append(len(want))
    assert max(lengths) > 3 and len({tuple(x) for x in theirs}) > 1  # not all empty, not all the same


def test_a_context_model_trains_and_decodes_every_sentence(pipeline):
    """The concat_transformer with source and target context (K=1) started from the folder:
    every test sentence decoded once, in document order (the T- lines are the references
    the folder's tokenizer decodes, in corpus order), no target language token in the output."""
    from transformers import AutoTokenizer

    p = pipeline
    _, src, tgt, placement = LANGS[p["family"]]
    lines = p["gen"][1]
    n = len(p["text"]["de"])
    assert sorted(lines["H"]) == sorted(lines["T"]) == list(range(n))
    tok = AutoTokenizer.from_pretrained(str(p["folder"]))
    if p["family"] == "fsmt":  # FSMTTokenizer has no target mode (docs/pretrained.md): no reference to make
        assert all(lines["T"][i][-1] and "@@" not in lines["T"][i][-1] for i in range(n))
        return
    if tgt:
        tok.tgt_lang = tgt
    # the references as the tokenizer decodes them, the target language token left out
    # (M2M100Tokenizer's decode keeps its language tokens)
    tgt_tok = tgt and tok.convert_tokens_to_ids(LANGTOK.get(tgt, tgt))
    refs = [tok.decode([t for t in x if t != tgt_tok], skip_special_tokens=True)
            for x in tok(text_target=p["text"]["de"]).input_ids]
    assert [lines["T"][i][-1] for i in range(n)] == refs
    if placement:
        assert not any(LANGTOK.get(tgt, tgt) in h[-1].split() for h in lines["H"].values())
