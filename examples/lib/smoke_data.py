"""Toy corpora in the real layout of datasets the project does not bundle, for the recipes'
SMOKE=1 runs (no network in CI): the file names and formats are those of the real releases;
the text is generated (a small word-for-word "language pair", seeded), so the chain prepare ->
train -> translate -> score runs in a few CPU minutes. Documented in docs/recipes.md.

    python examples/lib/smoke_data.py es-en DIR        # examples/es-en: ted/, subtitles/, news/
    python examples/lib/smoke_data.py voita-enru DIR   # examples/opensubs-enru: Voita et al. (2019):
                                                       # DIR/data_to_publish/, DIR/consistency_testsets/
"""
import json
import os
import random
import sys

# a tiny vocabulary: (source word per language, English word)
WORDS = [("el", "тот", "the"), ("gato", "кот", "cat"), ("perro", "собака", "dog"),
         ("come", "ест", "eats"), ("ve", "видит", "sees"), ("casa", "дом", "house"),
         ("grande", "большой", "big"), ("pequeño", "маленький", "small"), ("y", "и", "and"),
         ("rojo", "красный", "red"), ("agua", "вода", "water"), ("bebe", "пьёт", "drinks"),
         ("niño", "ребёнок", "child"), ("libro", "книга", "book"), ("lee", "читает", "reads"),
         ("hoy", "сегодня", "today"), ("aquí", "здесь", "here"), ("nuevo", "новый", "new")]


def sentence(rng, lang):
    """(foreign sentence, English sentence); lang: 'es' or 'ru'."""
    idx = [rng.randrange(len(WORDS)) for _ in range(rng.randint(3, 8))]
    col = 0 if lang == "es" else 1
    foreign = " ".join(WORDS[i][col] for i in idx)
    return foreign.capitalize() + " .", " ".join(WORDS[i][2] for i in idx).capitalize() + " ."


def documents(rng, n_docs, lang, lo=6, hi=12):
    return [[sentence(rng, lang) for _ in range(rng.randint(lo, hi))] for _ in range(n_docs)]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def iwslt_xml(docs, side, setid, first_id):
    """mteval XML of the IWSLT releases (side 0: source, 1: reference)."""
    kind = "srcset" if side == 0 else "refset"
    out = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>",
           f'<{kind} setid="{setid}" srclang="spanish" trglang="english"{"" if side == 0 else " refid=" + chr(34) + "ref" + chr(34)}>']
    for k, doc in enumerate(docs):
        talk = first_id + k
        out += [f'<doc docid="{talk}" genre="lectures">', f"<url>http://www.ted.com/talks/{talk}.html</url>",
                f"<talkid>{talk}</talkid>", f"<title>Talk {talk}</title>"]
        out += [f'<seg id="{i}"> {pair[side]} </seg>' for i, pair in enumerate(doc, 1)]
        out.append("</doc>")
    out += [f"</{kind}>", "</mteval>", ""]
    return "\n".join(out)


def wmt_sgm(docs, side, setid):
    """WMT news test set SGML (``newstestYYYY-src.es.sgm`` / ``-ref.en.sgm``; 2008:
    ``news-test2008-…``)."""
    kind, lang = ("srcset", "es") if side == 0 else ("refset", "en")
    out = [f'<{kind} setid="{setid}" srclang="any"{"" if side == 0 else " trglang=" + chr(34) + "en" + chr(34)}>']
    for k, doc in enumerate(docs):
        out.append(f'<doc sysid="ref" docid="{setid}-{k}" genre="news" origlang="{lang}">')
        out += [f'<seg id="{i}">{pair[side]}</seg>' for i, pair in enumerate(doc, 1)]
        out.append("</doc>")
    out += [f"</{kind}>", ""]
    return "\n".join(out)


def opus_moses(dirname, corpus, docs, doc_name):
    """OPUS Moses files ``CORPUS.en-es.{es,en,ids}``: one pair a line; the .ids file's first
    column names the document of each line."""
    es, en, ids = [], [], []
    for k, doc in enumerate(docs):
        for i, (s, t) in enumerate(doc, 1):
            es.append(s)
            en.append(t)
            ids.append(f"en/{doc_name(k)}\tes/{doc_name(k)}\t{i}\t{i}")
    for ext, lines in (("es", es), ("en", en), ("ids", ids)):
        write(os.path.join(dirname, f"{corpus}.en-es.{ext}"), "\n".join(lines) + "\n")


def es_en(root):
    rng = random.Random(1)
    ted = os.path.join(root, "ted")
    train = documents(rng, 30, "es")
    for side, lang in ((0, "es"), (1, "en")):
        lines = []
        for k, doc in enumerate(train):
            lines += [f"<url>http://www.ted.com/talks/{k}.html</url>", f"<talkid>{k}</talkid>",
                      f"<title>Talk {k}</title>"]
            lines += [pair[side] for pair in doc]
        write(os.path.join(ted, f"train.tags.es-en.{lang}"), "\n".join(lines) + "\n")
    for n, t in enumerate(("dev2010", "tst2010", "tst2011", "tst2012")):
        docs = documents(rng, 2, "es")
        for side, lang in ((0, "es"), (1, "en")):
            write(os.path.join(ted, f"IWSLT14.TED.{t}.es-en.{lang}.xml"),
                  iwslt_xml(docs, side, f"iwslt2014-{t}", 1000 + 10 * n))
    opus_moses(os.path.join(root, "subtitles"), "OpenSubtitles", documents(rng, 34, "es"),
               lambda k: f"{2000 + k % 10}/{k}/{k}.xml.gz")
    news = os.path.join(root, "news")
    opus_moses(news, "News-Commentary", documents(rng, 30, "es"), lambda k: f"news-commentary-{k}.xml.gz")
    for y in range(2008, 2014):
        docs = documents(rng, 2 if y == 2008 else 1, "es")
        name = "news-test2008" if y == 2008 else f"newstest{y}"  # WMT's dev.tgz names (2008 hyphenated)
        write(os.path.join(news, f"{name}-src.es.sgm"), wmt_sgm(docs, 0, f"newstest{y}"))
        write(os.path.join(news, f"{name}-ref.en.sgm"), wmt_sgm(docs, 1, f"newstest{y}"))


def voita_enru(root):
    """Voita et al. (2019)'s layout: ``data_to_publish/context_aware/{en,ru}_{train,dev,test}``
    (the training archive; each line a group of consecutive sentences joined by `` _eos ``,
    the last one the current sentence), ``data_to_publish/context_agnostic/`` (sentence-level
    files, named alike; the recipe does not read them) and ``consistency_testsets/*.json`` (the
    repository's folder: one JSON list of ``{"dst": candidates, "true_ind", "src", "ctx_dist"}``).
    Training lines follow one another through their documents (consecutive groups overlap by
    three sentences, the first groups of a document shorter); dev and test lines are single
    groups drawn at random and shuffled; the correct candidate is not always the first."""
    rng = random.Random(2)
    base = os.path.join(root, "data_to_publish")
    for split, n in (("train", 30), ("dev", 3), ("test", 3)):
        groups = []
        for doc in documents(rng, n, "ru"):
            if split == "train":
                groups += [doc[max(0, i - 3): i + 1] for i in range(1, len(doc))]
            else:
                groups += [doc[i - 3: i + 1] for i in rng.sample(range(3, len(doc)), 3)]
        if split != "train":
            rng.shuffle(groups)
        for lang, col in (("en", 1), ("ru", 0)):
            write(os.path.join(base, "context_aware", f"{lang}_{split}"),
                  "".join(" _eos ".join(p[col] for p in g) + "\n" for g in groups))
            sents = [p[col] for g in groups for p in g[-1:]]
            write(os.path.join(base, "context_agnostic", f"{lang}_{split}"), "\n".join(sents) + "\n")
    for k, name in enumerate(("deixis_test", "lex_cohesion_test", "ellipsis_infl", "ellipsis_vp")):
        examples = []
        for i in range(6):
            window = [sentence(rng, "ru") for _ in range(4)]
            good = " _eos ".join(p[0] for p in window)
            dst = [good] + [" _eos ".join([p[0] for p in window[:-1]] + [sentence(rng, "ru")[0]])
                            for _ in range(1 + (k == 3) * 2)]
            true_ind = (i + k) % len(dst)
            dst[0], dst[true_ind] = dst[true_ind], dst[0]
            examples.append({"dst": dst, "true_ind": true_ind, "src": " _eos ".join(p[1] for p in window),
                             "ctx_dist": 1 + i % 3})
        write(os.path.join(root, "consistency_testsets", f"{name}.json"), json.dumps(examples))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("es-en", "voita-enru"):
        sys.exit("usage: smoke_data.py es-en|voita-enru DIR")
    (es_en if sys.argv[1] == "es-en" else voita_enru)(sys.argv[2])
