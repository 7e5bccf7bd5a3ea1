"""docctx-prepare --pretrained DIR: tiny releases in each family's layout, made with fairseq's and
SentencePiece's own code -> the binarized data carries the release's ids, language tokens and
segmentation; the separator the dictionary lacks is appended and recorded; one-line refusals."""
import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest

from examples.lib.tiny_release import bpe_release, sp_release
from fairseq_docctx.cli.prepare import cli_main, main
from fairseq_docctx.data.doc_index import DocIndex, doc_index_path
from fairseq_docctx.data.manifest import MANIFEST_NAME
from fairseq_docctx.data.pretrained import M2M_MADEUPWORDS

WORDS_EN = ("the cat dog house tree river sees likes finds a small big red green old new "
            "mother father child friend city garden don't it's well-known rock&roll").split()
WORDS_DE = ("die Katze Hund Haus Baum Fluss sieht mag findet ein kleine große rote grüne alte "
            "neue Mutter Vater Kind Freund Stadt Garten nicht gut-bekannt Straße über").split()


def _sentences(words, n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
        out.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ", \"yes\"."]))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Raw documents (marker format, ``<d>`` before each), train 300 and valid 40 pairs."""
    root = tmp_path_factory.mktemp("corpus")
    text = {}
    for split, n, seed in (("train", 300, 1), ("valid", 40, 2)):
        en, de = _sentences(WORDS_EN, n, seed), _sentences(WORDS_DE, n, seed + 10)
        text[split] = {"en": en, "de": de}
        for lang, sents in (("en", en), ("de", de)):
            lines = []
            for k, s in enumerate(sents):
                if k % 10 == 0:
                    lines.append("<d>")
                lines.append(s)
            (root / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root, text


def _sp_release(corpus, root, family):
    """A SentencePiece release in ``family``'s layout; returns (dir, segment(text, lang))."""
    _, text = corpus
    return sp_release(root, [s for lang in ("en", "de") for s in text["train"][lang]], family)


def _bpe_release(corpus, root):
    """A WMT19-layout release: dict.en.txt, dict.de.txt (different), bpecodes; the text
    tokenized by fairseq's moses tokenizer with its defaults."""
    _, text = corpus
    return bpe_release(root, {lang: text["train"][lang] + text["valid"][lang] for lang in ("en", "de")},
                       {lang: text["train"][lang] for lang in ("en", "de")})


# family -> (data languages given, --pretrained-langs, expected language tokens, symbols the task adds)
FAMILY_CASES = {
    "transformer": (None, None, []),
    # the sorted pair languages, then the 8 madeupwords of model_dict.128k.txt (kept where the file has them)
    "m2m100": (None, ("__en__", "__de__"), ["__af__", "__de__", "__en__", "__fr__"] + list(M2M_MADEUPWORDS)),
    "nllb": ("eng_Latn,deu_Latn", ("__eng_Latn__", "__deu_Latn__"),
             ["__ace_Arab__", "__fra_Latn__", "__eng_Latn__", "__deu_Latn__",
              "<MINED_DATA>", "<MMT_BT_DATA>", "<SMT_BT_DATA>"]),
    "mbart50": (None, ("[en_XX]", "[de_DE]"), ["[ar_AR]", "[en_XX]", "[cs_CZ]", "[de_DE]", "<mask>"]),
}
RELEASE_DICT = {"transformer": {"en": "dict.en.txt", "de": "dict.de.txt"},
                "m2m100": {"en": "model_dict.128k.txt", "de": "model_dict.128k.txt"},
                "nllb": {"en": "dictionary.txt", "de": "dictionary.txt"},
                "mbart50": {"en": "dict.en_XX.txt", "de": "dict.de_DE.txt"}}
RELEASE_SEGMENTATION = {"transformer": "bpecodes", "m2m100": "spm.128k.model",
                        "nllb": "sentencepiece.bpe.model", "mbart50": "sentence.bpe.model"}


@pytest.fixture(scope="module")
def releases(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("releases")
    out = {"transformer": _bpe_release(corpus, root / "wmt19")}
    for family, name in (("m2m100", "m2m"), ("nllb", "nllb"), ("mbart50", "mbart50")):
        out[family] = _sp_release(corpus, root / name, family)
    return out


def _run(corpus, release_dir, dest, *extra):
    root, _ = corpus
    return main(["-s", "en", "-t", "de", "--trainpref", str(root / "train"), "--validpref",
                 str(root / "valid"), "--destdir", str(dest), "--pretrained", str(release_dir), *extra])


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_ids_are_the_release_ids(family, corpus, releases, tmp_path):
    from fairseq.data import Dictionary, data_utils

    langs, tokens, added_by_task = FAMILY_CASES[family]
    release_dir, segment = releases[family]
    dest = tmp_path / "bin"
    manifest = _run(corpus, release_dir, dest, *(["--pretrained-langs", langs] if langs else []))
    assert manifest == json.loads((dest / MANIFEST_NAME).read_text())
    rec = manifest["pretrained"]
    assert rec["family"] == family and rec["dir"] == str(release_dir)
    assert rec["dictionary"] == RELEASE_DICT[family]
    assert rec["tokenizer"] == ("moses" if family == "transformer" else None)
    seg_file = "bpecodes" if family == "transformer" else "spm.model"
    assert rec["segmentation"] == {"kind": "fastbpe" if family == "transformer" else "sentencepiece", "file": seg_file,
                                   "release_file": str(release_dir / RELEASE_SEGMENTATION[family])}
    assert (dest / seg_file).read_bytes() == (release_dir / RELEASE_SEGMENTATION[family]).read_bytes()
    assert rec["langtok"] == {"source": tokens[0] if tokens else None, "target": tokens[1] if tokens else None,
                              "placement": "prepend" if tokens else None}
    _, text = corpus
    for lang in ("en", "de"):
        release_file = release_dir / RELEASE_DICT[family][lang]
        assert rec["dictionary_sha1"][lang] == hashlib.sha1(release_file.read_bytes()).hexdigest()
        # the model's dictionary, as the family's task builds it: the release file + its symbols
        model = Dictionary.load(str(release_file))
        for sym in added_by_task:
            model.add_symbol(sym)
        assert rec["model_symbols"][lang] == len(model)
        assert rec["added_symbols"][lang] == {"<sep>": len(model)}  # appended: the release lacks it
        data_dict = Dictionary.load(str(dest / f"dict.{lang}.txt"))
        assert data_dict.symbols == model.symbols + ["<sep>"]
        assert manifest["context_separator_index"][lang] == len(model)
        for split in ("train", "valid"):
            ds = data_utils.load_indexed_dataset(str(dest / f"{split}.en-de.{lang}"), data_dict, "mmap")
            idx = DocIndex.read(doc_index_path(str(dest), split, "en", "de"))
            assert len(ds) == idx.num_sentences == len(text[split][lang]) and len(idx) == len(text[split][lang]) // 10
            prefix = [model.index(tokens[0 if lang == "en" else 1])] if tokens else []
            unk = 0
            for k, raw in enumerate(text[split][lang]):
                pieces = segment(raw, lang).split()
                expected = prefix + [model.index(p) for p in pieces] + [model.eos()]
                assert ds[k].tolist() == expected, (split, lang, k, raw)
                unk += expected.count(model.unk())
            assert unk <= len(text[split][lang])  # the release's pieces are known (a few <unk> at most)
    if tokens:  # the language tokens sit after the release's entries, in the task's order
        release_dict = Dictionary.load(str(release_dir / RELEASE_DICT[family]["en"]))
        appended = [sym for sym in added_by_task if sym not in release_dict.indices]
        n = len(release_dict)
        assert [data_dict.symbols[n + i] for i in range(len(appended))] == appended


def test_separator_the_release_has_is_not_added(corpus, releases, tmp_path):
    from fairseq.data import Dictionary

    release = tmp_path / "m2m"
    shutil.copytree(releases["m2m100"][0], release)
    with open(release / "model_dict.128k.txt", "a") as f:
        f.write("<brk> 1\n")
    manifest = _run(corpus, release, tmp_path / "bin", "--context-separator", "<brk>")
    rec = manifest["pretrained"]
    assert rec["added_symbols"] == {"en": {}, "de": {}}
    d = Dictionary.load(str(tmp_path / "bin" / "dict.en.txt"))
    assert len(d) == rec["model_symbols"]["en"] and d.index("<brk>") == manifest["context_separator_index"]["en"] != d.unk()


def test_fastbpe_codes_as_fastbpe_applies_them(tmp_path):
    """Merges by priority (the lowest line first), at every occurrence, left to right; ``@@ ``."""
    from fairseq_docctx.data.pretrained import FastBPE

    codes = tmp_path / "bpecodes"
    codes.write_text("a a 9\nb c</w> 8\na b 7\naa a 6\n")
    bpe = FastBPE(str(codes))
    # aaa: (a,a) merges the first pair only -> aa a</w>, and (aa,a</w>) is no code;
    # abc: (b,c</w>) ranks before (a,b) -> a bc</w>; aaaa: (a,a) at 0 (then (a,a</w>) is no
    # code) -> aa a a</w>, then (aa,a) -> aaa a</w>
    assert bpe.apply("aaa abc aaaa") == "aa@@ a a@@ bc aaa@@ a"
    assert bpe.apply("x") == "x"


def _refused(capsys, argv, what):
    """docctx-prepare refuses ``argv`` in one line saying ``what``: that line."""
    with pytest.raises(SystemExit) as e:
        cli_main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("docctx-prepare: error: ") and what in err, err
    return err.strip()


def test_refusals_one_line(corpus, releases, tmp_path, capsys):
    root, _ = corpus
    dest = tmp_path / "bin"
    base = ["-s", "en", "-t", "de", "--trainpref", str(root / "train"), "--destdir", str(dest)]
    m2m, mbart, nllb, wmt = (str(releases[f][0]) for f in ("m2m100", "mbart50", "nllb", "transformer"))
    for extra, what in [
        (["--pretrained", m2m, "--spm-vocab-size", "100"], "--spm-vocab-size contradicts --pretrained"),
        (["--pretrained", m2m, "--spm-model", str(Path(m2m) / "spm.128k.model")], "--spm-model contradicts"),
        (["--pretrained", m2m, "--srcdict", str(Path(m2m) / "model_dict.128k.txt")], "--srcdict contradicts"),
        (["--pretrained", m2m, "--tgtdict", str(Path(m2m) / "model_dict.128k.txt")], "--tgtdict contradicts"),
        (["--pretrained", m2m, "--thresholdtgt", "2"], "--thresholdtgt contradicts"),
        (["--pretrained", m2m, "--nwordssrc", "100"], "--nwordssrc contradicts"),
        (["--pretrained-langs", "en,de"], "--pretrained-langs needs --pretrained"),
        (["--pretrained", mbart, "--pretrained-langs", "en_XX,fr_XX"],
         f"{Path(mbart) / 'ML50_langs.txt'}: no language fr_XX"),
        (["--pretrained", nllb], f"{Path(nllb) / 'langs.txt'}: no language en"),
        (["--pretrained", wmt, "--pretrained-langs", "en,de"], "the transformer family has no language tokens"),
        (["--pretrained", str(root)], "not a known release layout"),
        (["--pretrained", wmt, "--pretrained-family", "nllb"], f"{Path(wmt) / 'langs.txt'}: missing"),
    ]:
        _refused(capsys, base + extra, what)
    assert not dest.exists()


def _broken(src, dst, edit):
    shutil.copytree(src, dst)
    edit(Path(dst))
    return str(dst)


def test_missing_or_malformed_release_files_one_line(corpus, releases, tmp_path, capsys):
    root, _ = corpus
    dest = tmp_path / "bin"
    base = ["-s", "en", "-t", "de", "--trainpref", str(root / "train"), "--destdir", str(dest), "--pretrained"]
    m2m, mbart, wmt = (releases[f][0] for f in ("m2m100", "mbart50", "transformer"))
    cases = [
        (lambda d: (d / "spm.128k.model").unlink(), m2m, "spm.128k.model: missing"),
        (lambda d: (d / "spm.128k.model").write_bytes(b"not a model"), m2m, "spm.128k.model: not a SentencePiece model"),
        (lambda d: (d / "model_dict.128k.txt").write_text("a 1\nb\n"), m2m,
         "model_dict.128k.txt: not a fairseq dictionary"),
        (lambda d: (d / "language_pairs_small_models.txt").write_text("en-de,ende\n"), m2m,
         "language_pairs_small_models.txt:1: 'ende' is not a language pair"),
        (lambda d: (d / "bpecodes").write_text("a b 3\nc\n"), wmt, "bpecodes:2: not a BPE merge"),
        (lambda d: (d / "dict.de.txt").unlink(), wmt, "dict.de.txt: missing"),
        # mBART-50 without its language list, and no dict.txt of mBART-25: neither family
        (lambda d: (d / "ML50_langs.txt").unlink(), mbart, "not a known release layout"),
        # mBART-25 without its dictionary
        (lambda d: ((d / "dict.en_XX.txt").unlink(), (d / "ML50_langs.txt").unlink(),
                    (d / "dict.de_DE.txt").rename(d / "dict.txt"), (d / "dict.txt").unlink()),
         mbart, "not a known release layout"),
    ]
    for k, (edit, src, what) in enumerate(cases):
        broken = _broken(src, tmp_path / f"r{k}", edit)
        _refused(capsys, base + [broken], what)
        assert not dest.exists()


def test_mask_symbol_appended_where_the_release_lacks_it(corpus, releases, tmp_path):
    """--mask-symbol: M2M-100's dictionary lacks <mask>: appended after the separator and
    recorded with it; mBART-50's has it (the task adds it): kept where it is."""
    from fairseq.data import Dictionary

    m2m = _run(corpus, releases["m2m100"][0], tmp_path / "m2m", "--mask-symbol", "<mask>")
    n = m2m["pretrained"]["model_symbols"]["en"]
    assert m2m["pretrained"]["added_symbols"]["en"] == {"<sep>": n, "<mask>": n + 1}
    assert m2m["mask_symbol_index"] == {"en": n + 1, "de": n + 1}
    mbart = _run(corpus, releases["mbart50"][0], tmp_path / "mbart", "--mask-symbol", "<mask>")
    n = mbart["pretrained"]["model_symbols"]["de"]
    assert mbart["pretrained"]["added_symbols"]["de"] == {"<sep>": n}
    d = Dictionary.load(str(tmp_path / "mbart" / "dict.de.txt"))
    assert mbart["mask_symbol_index"]["de"] == d.index("<mask>") < n


def _dictionary_file(path, lines, tail=()):
    """A release dictionary of ``lines`` synthetic pieces (``piece<N> 1``), then the ``tail`` lines."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"piece{i} {lines - i}\n" for i in range(lines))
        f.writelines(f"{sym} 1\n" for sym in tail)


def _langs(n, style, keep):
    """``n`` language codes of ``style`` (``m2m``: two letters, ``nllb``: xxx_Xxxx, ``mbart``:
    xx_XX), ``keep`` among them."""
    make = {"m2m": lambda i: f"{chr(97 + i // 26)}{chr(97 + i % 26)}", "nllb": lambda i: f"l{i:03d}_Latn",
            "mbart": lambda i: f"{chr(97 + i // 26)}{chr(97 + i % 26)}_YY"}[style]
    codes = [c for c in (make(i) for i in range(n + len(keep))) if c not in keep][: n - len(keep)]
    return codes[:3] + list(keep) + codes[3:]


def _real_release(root, family, variant):
    """A release folder with the dictionary file of ``variant`` at the real line count and the
    family's real language list (synthetic codes, as many as the real list holds)."""
    root.mkdir()
    spm = {"m2m100": "spm.128k.model", "nllb": "flores200_sacrebleu_tokenizer_spm.model"}.get(family, "sentence.bpe.model")
    (root / spm).write_bytes(b"not read")  # load_release does not open it
    langs = None
    if family == "m2m100":
        langs = sorted(_langs(100, "m2m", ["en", "de"]))
        (root / "language_pairs_small_models.txt").write_text(
            ",".join(f"{a}-{b}" for a in langs for b in langs if a != b) + "\n")
        tail = [f"__{x}__" for x in langs] + list(M2M_MADEUPWORDS) if variant == "model_dict.128k.txt" else []
        _dictionary_file(root / variant, 128_000, tail)
    elif family == "nllb":
        (root / "langs.txt").write_text(",".join(_langs(202, "nllb", ["eng_Latn", "deu_Latn"])) + "\n")
        _dictionary_file(root / "dictionary.txt", 255_997)
    elif family == "mbart50":
        (root / "ML50_langs.txt").write_text("\n".join(_langs(52, "mbart", ["en_XX", "de_DE"])) + "\n")
        for name in ([variant] if variant == "dict.txt" else ["dict.en_XX.txt", "dict.de_DE.txt"]):
            _dictionary_file(root / name, 249_997)
    else:  # mbart25
        _dictionary_file(root / "dict.txt", 249_997)
    return root, langs


#: family, the dictionary file fairseq publishes (its lines), the real checkpoint's embedding rows
REAL_ROWS = [
    ("m2m100", "model_dict.128k.txt", 128_112),  # 128,000 pieces + 100 language tokens + 8 madeupwords
    ("m2m100", "data_dict.128k.txt", 128_112),  # the 128,000 pieces alone (fairseq-preprocess's --srcdict)
    ("nllb", "dictionary.txt", 256_206),  # 255,997 lines (fairseq issue #4557)
    ("mbart50", "dict.en_XX.txt", 250_054),  # 249,997 lines, 52 languages in ML50_langs.txt
    ("mbart50", "dict.txt", 250_054),
    ("mbart25", "dict.txt", 250_027),  # 249,997 lines, its 25 languages
]


@pytest.mark.parametrize("family,variant,rows", REAL_ROWS, ids=[f"{f}-{v}" for f, v, _ in REAL_ROWS])
def test_model_dictionary_has_the_real_checkpoints_rows(family, variant, rows, tmp_path):
    """Every dictionary file fairseq publishes, at its real line count, gives the real
    checkpoint's embedding rows (what --init-from-pretrained checks); M2M-100's two files give
    the same ids (the language tokens and the madeupwords of model_dict.128k.txt where the file
    has them)."""
    from fairseq_docctx.data.pretrained import load_release

    d, langs = _real_release(tmp_path / "release", family, variant)
    release = load_release(str(d), "en", "de", langs=["eng_Latn", "deu_Latn"] if family == "nllb" else None)
    assert release.family == family and release.dict_files["en"] == variant
    for lang in ("en", "de"):
        model = release.model_dictionary(lang)
        assert len(model) == rows, (family, variant, len(model))
    if family == "m2m100":  # the ids of model_dict.128k.txt's lines, for either file
        assert model.symbols[128_004:] == [f"__{x}__" for x in langs] + list(M2M_MADEUPWORDS)
