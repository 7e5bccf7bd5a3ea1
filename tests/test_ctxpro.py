"""docctx-score ctxpro on a hand-made evaluation set in ctxpro's format (Wicks & Post 2023):
the context probe's pronouns that need the previous sentence, as ctxpro examples with their
inputs (context sentences + the sentence, joined by <eos>). The score equals what the ctxpro
package's own scorer (its command line) gives on the same translations; the translations are
those of the documents in document order; bad files name file and line."""
import json
import os
import subprocess
import sys

import pytest

from conftest import venv_env
from fairseq_docctx.cli.score import build_parser
from fairseq_docctx.evaluation import ctxpro as C

N = 60  # examples


def score_cli(argv, capsys):
    args = build_parser().parse_args([str(a) for a in argv])
    rc = args.func(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def probe_evalset(text_dir, out_dir, n=N):
    """A ctxpro evaluation set (``anaphora.probe.src-tgt.test.json``) and its inputs file
    (``../inputs/NAME``, the released layout) from the probe's test annotations."""
    read = lambda ext: open(os.path.join(text_dir, f"test.{ext}"), encoding="utf-8").read().splitlines()  # noqa: E731
    src, docids = read("src"), read("docids")
    examples, inputs = [], []
    for line in read("probe.jsonl"):
        a = json.loads(line)
        for item in a["items"]:
            k = a["line"]
            context = [src[j] for j in range(k) if docids[j] == docids[k]]
            examples.append({"src segment": src[k], "expected": item["expected"],
                             "rule": f"{item['phenomenon'].upper()}.{item.get('class', 'all')}", "document id": docids[k],
                             "segment id": a["pos"] + 1, "ante distance": item["distance"]})
            inputs.append("<eos> ".join(context + [src[k]]))
            break
        if len(examples) == n:
            break
    os.makedirs(os.path.join(out_dir, "evalsets"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "inputs"), exist_ok=True)
    name = "anaphora.probe.src-tgt.test"
    path = os.path.join(out_dir, "evalsets", name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(examples, f, indent=2)
    with open(os.path.join(out_dir, "inputs", name), "w", encoding="utf-8") as f:
        f.writelines(x + "\n" for x in inputs)
    return path, os.path.join(out_dir, "inputs", name), examples


def test_ctxpro_scores_as_the_ctxpro_scorer_does(probe, concat_model, tmp_path, capsys):
    evalset, inputs, examples = probe_evalset(probe["text"], str(tmp_path / "release"))
    out = tmp_path / "run.json"
    rc, text, err = score_cli(["ctxpro", evalset, "--path", concat_model["checkpoint"], "--data", probe["data_bin"],
                               "--lang", "de", "--beam", "2", "--translations-out", tmp_path / "tr",
                               "--json", out, "--name", "concat"], capsys)  # inputs: the released layout
    assert rc == 0, err
    rep = json.loads(out.read_text())["metrics"]["ctxpro:anaphora.probe.src-tgt.test"]
    assert rep["phenomenon"] == "anaphora" and rep["total"] == N and len(rep["verdicts"]) == N
    assert text.startswith(f"anaphora (anaphora.probe.src-tgt.test.json): accuracy {rep['accuracy']:.4f}")
    # the ctxpro package's command line on the same translations gives the same counts
    translations = tmp_path / "tr" / "anaphora.probe.src-tgt.test.txt"
    p = subprocess.run([sys.executable, "-m", "ctxpro", "score", "-t", str(translations), "-e", evalset, "-l", "de",
                        "--complete"], capture_output=True, text=True, env=venv_env(), check=True)
    total = next(ln for ln in p.stdout.splitlines() if ln.startswith("total")).split("\t")
    assert (int(total[1]), int(total[2])) == (rep["correct"], rep["total"])
    for ln in p.stdout.splitlines():
        if not ln.startswith("total"):
            rule = ln.split(" (")[0]
            assert rep["rules"][rule]["correct"] == int(ln.split("\t")[1])
    # the model reads its context: the pronouns of the probe are right (a sentence-level
    # model is at chance on them)
    assert rep["accuracy"] > 0.9
    # the translations are the last sentences of the documents translated in document order
    from fairseq_docctx.hub import from_pretrained

    hub = from_pretrained(concat_model["checkpoint"], data=probe["data_bin"])
    docs = C.read_inputs(inputs, examples)
    expect = [t[-1] for t in hub.translate_documents(docs[:8], beam=2)]  # the command's settings
    assert translations.read_text().splitlines()[:8] == expect
    assert rep["context_sentences"] == sum(len(d) - 1 for d in docs)


def test_ctxpro_bad_files_name_file_and_line(tmp_path, capsys):
    ev = tmp_path / "gender.x.json"
    ev.write_text('[\n  {"src segment": "a b .", "expected": "x", "rule": "R"},\n'
                  '  {"src segment": "c d .", "rule": "R"}\n]\n')
    with pytest.raises(C.ScoreInputError, match=r"gender\.x\.json:3: example 2 has no 'expected'"):
        C.read_evalset(str(ev))
    ev.write_text('[{"src segment": "a b .", "expected": "x", "rule": "R"},\n'
                  ' {"src segment": "c d .", "expected": "y", "rule": "R"}]\n')
    inputs = tmp_path / "gender.x"
    inputs.write_text("z .<eos> a b .\nz .<eos> c e .\n")
    rc, _, err = score_cli(["ctxpro", ev, "--path", tmp_path / "none.pt"], capsys)
    assert rc == 2 and f"{inputs}:2: the line ends in 'c e .'" in err
    inputs.write_text("a b .\n")
    rc, _, err = score_cli(["ctxpro", ev, "--inputs", inputs, "--path", tmp_path / "none.pt"], capsys)
    assert rc == 2 and "has 1 lines but the evaluation set has 2 examples" in err
    os.remove(inputs)
    rc, _, err = score_cli(["ctxpro", ev, "--path", tmp_path / "none.pt"], capsys)
    assert rc == 2 and "no inputs (contexts)" in err and "give --inputs" in err
    (tmp_path / "bad.json").write_text('[{"src segment": "a", "expected": "x", "rule": "R"} {"x": 1}]')
    with pytest.raises(C.ScoreInputError, match=r"bad\.json:1: expected ',' or ']'"):
        C.read_evalset(str(tmp_path / "bad.json"))
