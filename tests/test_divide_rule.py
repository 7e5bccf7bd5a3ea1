"""Divide and rule (Lupo et al. 2022): ``docctx-prepare --split-sentences middle|aligned`` and
the recipes' DIVIDE_AND_RULE (K0 -> K1 on the split pairs -> K1 on the documents).

The split corpus is read back from its binarized files: every split pair's halves rejoin to
the input pair token for token, the documents and their order are the input's, the pairs too
short to cut stay whole and are counted, validation and test are byte-identical to data
prepared without the option; an aligned cut crosses no link (given links, eflomal's) and is
the one closest to the middle; the refusals are one line."""
import hashlib
import json
import random
import subprocess
from pathlib import Path

import pytest
import torch

from benchmarks.toy import write_toy_documents
from conftest import REPO, TINY_MODEL, maruf_ted_files, run
from fairseq_docctx.cli.prepare import cli_main, main
from fairseq_docctx.data import alignment, split
from fairseq_docctx.data.doc_index import DocIndex, doc_index_path
from fairseq_docctx.data.manifest import split_sentences
from stub_tools import stub_tools  # noqa: F401  (a fixture)

MIN_LEN = 7  # the default --split-min-len (the authors' --min-length)


def _prepare(raw, dest, *extra):
    return main(["-s", "src", "-t", "tgt", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                 "--testpref", str(raw / "test"), "--destdir", str(dest), "--joined-dictionary", *map(str, extra)])


def _read_split(dest, name):
    """(doc ids, {lang: per document, the sentences as token lists}) of a prepared split."""
    from fairseq.data import Dictionary, data_utils

    idx = DocIndex.read(doc_index_path(str(dest), name, "src", "tgt"))
    out = {}
    for lang in ("src", "tgt"):
        d = Dictionary.load(str(Path(dest) / f"dict.{lang}.txt"))
        ds = data_utils.load_indexed_dataset(str(Path(dest) / f"{name}.src-tgt.{lang}"), d, "mmap")
        flat = [d.string(ds[i]).split() for i in range(len(ds))]
        it = iter(flat)
        out[lang] = [[next(it) for _ in range(n)] for n in idx.lengths]
    return list(idx.doc_ids), out


def _read_raw(raw, name):
    """(doc ids, {lang: per document, the input sentences as word lists}) of a docids split."""
    ids = (raw / f"{name}.docids").read_text().split()
    out = {}
    for lang in ("src", "tgt"):
        docs, last = [], None
        for d, line in zip(ids, (raw / f"{name}.{lang}").read_text().splitlines()):
            if d != last:
                docs.append([])
                last = d
            docs[-1].append(line.split())
        out[lang] = docs
    return list(dict.fromkeys(ids)), out


def _match(raw_docs, split_docs):
    """Walk the input pairs and the split corpus together: every input pair is either the next
    output pair (kept whole) or the concatenation of the next two (split; a first half is never
    the whole pair, since the second is not empty). Returns the cuts: per input pair ``None``
    (whole) or ``(source words of x1, target words of y1)``; fails where they do not rejoin."""
    cuts = []
    for d, (xs, ys) in enumerate(zip(raw_docs["src"], raw_docs["tgt"])):
        out_x, out_y = split_docs["src"][d], split_docs["tgt"][d]
        k = 0
        for x, y in zip(xs, ys):
            if out_x[k] == x and out_y[k] == y:
                cuts.append(None)
                k += 1
            else:
                assert out_x[k] + out_x[k + 1] == x and out_y[k] + out_y[k + 1] == y, (d, x, y)
                assert out_x[k] and out_x[k + 1] and out_y[k] and out_y[k + 1]
                cuts.append((len(out_x[k]), len(out_y[k])))
                k += 2
        assert k == len(out_x) == len(out_y), f"document {d}: sentences left over"
    return cuts


def _digests(dest, name):
    return {f.name: hashlib.sha1(f.read_bytes()).hexdigest() for f in sorted(Path(dest).glob(f"{name}.*"))}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Toy documents (pairs of 2-12 words, some too short to cut) prepared three times: plain,
    --split-sentences middle, and aligned with given links."""
    root = tmp_path_factory.mktemp("dnr")
    raw = write_toy_documents(root / "raw", docs=(40, 6, 6), lengths=(2, 12))
    _, pairs = _read_raw(raw, "train")
    rng = random.Random(3)
    flat = [(x, y) for dx, dy in zip(pairs["src"], pairs["tgt"]) for x, y in zip(dx, dy)]
    links = [_random_links(rng, len(x), len(y)) for x, y in flat]
    (raw / "train.align").write_text("".join(" ".join(f"{a}-{b}" for a, b in sorted(ls)) + "\n" for ls in links))
    out = {"raw": raw, "links": links}
    for name, extra in (("plain", ()), ("middle", ("--split-sentences", "middle")),
                        ("aligned", ("--split-sentences", "aligned", "--split-alignment", raw / "train.align"))):
        out[name] = root / name
        _prepare(raw, out[name], *extra)
    return out


def _random_links(rng, n, m):
    """Links of a pair: monotone blocks with a swap now and then, some words unaligned, now
    and then a long link across the pair (so that some pairs have no crossing-free cut)."""
    links = {(i, min(m - 1, i * m // n)) for i in range(n) if rng.random() < 0.8}
    if rng.random() < 0.5 and n > 1 and m > 1:
        i = rng.randrange(n - 1)
        links = {(a, b) for a, b in links if a not in (i, i + 1)} | {(i, min(m - 1, (i + 1) * m // n)),
                                                                   (i + 1, i * m // n)}
    if rng.random() < 0.2:
        links.add((0, m - 1))
    return links


def _best_cut_by_brute_force(n, m, links):
    cuts = [(abs(2 * i - n) * m + abs(2 * j - m) * n, i, j) for i in range(1, n) for j in range(1, m)
            if not split.crosses(links, i, j)]
    return min(cuts)[1:] if cuts else None


def test_middle_split_halves_rejoin_and_documents_keep_their_order(corpora):
    raw_ids, raw_docs = _read_raw(corpora["raw"], "train")
    ids, docs = _read_split(corpora["middle"], "train")
    assert ids == raw_ids  # the same documents in the same order
    cuts = _match(raw_docs, docs)
    pairs = [(x, y) for dx, dy in zip(raw_docs["src"], raw_docs["tgt"]) for x, y in zip(dx, dy)]
    for (x, y), cut in zip(pairs, cuts):
        if len(x) < MIN_LEN:
            assert cut is None, x  # too short: whole
        else:
            assert cut == (len(x) // 2, len(y) // 2), (x, cut)
    whole = sum(c is None for c in cuts)
    rec = split_sentences(str(corpora["middle"]))
    assert 0 < whole < len(pairs) and rec["kept_whole"] == whole and rec["pairs"] == len(pairs)
    assert rec["split_pairs"] == len(pairs) - whole == rec["cuts"]["middle"] and rec["mode"] == "middle"
    assert rec["min_len"] == MIN_LEN and rec["alignment"] is None and rec["halves"] == "in_document"
    manifest = json.loads((corpora["middle"] / "docctx.json").read_text())
    assert manifest["splits"]["train"]["sentences"] == len(pairs) + rec["split_pairs"]


def test_valid_and_test_are_untouched_and_defaults_write_no_record(corpora):
    for name in ("valid", "test"):
        assert _digests(corpora["middle"], name) == _digests(corpora["plain"], name) != {}
        assert _digests(corpora["aligned"], name) == _digests(corpora["plain"], name)
        assert split_sentences(str(corpora["middle"]), name) is None
    # the same symbols at the same indices: the split data's tokens are the unsplit data's
    # (the counts of </s> and of the separator differ: more lines)
    def symbols(dest):
        return [ln.split()[0] for ln in (dest / "dict.src.txt").read_text().splitlines()]
    assert symbols(corpora["middle"]) == symbols(corpora["plain"]) == symbols(corpora["aligned"])
    assert split_sentences(str(corpora["plain"])) is None
    assert "split_sentences" not in json.loads((corpora["plain"] / "docctx.json").read_text())["splits"]["train"]


def test_aligned_split_never_cuts_a_given_link(corpora):
    _, raw_docs = _read_raw(corpora["raw"], "train")
    _, docs = _read_split(corpora["aligned"], "train")
    cuts = _match(raw_docs, docs)
    pairs = [(x, y) for dx, dy in zip(raw_docs["src"], raw_docs["tgt"]) for x, y in zip(dx, dy)]
    counted = {"aligned": 0, "middle_fallback": 0}
    for (x, y), links, cut in zip(pairs, corpora["links"], cuts):
        if len(x) < MIN_LEN:
            assert cut is None
            continue
        best = _best_cut_by_brute_force(len(x), len(y), links)
        if best is None:  # every cut crosses a link: the middle, as the authors' script
            assert cut == (len(x) // 2, len(y) // 2)
            counted["middle_fallback"] += 1
        else:
            assert not split.crosses(links, *cut) and cut == best, (x, y, sorted(links), cut, best)
            counted["aligned"] += 1
    rec = split_sentences(str(corpora["aligned"]))
    assert counted["aligned"] > 10 and counted["middle_fallback"] > 0, counted
    assert rec["cuts"] == dict(counted, middle=0) and rec["alignment"] == {"file": str(corpora["raw"] / "train.align")}


def test_aligned_cut_by_hand():
    # 8 + 8 words, the 4th source word linked to the 6th target word and the 6th to the 4th:
    # no cut between them; of those that cross nothing ((2, 2), (3, 3), (6, 6), ...) (3, 3) is
    # the closest to the middle
    links = {(0, 0), (1, 1), (2, 2), (3, 5), (4, 4), (5, 3), (6, 6), (7, 7)}
    assert split.choose_cut(8, 8, "aligned", links) == (3, 3, "aligned")  # before "d"/"D": nothing crosses
    assert split.crosses(links, 4, 4)
    links = {(0, 7), (7, 0)}  # every cut crosses one of the two
    assert split.choose_cut(8, 8, "aligned", links) == (4, 4, "middle_fallback")
    assert split.choose_cut(9, 5, "aligned", set()) == (4, 2, "aligned")  # no links: the middle
    assert split.choose_cut(6, 9, "middle") == (None, None, "too_short")
    assert split.choose_cut(7, 1, "middle") == (None, None, "too_short")
    assert split.choose_cut(3, 9, "middle", min_len=2) == (1, 4, "middle")


@pytest.mark.skipif(not alignment.eflomal_installed(), reason="eflomal is not installed (pip install eflomal==2.0.0)")
def test_aligned_split_with_eflomal_never_cuts_its_links(tmp_path, monkeypatch):
    raw = write_toy_documents(tmp_path / "raw", docs=(30, 2, 2), lengths=(4, 12))
    seen = []
    real = alignment.eflomal_align

    def spy(*args, **kwargs):
        seen.extend(real(*args, **kwargs))
        return seen

    monkeypatch.setattr(alignment, "eflomal_align", spy)
    _prepare(raw, tmp_path / "bin", "--split-sentences", "aligned")
    _, raw_docs = _read_raw(raw, "train")
    _, docs = _read_split(tmp_path / "bin", "train")
    cuts = _match(raw_docs, docs)
    pairs = [(x, y) for dx, dy in zip(raw_docs["src"], raw_docs["tgt"]) for x, y in zip(dx, dy)]
    assert len(seen) == len(pairs)
    aligned = fallback = 0
    for (x, y), links, cut in zip(pairs, seen, cuts):
        if cut is None:
            continue
        if _best_cut_by_brute_force(len(x), len(y), links) is None:
            assert cut == (len(x) // 2, len(y) // 2)
            fallback += 1
        else:
            assert not split.crosses(links, *cut)
            aligned += 1
    rec = split_sentences(str(tmp_path / "bin"))
    assert aligned == rec["cuts"]["aligned"] > 0 and fallback == rec["cuts"]["middle_fallback"]
    assert rec["alignment"]["aligner"] == "eflomal"
    # eflomal has no seed: its links are kept, and given back they make the same split again
    kept = tmp_path / "bin" / rec["alignment"]["links"]
    assert [alignment.parse_pharaoh(ln) for ln in kept.read_text().splitlines()] == seen
    _prepare(raw, tmp_path / "again", "--split-sentences", "aligned", "--split-alignment", kept)
    for lang in ("src", "tgt"):
        for ext in ("bin", "idx"):
            name = f"train.src-tgt.{lang}.{ext}"
            assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "bin" / name).read_bytes()


def _refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    return e.value.code, err


def test_refusals_are_one_line(tmp_path, capsys):
    raw = write_toy_documents(tmp_path / "raw", docs=(4, 2, 2))
    dest = tmp_path / "bin"
    base = ["-s", "src", "-t", "tgt", "--joined-dictionary", "--destdir", dest]
    train = ["--trainpref", raw / "train"]
    n = len((raw / "train.src").read_text().splitlines())
    (raw / "short.align").write_text("0-0\n" * (n - 1))
    (raw / "bad.align").write_text("0-0\n" + "0-0 x\n" + "0-0\n" * (n - 2))
    cases = [
        ([*base, "--validpref", raw / "valid", "--split-sentences", "middle"],
         "--split-sentences middle splits the training pairs: give --trainpref"),
        ([*base, *train, "--split-min-len", "5"], "--split-min-len needs --split-sentences"),
        ([*base, *train, "--split-sentences", "middle", "--split-alignment", raw / "short.align"],
         "--split-alignment gives the links of --split-sentences aligned, not middle"),
        ([*base, *train, "--split-sentences", "middle", "--split-min-len", "1"], "--split-min-len 1"),
        ([*base, *train, "--split-sentences", "aligned", "--split-alignment", raw / "short.align"],
         f"{raw / 'short.align'} has {n - 1} lines but there are {n} sentence pairs"),
        ([*base, *train, "--split-sentences", "aligned", "--split-alignment", raw / "bad.align"],
         f"{raw / 'bad.align'}:2: malformed alignment link 'x'"),
    ]
    for argv, line in cases:
        code, err = _refused(argv, capsys)
        assert code == 2 and len(err) == 1 and line in err[0], (argv, err)
        assert not dest.exists()
    code, err = _refused([*base, *train, "--split-sentences", "halves"], capsys)  # argparse
    assert code == 2 and "argument --split-sentences: invalid choice: 'halves' (choose from 'middle', 'aligned')" in err[-1]


def test_without_eflomal_one_line_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    import sys

    raw = write_toy_documents(tmp_path / "raw", docs=(4, 2, 2))
    monkeypatch.setitem(sys.modules, "eflomal", None)  # import eflomal raises ImportError
    code, err = _refused(["-s", "src", "-t", "tgt", "--trainpref", raw / "train", "--destdir", tmp_path / "bin",
                          "--split-sentences", "aligned"], capsys)
    assert code == 2 and len(err) == 1, err
    assert "`pip install eflomal==2.0.0`" in err[0] and "--split-alignment FILE" in err[0], err
    assert "eflomal==2.0.0" in (REPO / "requirements.txt").read_text()


# ------------------------------------------------------------------------------ the schedule

def _ted(tmp_path, stub_tools, **env):
    e, log = stub_tools
    e = dict(e, WORK=str(tmp_path / "work"), DEVICE="cpu", DATA=str(maruf_ted_files(tmp_path / "data")),
             METRICS="bleu", **env)
    p = subprocess.run(["bash", str(REPO / "examples" / "ted-ende" / "run.sh")], env=e, capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr, (log.read_text().splitlines() if log.exists() else [])


def test_recipe_divide_and_rule_prepares_the_split_pairs_and_trains_k1_twice(tmp_path, stub_tools):
    """examples/ted-ende/run.sh with DIVIDE_AND_RULE=aligned (stand-in tools): a second data
    folder of the training pairs split in two, with the first one's SentencePiece model and
    dictionary and its validation documents; han-encoder (K1) from the sentence transformer
    (K0) on it, sentence weights frozen; then K1 fine-tuned from that on the documents at a
    fixed learning rate; the refusals."""
    rc, out, calls = _ted(tmp_path, stub_tools, MODELS="transformer,han-encoder", DIVIDE_AND_RULE="aligned")
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    prepare = [c for c in calls if c.startswith("docctx-prepare ")]
    assert len(prepare) == 2 and "--split-sentences" not in prepare[0]
    split_bin = work / "data-bin-split-aligned"
    assert f"--destdir {split_bin}" in prepare[1] and "--split-sentences aligned --split-min-len 7 " in prepare[1]
    assert f"--spm-model {work}/data-bin/spm.model --srcdict {work}/data-bin/dict.en.txt " in prepare[1]
    assert "--validpref " in prepare[1] and "--testpref" not in prepare[1] and "--spm-vocab-size" not in prepare[1]
    train = {c.split("--save-dir ")[1].split()[0].rsplit("/", 1)[1]: c + " " for c in calls
             if c.startswith("fairseq-train ")}
    assert list(train) == ["transformer", "han-encoder-split", "han-encoder"], calls
    k1_split, k1 = train["han-encoder-split"], train["han-encoder"]
    assert k1_split.startswith(f"fairseq-train {split_bin} ") and k1.startswith(f"fairseq-train {work}/data-bin ")
    assert f"--init-from-sentence-checkpoint {work}/checkpoints/transformer/checkpoint_best.pt " in k1_split
    assert f"--finetune-from-model {work}/checkpoints/han-encoder-split/checkpoint_best.pt " in k1
    assert "--init-from-sentence-checkpoint" not in k1 and "--max-epoch" not in k1 + k1_split
    assert all("--freeze-sentence-weights " in t for t in (k1_split, k1))
    assert "--lr-scheduler inverse_sqrt " in k1_split
    assert "--lr 2e-4 --lr-scheduler fixed --force-anneal 1 --lr-shrink 0.99 " in k1 and "--warmup" not in k1
    results = (work / "results.md").read_text()
    assert "divide and rule (Lupo et al. 2022; DIVIDE_AND_RULE=aligned)" in results
    assert "DIVIDE_AND_RULE=aligned" in (work / "settings.txt").read_text().splitlines()
    for env, line in [({"DIVIDE_AND_RULE": "thirds"}, "DIVIDE_AND_RULE=thirds: none, middle or aligned"),
                      ({"DIVIDE_AND_RULE": "middle", "MODELS": "transformer,concat"}, "MODELS (transformer,concat) has none"),
                      ({"DIVIDE_AND_RULE": "middle", "MODELS": "han-encoder"}, "put transformer in MODELS")]:
        rc, out, _ = _ted(tmp_path / env["DIVIDE_AND_RULE"] / env.get("MODELS", "x"), stub_tools, **env)
        assert rc == 2 and line in out.rstrip().splitlines()[-1], out[-2000:]


@pytest.mark.slow  # ~40 s: three tiny trainings
def test_k0_then_k1_on_split_pairs_then_k1_on_documents(tmp_path):
    """The schedule with real training on toy documents: K0 (the sentence transformer); K1
    (han_encoder_transformer, K=1) from it on the middle-split pairs, its sentence weights
    frozen; K1 fine-tuned from that on the documents (fairseq's --finetune-from-model), still
    frozen. The sentence weights end as K0's (frozen, and loaded by --finetune-from-model), the
    context weights move in the fine-tuning."""
    raw = write_toy_documents(tmp_path / "raw", docs=(40, 4, 4), lengths=(2, 12))
    _prepare(raw, tmp_path / "docs")
    main(["-s", "src", "-t", "tgt", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
          "--destdir", str(tmp_path / "split"), "--joined-dictionary", "--srcdict", str(tmp_path / "docs" / "dict.src.txt"),
          "--split-sentences", "middle"])
    common = ["--user-dir", REPO / "fairseq_docctx", "--task", "document_translation", *TINY_MODEL,
              "--max-tokens", "500", "--no-epoch-checkpoints"]
    k1 = ["--context-size", "1", "--context-sides", "source", "--arch", "han_encoder_transformer",
          "--han-context-size", "1", "--freeze-sentence-weights"]
    run(["fairseq-train", tmp_path / "docs", *common, "--context-size", "0", "--arch", "transformer",
         "--max-epoch", "3", "--save-dir", tmp_path / "k0"])
    run(["fairseq-train", tmp_path / "split", *common, *k1, "--max-epoch", "2", "--save-dir", tmp_path / "k1split",
         "--init-from-sentence-checkpoint", tmp_path / "k0" / "checkpoint_last.pt"])
    p = run(["fairseq-train", tmp_path / "docs", *common, *k1, "--max-epoch", "2", "--save-dir", tmp_path / "k1",
             "--finetune-from-model", tmp_path / "k1split" / "checkpoint_last.pt", "--lr-scheduler", "fixed"])
    assert f"loading pretrained model from {tmp_path / 'k1split' / 'checkpoint_last.pt'}" in p.stdout + p.stderr

    def weights(d):
        return torch.load(d / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]

    k0, mid, end = weights(tmp_path / "k0"), weights(tmp_path / "k1split"), weights(tmp_path / "k1")
    han = [k for k in end if ".han." in k]
    assert han and set(end) - set(han) == set(k0)
    for k in k0:
        assert torch.equal(end[k], k0[k]) and torch.equal(mid[k], k0[k]), k  # frozen in both stages
    assert any(not torch.equal(end[k], mid[k]) for k in han)  # K1 trained on the documents
