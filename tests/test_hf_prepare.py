"""docctx-prepare --pretrained DIR with a Hugging Face transformers folder (tests/hf_fixtures.py:
a tiny folder per family, its tokenizer made from its own files): the binarized ids of real TED
sentences (../shared/data) are the folder's own tokenizer's (``AutoTokenizer``, ``src_lang`` /
``tgt_lang`` set, ``text_target`` for the target), through Marian's renumbering; the language
tokens are where the tokenizer puts them, written into the data (``prepend``) or placed by the
task (``bart``); the dictionaries have the model's rows; inference reads and writes text with the
data folder's copy of the tokenizer; one-line refusals. (Training and decoding on this data, from
the folder: tests/test_hf_pipeline.py.)"""
import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch

from conftest import run
from hf_fixtures import IWSLT17, make_hf_folder
from fairseq_docctx.cli.prepare import main
from fairseq_docctx.data.manifest import MANIFEST_NAME

pytestmark = pytest.mark.skipif(not IWSLT17.is_dir(), reason=f"needs the shared corpora at {IWSLT17}")

#: case -> (family, separate vocabularies, --pretrained-langs, placement, tokenizer's language codes)
CASES = {
    "marian": ("marian", False, None, None, (None, None)),
    "marian-separate": ("marian", True, None, None, (None, None)),
    "m2m100": ("m2m100", False, None, "prepend", ("en", "de")),
    "nllb": ("nllb", False, "eng_Latn,deu_Latn", "prepend", ("eng_Latn", "deu_Latn")),
    "mbart50": ("mbart50", False, None, "prepend", ("en_XX", "de_DE")),
    "mbart25": ("mbart25", False, None, "bart", ("en_XX", "de_DE")),
    "fsmt": ("fsmt", False, None, None, (None, None)),
}
#: the language token of each code, as the tokenizer and the fairseq dictionary spell it
LANGTOK = {"en": "__en__", "de": "__de__"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first three talks of Maruf et al.'s IWSLT17 TED test split, as the files are (CRLF,
    ``<d>`` markers, double spaces): (prefix, {lang: sentences as docctx-prepare reads them})."""
    from fairseq_docctx.data.readers import read_parallel

    root = tmp_path_factory.mktemp("ted")
    for lang in ("en", "de"):
        raw = (IWSLT17 / f"concatenated_en2de_test_{lang}.txt").read_bytes().split(b"<d>")
        (root / f"train.{lang}").write_bytes(b"<d>".join(raw[:4]))
    pd = read_parallel(str(root / "train"), "en", "de")
    text = {"en": [s for d in pd.src for s in d.sentences], "de": [s for d in pd.tgt for s in d.sentences]}
    assert len(text["en"]) > 100
    return root / "train", text


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    made = {}

    def get(case):
        if case not in made:
            family, separate = CASES[case][:2]
            made[case] = make_hf_folder(root, family, separate)
        return made[case]

    return get


def _prepare(prefix, folder, dest, *extra):
    return main(["-s", "en", "-t", "de", "--trainpref", str(prefix), "--destdir", str(dest),
                 "--pretrained", str(folder), *extra])


def _data(dest, lang):
    """The binarized fairseq ids of ``train.en-de.LANG`` (lists, with ``</s>``)."""
    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(dest / f"dict.{lang}.txt"))
    ds = data_utils.load_indexed_dataset(str(dest / f"train.en-de.{lang}"), d, "mmap")
    return [ds[i].tolist() for i in range(len(ds))], d


def _expected(tok, family, texts, side, code):
    """The tokenizer's ids of ``texts``: ``tokenizer(text)`` with ``src_lang``, ``tokenizer(
    text_target=...)`` with ``tgt_lang`` (FSMT's target: its Moses of German, its BPE, vocab-tgt.json)."""
    if code is not None:
        setattr(tok, "src_lang" if side == "source" else "tgt_lang", code)
    if side == "source":
        return [list(x) for x in tok(texts).input_ids]
    if family != "fsmt":
        return [list(x) for x in tok(text_target=texts).input_ids]
    vocab = {v: k for k, v in tok.decoder.items()}
    out = []
    for t in texts:
        words = tok.moses_tokenize(tok.moses_pipeline(t, lang="de"), lang="de")
        out.append([vocab.get(p, vocab["<unk>"]) for w in words for p in tok.bpe(w).split(" ")] + [vocab["</s>"]])
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_ids_are_the_tokenizers(case, corpus, folders, tmp_path):
    from safetensors import safe_open
    from transformers import AutoTokenizer

    from fairseq_docctx.data.hf_folder import folder_vocabularies

    family, separate, langs, placement, codes = CASES[case]
    folder = folders(case)
    prefix, text = corpus
    dest = tmp_path / "bin"
    manifest = _prepare(prefix, folder, dest, *(["--pretrained-langs", langs] if langs else []))
    assert manifest == json.loads((dest / MANIFEST_NAME).read_text())
    rec = manifest["pretrained"]
    tok = AutoTokenizer.from_pretrained(str(folder))
    vocabs = folder_vocabularies(str(folder))
    cfg = json.loads((folder / "config.json").read_text())
    assert rec["format"] == "transformers" and rec["family"] == family and rec["dir"] == str(folder)
    assert rec["model_type"] == cfg["model_type"] and rec["tokenizer_class"] == type(tok).__name__
    assert rec["segmentation"] == {"kind": "transformers", "file": "hf_tokenizer", "release_file": str(folder)}
    assert rec["hub"] is None and rec["sides"] == {"en": "source", "de": "target"}
    assert rec["identity"] == {"en": family != "marian", "de": family != "marian"}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        shapes = {k: f.get_slice(k).get_shape()[0] for k in f.keys() if k.endswith(("embed_tokens.weight", "shared.weight"))}
    # the encoder's and the decoder's tables, or the one shared table the tied ones are saved as
    rows = {side: shapes.get(f"model.{side}.embed_tokens.weight", shapes.get("model.shared.weight"))
            for side in ("encoder", "decoder")}
    rows = {"source": rows["encoder"], "target": rows["decoder"]}
    for lang, side, code in (("en", "source", codes[0]), ("de", "target", codes[1])):
        v = vocabs[side]
        # the model's rows in fairseq's order: Marian's one more (fairseq's <s>, which Marian lacks)
        assert rec["model_symbols"][lang] == len(v.symbols) == rows[side] + (family == "marian")
        ids, d = _data(dest, lang)
        assert d.symbols[:len(v.symbols)] == v.symbols and len(d) == len(v.symbols) + len(rec["added_symbols"][lang])
        want = _expected(tok, family, text[lang], side, code)
        got = [v.hf_ids(x) for x in ids]
        if placement == "bart":  # the data holds X </s>; the task appends the source token, starts the decoder with the target's
            got = [x + [tok.convert_tokens_to_ids(code)] for x in got]
        assert got == want
        unk = sum(x.count(tok.unk_token_id) for x in want)
        assert unk < 0.2 * sum(map(len, want)), "the tiny vocabulary should cover most of the text"
        token = {"prepend": LANGTOK.get(code, code), "bart": code}.get(placement)
        assert rec["langtok"][side] == token and rec["languages"][lang] == code
    assert rec["langtok"]["placement"] == placement


@pytest.mark.parametrize("case", ["marian", "mbart50", "mbart25"])
def test_inference_text_and_language_tokens(case, corpus, folders, tmp_path):
    """PretrainedText on the data folder (its tokenizer copy): a raw sentence encodes to the
    data's symbols, symbols decode as the tokenizer decodes; the task places the tokens the
    tokenizer puts (mBART-25: ``X </s> [en_XX]``, decoder from ``[de_DE]``)."""
    from fairseq_docctx.data.hf_folder import folder_vocabularies
    from fairseq_docctx.data.pretrained import PretrainedText
    from fairseq_docctx.tasks.language_tokens import LanguageTokens
    from transformers import AutoTokenizer

    family, _, _, placement, codes = CASES[case]
    folder = folders(case)
    prefix, text = corpus
    dest = tmp_path / "bin"
    _prepare(prefix, folder, dest)
    shutil.move(str(folder), str(folder) + ".moved")  # inference reads the data folder's copy only
    try:
        pt = PretrainedText.of_data(str(dest))
        ids, d = _data(dest, "en")
        tids, td = _data(dest, "de")
        first = 1 if placement == "prepend" else 0
        for k in (0, 7):
            assert pt.encode(text["en"][k], "en") == d.string(ids[k][first:-1])
            assert pt.step("en", "de").encode(text["en"][k]) == d.string(ids[k][first:-1])
        tok = AutoTokenizer.from_pretrained(str(folder) + ".moved")
        v = folder_vocabularies(str(folder) + ".moved")["target"]
        assert pt.decode(td.string(tids[3][first:-1]), "de") == tok.decode(v.hf_ids(tids[3]), skip_special_tokens=True)
        task = SimpleNamespace(cfg=SimpleNamespace(data=str(dest), left_pad_source=False), src_dict=d, tgt_dict=td)
        lt = LanguageTokens(task)
        if placement == "prepend":
            assert (lt.source(), lt.target()) == (d.index(codes[0]), td.index(codes[1]))
        if placement == "bart":
            src = torch.tensor([ids[0]])
            prev = torch.tensor([[td.eos()] + tids[0][:-1]])
            placed = lt.place({"net_input": {"src_tokens": src, "src_lengths": torch.tensor([len(ids[0])]),
                                             "prev_output_tokens": prev}})["net_input"]
            tok.src_lang = codes[0]
            assert placed["src_tokens"][0].tolist() == tok(text["en"][0]).input_ids
            assert placed["prev_output_tokens"][0, 0].item() == tok.convert_tokens_to_ids(codes[1])
        if placement is None:
            assert lt.ids() == ()
    finally:
        shutil.move(str(folder) + ".moved", str(folder))


def _cli(tmp_path, prefix, folder, *extra, env=None):
    p = run(["docctx-prepare", "-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", tmp_path / "bin",
             "--pretrained", folder, *extra], check=False, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and not (tmp_path / "bin").exists(), p.stderr
    return lines[0]


@pytest.mark.slow  # ~12 s: make test-all
def test_refusals(corpus, folders, tmp_path):
    prefix, _ = corpus
    bad = tmp_path / "bad"
    shutil.copytree(folders("marian"), bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "model_type": "t5"}))
    line = _cli(tmp_path, prefix, bad)
    assert str(bad / "config.json") in line and "model_type 't5'" in line
    (bad / "config.json").write_text(json.dumps(cfg))
    os.remove(bad / "source.spm")
    assert f"{bad / 'source.spm'}: missing" in _cli(tmp_path, prefix, bad)
    line = _cli(tmp_path, prefix, folders("mbart50"), "--pretrained-family", "mbart50")
    assert "--pretrained-family contradicts" in line and "model_type" in line
    line = _cli(tmp_path, prefix, folders("marian"), "--pretrained-langs", "en,de")
    assert "no language tokens" in line
    line = _cli(tmp_path, prefix, folders("nllb"))
    assert "no language en" in line and "--pretrained-langs" in line


def test_hub_id_offline(corpus, tmp_path):
    """A hub id is fetched with huggingface_hub; offline and not cached, it is one line (no download)."""
    from fairseq_docctx.data.hf_release import HUB_ID, is_hf_spec

    prefix, _ = corpus
    assert HUB_ID.match("Helsinki-NLP/opus-mt-en-de") and HUB_ID.match("facebook/nllb-200-distilled-600M@main")
    assert not HUB_ID.match("/abs/path") and not HUB_ID.match("a/b/c") and not is_hf_spec(str(tmp_path))
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    line = _cli(tmp_path, prefix, "Helsinki-NLP/opus-mt-en-de@0123abc", env=env)
    assert "--pretrained Helsinki-NLP/opus-mt-en-de@0123abc: not a directory, and the hub cannot give it" in line
    assert not (tmp_path / "hf-home" / "hub").exists() or not any((tmp_path / "hf-home" / "hub").iterdir())


def test_hub_id_from_the_cache(corpus, folders, tmp_path):
    """A hub id the hub's cache holds (offline: huggingface_hub answers from the cache, no
    network) is read from its snapshot; the record pins the commit it resolved to."""
    prefix, text = corpus
    sha = "0123456789abcdef0123456789abcdef01234567"
    cache = tmp_path / "hf-home" / "hub" / "models--tiny--opus-mt-en-de"
    (cache / "refs").mkdir(parents=True)
    (cache / "refs" / "main").write_text(sha)
    shutil.copytree(folders("marian"), cache / "snapshots" / sha)
    dest = tmp_path / "bin"
    run(["docctx-prepare", "-s", "en", "-t", "de", "--trainpref", prefix, "--destdir", dest,
         "--pretrained", "tiny/opus-mt-en-de"], env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")})
    rec = json.loads((dest / MANIFEST_NAME).read_text())["pretrained"]
    assert rec["hub"] == {"repo_id": "tiny/opus-mt-en-de", "revision": sha, "requested": None}
    assert rec["dir"] == str(cache / "snapshots" / sha) and rec["family"] == "marian"
    ids, _ = _data(dest, "en")
    from transformers import AutoTokenizer

    from fairseq_docctx.data.hf_folder import folder_vocabularies

    v = folder_vocabularies(str(folders("marian")))["source"]
    assert [v.hf_ids(x) for x in ids[:20]] == AutoTokenizer.from_pretrained(str(folders("marian")))(text["en"][:20]).input_ids
