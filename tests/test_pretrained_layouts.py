"""The ``transformer`` family as people share a sentence-level fairseq ``transformer``:
``model.pt``, ``dict.en.txt``, ``dict.de.txt`` and the segmentation it was trained with — a
SentencePiece model under any name, subword-nmt codes, fastBPE codes, or none (pre-tokenized
text). Tiny releases made with fairseq's, SentencePiece's and subword-nmt's own code
(``examples/lib/tiny_release.py``) go through ``docctx-prepare --pretrained`` (the segmentation
found in the folder, recorded in ``docctx.json``) -> ``fairseq-train --init-from-pretrained``
(``concat_transformer``, 2 updates) -> ``fairseq-generate``: the data's ids are the release
dictionary's ids of the release's own segmentation, the model starts from the release's
weights, decoding gives plain text. Then the choice of the segmentation file from the folder
(and its refusals), the names of the NLLB download, and a record of before (kind ``bpe``)."""
import json
import re
import shutil

import pytest
import torch

from conftest import REPO, run
from test_pretrained_data import _refused, corpus  # noqa: F401  (corpus: a fixture)
from test_pretrained_init import build

from examples.lib.tiny_release import bpe_release, sp_release, subword_nmt_release, transformer_release

USER_DIR = REPO / "fairseq_docctx"
#: segmentation of the tiny release -> (the record's kind, the copy in the data folder, tokenizer)
KINDS = {"sentencepiece": ("sentencepiece", "spm.model", None), "subword_nmt": ("subword_nmt", "bpecodes", "moses"),
         "fastbpe": ("fastbpe", "bpecodes", "moses"), "none": ("none", None, None)}
RELEASE_FILE = {"sentencepiece": "sentencepiece.bpe.model", "subword_nmt": "bpecodes", "fastbpe": "bpecodes",
                "none": None}
TRAIN = ["--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1000", "--cpu", "--num-workers", "0",
         "--no-epoch-checkpoints", "--no-save-optimizer-state", "--disable-validation", "--seed", "1"]


def _prepare(corpus, release, dest, *extra):  # noqa: F811
    from fairseq_docctx.cli.prepare import main

    raw, _ = corpus
    return main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                 "--testpref", str(raw / "valid"), "--destdir", str(dest), "--pretrained", str(release), *extra])


class _Lazy(dict):
    """One release, data folder and document model per layout, made when first asked for."""

    def __init__(self, make):
        super().__init__()
        self.make = make

    def __missing__(self, key):
        value = self[key] = self.make(key)
        return value


@pytest.fixture(scope="module")
def layouts(corpus, tmp_path_factory):  # noqa: F811
    """{segmentation: (release dir, segment(text, lang) of the release, data folder, the
    document model's checkpoint, fairseq-train's output)}."""
    root = tmp_path_factory.mktemp("layouts")
    _, text = corpus

    def make(seg):
        release, segment = transformer_release(root / f"release-{seg}", list(zip(text["train"]["en"],
                                                                                  text["train"]["de"])), seg, updates=5)
        data = root / f"bin-{seg}"
        _prepare(corpus, release, data)
        save = root / f"doc-{seg}"
        p = run(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "document_translation", "--arch",
                 "concat_transformer", "--context-size", "1", "--init-from-pretrained", release / "model.pt",
                 *TRAIN, "--max-update", "2", "--save-dir", save])
        return release, segment, data, save / "checkpoint_last.pt", p.stdout

    return _Lazy(make)


def _undone(raw, lang, tokenizer):
    """``raw`` once its segmentation is undone: itself, or after Moses (fairseq's) tokenized and
    detokenized it (``rock&roll`` comes back ``rock & roll``)."""
    from fairseq_docctx.data.pretrained import moses

    return moses(lang).decode(moses(lang).encode(raw)) if tokenizer == "moses" else raw


def _plain(line):
    return not any(x in line for x in ("@@", "\u2581", "&apos;", "&quot;", "&amp;", "@-@"))


@pytest.mark.parametrize("seg", ["sentencepiece", pytest.param("subword_nmt", marks=pytest.mark.slow),
                                 pytest.param("fastbpe", marks=pytest.mark.slow), pytest.param("none", marks=pytest.mark.slow)])
def test_release_to_decoding(seg, layouts, corpus):  # noqa: F811
    from fairseq.data import Dictionary, data_utils

    from fairseq_docctx.data.pretrained import PretrainedText

    release, segment, data, ckpt, train_out = layouts[seg]
    _, text = corpus
    kind, copy, tokenizer = KINDS[seg]
    rec = json.loads((data / "docctx.json").read_text())["pretrained"]
    assert rec["family"] == "transformer" and rec["tokenizer"] == tokenizer
    assert rec["segmentation"] == {"kind": kind, "file": copy,
                                   "release_file": RELEASE_FILE[seg] and str(release / RELEASE_FILE[seg])}
    if copy:
        assert (data / copy).read_bytes() == (release / RELEASE_FILE[seg]).read_bytes()

    # the ids: the release dictionary's ids of the release's own pieces (fairseq's encoders), + <sep>
    model_dict = Dictionary.load(str(release / "dict.en.txt"))
    pieces = PretrainedText.of_data(str(data))
    for lang in ("en", "de"):
        d = Dictionary.load(str(data / f"dict.{lang}.txt"))
        assert d.symbols == model_dict.symbols + ["<sep>"] and rec["model_symbols"][lang] == len(model_dict)
        for split in ("train", "valid"):
            ds = data_utils.load_indexed_dataset(str(data / f"{split}.en-de.{lang}"), d, "mmap")
            assert len(ds) == len(text[split][lang])
            for k, raw in enumerate(text[split][lang]):
                assert ds[k].tolist() == [model_dict.index(p) for p in segment(raw, lang).split()] + [d.eos()], \
                    (split, lang, raw)
                assert pieces.encode(raw, lang) == segment(raw, lang)  # inference reads raw text the same way
                if d.unk() not in ds[k].tolist():
                    assert pieces.decode(pieces.encode(raw, lang), lang) == _undone(raw, lang, tokenizer)

    # the model starts from the release's weights (all of them; the separator's row is new)
    weights = torch.load(release / "model.pt", weights_only=False)["model"]
    _, _, model = build(data, "concat_transformer", "--context-size", "1", "--init-from-pretrained",
                        release / "model.pt")
    own = model.state_dict()
    assert all(torch.equal(own[k][: v.shape[0]], v) for k, v in weights.items())
    assert own["encoder.embed_tokens.weight"].shape[0] == len(model_dict) + 1
    rows = len(model_dict)
    assert f"rows 0..{rows - 1} from the checkpoint, 1 new: <sep>" in train_out and ", 0 left out" in train_out
    assert "was not prepared with docctx-prepare --pretrained" not in train_out

    # fairseq-generate: every sentence once, the segmentation (and Moses) undone in D- and T- lines
    p = run(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "document_translation", "--path", ckpt,
             "--gen-subset", "test", "--beam", "2", "--max-len-b", "20", "--required-batch-size-multiple", "1",
             "--cpu", "--num-workers", "0"])
    lines = {kind: {int(m.group(1)): m.group(2).split("\t")[-1]
                    for m in re.finditer(rf"^{kind}-(\d+)\t(.*)$", p.stdout, re.M)} for kind in "TD"}
    n = len(text["valid"]["de"])
    assert sorted(lines["D"]) == sorted(lines["T"]) == list(range(n))
    assert all(_plain(x) for x in lines["D"].values()), lines["D"]
    d = Dictionary.load(str(data / "dict.de.txt"))
    ds = data_utils.load_indexed_dataset(str(data / "valid.en-de.de"), d, "mmap")
    known = [i for i in range(n) if d.unk() not in ds[i].tolist()]
    assert len(known) >= n // 2
    refs = {i: _undone(text["valid"]["de"][i], "de", tokenizer) for i in known}
    assert all(lines["T"][i] == refs[i] for i in known), [(lines["T"][i], refs[i]) for i in known]


def _releases_without_checkpoints(corpus, root):  # noqa: F811
    """The three files of each segmentation of a transformer release (no checkpoint: prepare
    does not read it)."""
    _, text = corpus
    tr = {lang: text["train"][lang] for lang in ("en", "de")}
    sp, _ = sp_release(root / "sp", tr["en"] + tr["de"], "transformer", vocab_size=200, hard_vocab_limit=False,
                       names=("ende.spm.model", ["dict.en.txt", "dict.de.txt"]))
    snmt, _ = subword_nmt_release(root / "snmt", tr, tr, codes_name="code")
    fast, _ = bpe_release(root / "fast", tr, tr, joined=True)
    return sp, snmt, fast


def test_segmentation_found_in_the_folder(corpus, tmp_path, capsys):  # noqa: F811
    """A SentencePiece model under any ``*.model`` name, subword-nmt codes named ``code``,
    fastBPE codes, no file (``none``, said in one line), ``--pretrained-segmentation`` naming
    one of several files (or ``none``); several different files without it, a file that is
    not there, ``none`` for a SentencePiece family and malformed codes: one line each."""
    sp, snmt, fast = _releases_without_checkpoints(corpus, tmp_path)
    raw, _ = corpus
    for release, kind, name in ((sp, "sentencepiece", "ende.spm.model"), (snmt, "subword_nmt", "code"),
                                (fast, "fastbpe", "bpecodes")):
        seg = _prepare(corpus, release, tmp_path / f"bin-{kind}")["pretrained"]["segmentation"]
        assert (seg["kind"], seg["release_file"]) == (kind, str(release / name))
    capsys.readouterr()

    bare = tmp_path / "bare"  # dictionaries only: pre-tokenized text
    bare.mkdir()
    for lang in ("en", "de"):
        shutil.copy(fast / f"dict.{lang}.txt", bare)
    rec = _prepare(corpus, bare, tmp_path / "bin-none")["pretrained"]
    out = capsys.readouterr().out
    assert rec["segmentation"] == {"kind": "none", "file": None, "release_file": None} and rec["tokenizer"] is None
    assert out.count("docctx-prepare: the release has no segmentation file: the text is used as it is "
                     "(pre-tokenized)\n") == 1
    (bare / "merges.txt").write_text("#version: 0.2\n")  # GPT-2's BPE: not pre-tokenized text
    _refused(capsys, ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "no"),
                      "--pretrained", str(bare)], f"{bare / 'merges.txt'}: GPT-2 byte-level BPE is not read here: "
             "give --pretrained-segmentation none if the text is pre-tokenized as the model's was")

    both = tmp_path / "both"  # a SentencePiece model and BPE codes: which one is the release's?
    shutil.copytree(sp, both)
    shutil.copy(snmt / "code", both)
    base = ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "no")]
    err = _refused(capsys, base + ["--pretrained", str(both)], "several segmentation files")
    assert err == (f"docctx-prepare: error: {both}: several segmentation files (code, ende.spm.model): name the "
                   "release's with --pretrained-segmentation FILE (a SentencePiece model or BPE codes, or none)")
    for given, kind in (("code", "subword_nmt"), (str(both / "ende.spm.model"), "sentencepiece"), ("none", "none")):
        seg = _prepare(corpus, both, tmp_path / f"bin-both-{kind}", "--pretrained-segmentation", given)
        assert seg["pretrained"]["segmentation"]["kind"] == kind
    twice = tmp_path / "twice"  # the same model under two names counts as one
    shutil.copytree(sp, twice)
    shutil.copy(sp / "ende.spm.model", twice / "sentencepiece.bpe.model")
    assert _prepare(corpus, twice, tmp_path / "bin-twice")["pretrained"]["segmentation"]["kind"] == "sentencepiece"

    bad = tmp_path / "bad"
    shutil.copytree(snmt, bad)
    with open(bad / "code", "a") as f:
        f.write("a b 3\n")
    for extra, what in [
        (["--pretrained", str(both), "--pretrained-segmentation", "nothing.model"],
         f"--pretrained-segmentation nothing.model: no such file (nor {both / 'nothing.model'})"),
        (["--pretrained-segmentation", "none"], "--pretrained-segmentation needs --pretrained DIR"),
        (["--pretrained", str(bad)], f"{bad / 'code'}:{len((bad / 'code').read_text().splitlines())}: not a BPE "
                                     "merge (expected 'LEFT RIGHT' (subword-nmt))"),
    ]:
        _refused(capsys, base + extra, what)

    m2m, _ = sp_release(tmp_path / "m2m", [s for lang in ("en", "de") for s in corpus[1]["train"][lang]], "m2m100")
    _refused(capsys, base + ["--pretrained", str(m2m), "--pretrained-segmentation", "none"],
             "--pretrained-segmentation none: the m2m100 family segments with SentencePiece")
    assert not (tmp_path / "no").exists()


def test_nllb_as_its_readme_downloads_it(corpus, tmp_path, capsys):  # noqa: F811
    """fairseq's NLLB README downloads SPM-200 as flores200_sacrebleu_tokenizer_spm.model beside
    dictionary.txt: detected and read; without a SentencePiece model, one line names both names."""
    _, text = corpus
    nllb, _ = sp_release(tmp_path / "nllb", [s for lang in ("en", "de") for s in text["train"][lang]], "nllb")
    (nllb / "sentencepiece.bpe.model").rename(nllb / "flores200_sacrebleu_tokenizer_spm.model")
    rec = _prepare(corpus, nllb, tmp_path / "bin", "--pretrained-langs", "eng_Latn,deu_Latn")["pretrained"]
    assert rec["family"] == "nllb"
    assert rec["segmentation"]["release_file"] == str(nllb / "flores200_sacrebleu_tokenizer_spm.model")
    (nllb / "flores200_sacrebleu_tokenizer_spm.model").unlink()
    raw, _ = corpus
    _refused(capsys, ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "no"),
                      "--pretrained", str(nllb), "--pretrained-langs", "eng_Latn,deu_Latn"],
             f"{nllb / 'flores200_sacrebleu_tokenizer_spm.model'}: missing (SPM-200, the SentencePiece model of "
             "NLLB-200: flores200_sacrebleu_tokenizer_spm.model as fairseq's NLLB README downloads it, or "
             "sentencepiece.bpe.model; or give --pretrained-segmentation FILE)")


def test_record_written_before_reads_as_before(corpus, tmp_path):  # noqa: F811
    """A data folder of the WMT19 layout prepared before the segmentation kinds had their
    names (``segmentation.kind`` ``bpe``, tokenizer ``moses``, no ``release_file``) reads and
    writes text as a folder prepared now does (Moses + fastBPE)."""
    from fairseq_docctx.data.pretrained import PretrainedText

    _, _, fast = _releases_without_checkpoints(corpus, tmp_path)
    data = tmp_path / "bin"
    _prepare(corpus, fast, data)
    now = PretrainedText.of_data(str(data))
    manifest = json.loads((data / "docctx.json").read_text())
    manifest["pretrained"]["segmentation"] = {"kind": "bpe", "file": "bpecodes"}
    (data / "docctx.json").write_text(json.dumps(manifest))
    before = PretrainedText.of_data(str(data))
    assert before.kind == "fastbpe" and before.moses
    sents = corpus[1]["valid"]["en"]
    assert [before.encode(x, "en") for x in sents] == [now.encode(x, "en") for x in sents]
    assert sum("@@" in before.encode(x, "en") and "&quot;" in before.encode(x, "en") for x in sents) > 0
    assert [before.decode(before.encode(x, "en"), "en") for x in sents] == [_undone(x, "en", "moses") for x in sents]
