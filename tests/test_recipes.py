"""The dataset recipes (examples/<dataset>/run.sh) and their shared machinery (examples/lib/).

Fast: the step runner (a finished step is skipped on a re-run with the same settings, redone
with FRESH=1, with other settings or after a step it depends on was redone), downloads
(resumed, checked by sha256: a mismatch is a clear error), a missing licensed file is a clear
error, settings from the environment, published scores beside the runs
(``docctx-score table --paper-scores``). End to end: the cheapest recipe (nc-ende) in SMOKE
mode; every other recipe's SMOKE run is marked slow (``make test-all``)."""
import hashlib
import json
import re
import subprocess
import sys

import pytest

from conftest import REPO, SHARED_DATA, maruf_ted_files, venv_env
from stub_tools import stub_tools  # noqa: F401  (a fixture)

LIB = REPO / "examples" / "lib" / "recipe.sh"
needs_data = pytest.mark.skipif(not (SHARED_DATA / "maruf-ende").is_dir(),
                                reason=f"needs the bundled corpora at {SHARED_DATA}")


def bash(script, tmp_path, **env):
    """Run a bash script that sources the recipe machinery; (returncode, stdout + stderr)."""
    e = dict(venv_env(), WORK=str(tmp_path / "work"), DEVICE="cpu", T=str(tmp_path), **env)
    p = subprocess.run(["bash", "-c", f"set -euo pipefail; source {LIB}; recipe_init t; {script}"],
                       env=e, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    return p.returncode, p.stdout + p.stderr


def runs(tmp_path, name):
    f = tmp_path / name
    return len(f.read_text().splitlines()) if f.exists() else 0


# ------------------------------------------------------------------------------ step runner


STEPS = """
setting GREETING hello
step a -- bash -c "echo \\$0 >> $T/a.runs" "$GREETING"
step b -d a -o $T/b.out -- bash -c "echo b >> $T/b.runs; echo x > $T/b.out"
"""


def test_a_finished_step_is_skipped_on_a_rerun_and_redone_with_fresh_or_other_settings(tmp_path):
    rc, out = bash(STEPS, tmp_path)
    assert rc == 0, out
    assert (runs(tmp_path, "a.runs"), runs(tmp_path, "b.runs")) == (1, 1)
    rc, out = bash(STEPS, tmp_path)  # same settings: both skipped
    assert rc == 0 and "a: done with these settings" in out and "b: done with these settings" in out, out
    assert (runs(tmp_path, "a.runs"), runs(tmp_path, "b.runs")) == (1, 1)
    rc, out = bash(STEPS, tmp_path, FRESH="1")  # FRESH=1: both redone
    assert rc == 0, out
    assert (runs(tmp_path, "a.runs"), runs(tmp_path, "b.runs")) == (2, 2)
    rc, out = bash(STEPS, tmp_path, GREETING="hi")  # a's command changes: a, and b after it, redone
    assert rc == 0, out
    assert (tmp_path / "a.runs").read_text().splitlines()[-1] == "hi"
    assert (runs(tmp_path, "a.runs"), runs(tmp_path, "b.runs")) == (3, 3)
    (tmp_path / "b.out").unlink()  # an output gone: the step is redone
    rc, out = bash(STEPS, tmp_path, GREETING="hi")
    assert rc == 0 and (runs(tmp_path, "a.runs"), runs(tmp_path, "b.runs")) == (3, 4), out


def test_a_failing_step_is_an_error_with_its_log_and_is_not_marked_done(tmp_path):
    script = 'step bad -- bash -c "echo the cause; exit 3"'
    rc, out = bash(script, tmp_path)
    assert rc == 2 and "the cause" in out and "step bad failed" in out and "logs/bad.log" in out, out
    assert not (tmp_path / "work" / "stamps" / "bad.done").exists()
    rc, out = bash('step c -d bad -- true', tmp_path)
    assert rc == 2 and "step c needs step bad, which has not finished" in out, out


def test_settings_from_the_environment_and_the_smoke_defaults(tmp_path):
    script = 'setting SIZE 512 32; setting BEAM 4 2; recipe_settings; echo "SIZE=$SIZE BEAM=$BEAM"'
    rc, out = bash(script, tmp_path)
    assert rc == 0 and "SIZE=512 BEAM=4" in out, out
    rc, out = bash(script, tmp_path, SMOKE="1", BEAM="5")
    assert rc == 0 and "SIZE=32 BEAM=5" in out, out
    listed = (tmp_path / "work" / "settings.txt").read_text().splitlines()
    assert "SIZE=32" in listed and "BEAM=5" in listed and "SMOKE=1" in listed
    rc, out = bash("true", tmp_path, SMOKE="yes")
    assert rc == 2 and "SMOKE=yes: use 0 or 1" in out
    rc, out = bash("true", tmp_path, PRECISION="fp16")
    assert rc == 2 and "PRECISION=fp16 needs a GPU" in out


# ------------------------------------------------------------------------------ data


def test_download_resumes_and_is_checked_by_its_sha256(tmp_path):
    src = tmp_path / "remote.txt"
    src.write_bytes(b"0123456789" * 1000)
    good = hashlib.sha256(src.read_bytes()).hexdigest()
    dest = tmp_path / "dl" / "file.txt"
    # an interrupted earlier download: curl -C - goes on from the partial file
    dest.parent.mkdir()
    (dest.parent / "file.txt.part").write_bytes(src.read_bytes()[:4000])
    rc, out = bash(f"fetch file://{src} {good} {dest}", tmp_path)
    assert rc == 0, out
    assert dest.read_bytes() == src.read_bytes()
    rc, out = bash(f"fetch file://{src} {'0' * 64} {dest}", tmp_path)  # the file there is checked too
    assert rc == 2 and f"checksum mismatch for {dest}" in out and "expected " + "0" * 64 in out, out
    rc, out = bash(f"fetch file://{tmp_path}/missing {good} {tmp_path}/x 'ask the authors'", tmp_path)
    assert rc == 2 and "could not download" in out and "ask the authors" in out, out


def test_slice_marker_takes_whole_documents(tmp_path):
    (tmp_path / "m.txt").write_bytes(b"<d>\r\na\r\nb\r\n<d>\r\nc\r\n<d>\r\nd\r\ne\r\n")
    rc, out = bash(f"slice_marker {tmp_path}/m.txt 1 2 {tmp_path}/s.txt", tmp_path)
    assert rc == 0, out
    assert (tmp_path / "s.txt").read_text() == "<d>\nc\n<d>\nd\ne\n"
    rc, out = bash(f"slice_marker {tmp_path}/m.txt 3 1 {tmp_path}/s.txt", tmp_path)
    assert rc == 2 and "has fewer than 4 documents" in out


def _recipe(name, tmp_path, timeout=900, **env):
    e = dict(venv_env(), WORK=str(tmp_path / "work"), DEVICE="cpu", **env)
    p = subprocess.run(["bash", str(REPO / "examples" / name / "run.sh")], env=e, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def test_a_missing_licensed_training_side_is_a_clear_error(tmp_path):
    corpus = tmp_path / "maruf" / "IWSLT2017"
    corpus.mkdir(parents=True)
    for split in ("dev", "test"):
        for lang in ("en", "de"):
            (corpus / f"concatenated_en2de_{split}_{lang}.txt").write_text("<d>\na\n")
    rc, out = _recipe("ted-ende", tmp_path, DATA=str(tmp_path / "maruf"))
    assert rc == 2, out
    assert f"missing {corpus}/concatenated_en2de_train_en.txt" in out and "SMOKE=1" in out, out
    rc, out = _recipe("iwslt15-zhen", tmp_path, DATA=str(tmp_path / "empty"))
    assert rc == 2, out
    assert "train.tags.zh-en.zh: download the IWSLT 2015 Zh-En TED data" in out and "wit3.fbk.eu" in out, out
    # LDC Zh-En: each file named with the LDC catalogue numbers of the papers' corpora and NIST sets
    ldc = tmp_path / "ldc"
    rc, out = _recipe("ldc-zhen", tmp_path, DATA=str(ldc))
    assert rc == 2 and f"missing {ldc}/train.zh: the training corpus is licensed by the LDC" in out, out
    assert "LDC2003E07" in out and "LDC2005T10" in out, out
    ldc.mkdir()
    for lang in ("zh", "en"):
        (ldc / f"train.{lang}").write_text("<d>\na\n")
    rc, out = _recipe("ldc-zhen", tmp_path, DATA=str(ldc))
    assert rc == 2 and f"missing {ldc}/nist/mt05.src.sgm: NIST mt05" in out and "LDC2010T14" in out, out
    (ldc / "nist").mkdir()
    (ldc / "nist" / "mt05.src.sgm").write_text("<d>\na\n")
    rc, out = _recipe("ldc-zhen", tmp_path, DATA=str(ldc))
    assert rc == 2 and f"missing {ldc}/nist/mt05.ref0.sgm: NIST mt05" in out and "REFS_MT05" in out, out


# ------------------------------------------------------------------------------ models


QCN_TABLE2 = {  # recipe model: (Yang et al. 2019, Table 2 row, its flags, K, dropout)
    "qcn-transformer": ("--no-qcn --no-pcc-regularizer", "0", "0.1"),
    "qcn-regularizer-only": ("--no-qcn", "0", "0.1"),
    "qcn-no-regularizer": ("--no-pcc-regularizer", "3", "0.2"),
    "qcn": ("", "3", "0.2"),
}


def test_qcn_table2_rows_are_recipe_models(tmp_path):
    """Each row of Yang et al. (2019)'s Table 2 is a model of the recipes: the QCN settings
    (§4.1: 4+4 layers, Adam at a constant 1e-4) with the row's flags, no context and dropout
    0.1 for the rows that read none, and each row's published scores in paper-scores.tsv."""
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=en TGT=de; "
              'train() { echo "TRAIN $1: ${*:3} | dropout $QCN_DROPOUT"; }; '
              + "; ".join(f"train_model {m}" for m in QCN_TABLE2))
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    got = {ln.split(":")[0][6:]: ln for ln in out.splitlines() if ln.startswith("TRAIN ")}
    assert set(got) == set(QCN_TABLE2), out
    for name, (flags, k, dropout) in QCN_TABLE2.items():
        line = got[name]
        assert "--arch qcn_transformer" in line and f"--context-size {k} " in line, line
        assert line.endswith(f"| dropout {dropout}"), line
        for flag in ("--no-qcn", "--no-pcc-regularizer"):
            assert (flag in line) == (flag in flags), line
    for recipe in ("ted-ende", "nc-ende", "europarl-ende"):
        runs = {ln.split("\t")[0] for ln in (REPO / "examples" / recipe / "paper-scores.tsv").read_text().splitlines()
                if not ln.startswith("#")}
        assert set(QCN_TABLE2) <= runs, recipe


SEGMENT_MODELS = {  # recipe model: (arch, flags it must have, flags it must not have)
    "doc2doc": ("doc2doc_transformer", ["--multi-resolution", "--dropout 0.1 ", "--lr 7e-4 "],
                ["--init-from-sentence-checkpoint", "--doc-noise-mask", "--encoder-ctxlayers"]),
    "g-transformer": ("g_transformer", ["--doc-noise-mask 0.3 ", "--doc-noise-epochs 30 ", "--dropout 0.3 ",
                                        "--lr 5e-4 ", "--warmup-updates 4000 ", "--max-tokens 4096 "],
                      ["--init-from-sentence-checkpoint", "--multi-resolution", "--lr-scale-pretrained",
                       "--global-attn-init"]),
    "g-transformer-fnd": ("g_transformer", ["--doc-noise-mask 0.1 ", "--doc-noise-epochs 40 ", "--dropout 0.3 ",
                                            "--lr 5e-4 ", "transformer/checkpoint_best.pt ",
                                            "--global-attn-init random ", "--lr-scale-pretrained 0.2 "],
                          ["--multi-resolution"]),
}


def test_document_to_document_models_train_on_segments_with_the_authors_settings(tmp_path):
    """doc2doc (Sun et al. 2022: multi-resolution), g-transformer (Bao et al. 2021, random
    init) and g-transformer-fnd (fine-tuned from the recipe's sentence transformer: the
    authors' run-finetune.sh, global attentions at random and the sentence weights at 0.2 x
    the learning rate) train on segments of 512 tokens with the G-Transformer authors' run
    settings; fnd needs the transformer trained first."""
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=en TGT=de; "
              'train() { local n=$1 hp=$2; shift 2; "_$hp"; echo "TRAIN $n: $hp $* ${HP[*]} "; }; '
              'step_done() { return 0; }; ' + "; ".join(f"train_model {m}" for m in SEGMENT_MODELS))
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    got = dict(t.split(": ", 1) for t in _commands(out, "TRAIN "))
    assert set(got) == set(SEGMENT_MODELS), out
    for name, (arch, has, lacks) in SEGMENT_MODELS.items():
        line = got[name]
        assert f"--arch {arch} " in line and "--doc-mode segments --max-segment-tokens 512 " in line, line
        assert all(flag in line for flag in has) and not any(flag in line for flag in lacks), (name, line)
        if arch == "g_transformer":
            for side in ("encoder", "decoder", "cross"):
                assert f"--{side}-ctxlayers 2 " in line, line
    assert got["g-transformer-fnd"].startswith("gtrans -d train-transformer -- "), got["g-transformer-fnd"]
    assert got["g-transformer"].startswith("gtrans -- ") and got["doc2doc"].startswith("vaswani -- ")
    # the smoke models have one layer: combined attention in it
    rc, out = bash(script, tmp_path, SMOKE="1")
    assert rc == 0 and "--encoder-ctxlayers 1 " in dict(t.split(": ", 1) for t in _commands(out, "TRAIN "))[
        "g-transformer"], out
    rc, out = bash(f"source {REPO}/examples/lib/models.sh; model_settings; SRC=en TGT=de; "
                   "train_model g-transformer-fnd", tmp_path)
    assert rc == 2 and "g-transformer-fnd starts from the transformer model: put transformer before" in out, out


def test_d_bleu_is_scored_over_documents_and_segment_decoding_is_reported(tmp_path):
    """METRICS d-bleu / d-bleu_tok: docctx-score bleu over whole documents (--document; one
    --both call where the sentence-level BLEU is asked for too); results.md says how many test
    segments of each segment model were decoded again sentence by sentence, of all the split's
    segments (the last line the task or docctx-generate logs for the split), with the reasons."""
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=en TGT=de BIN=bin REF_TEST=ref; "
              'docctx-score() { echo "SCORE $*"; }; '
              'echo RUN1; score_run m bleu,d-bleu,bleu_tok; echo RUN2; score_run m d-bleu_tok,meteor; '
              'mkdir -p "$LOGS"; { echo "x | 2 of 5 segments of the batch decoded again sentence by sentence (...)"; '
              'echo "x | 1 of 7 segments of the split decoded again sentence by sentence (misaligned: 0 sentence count, '
              '1 empty sentence, 0 outside the length window)"; echo "x | 3 of 9 segments of the split decoded again '
              'sentence by sentence (misaligned: 1 sentence count, 2 empty sentence, 0 outside the length window)"; } '
              '> "$LOGS/translate-g-transformer.log"; : > "$LOGS/translate-doc2doc.log"; '
              'echo NOTE $(segment_note transformer doc2doc g-transformer g-transformer-fnd); '
              'echo "docctx-generate: 0 of 12 segments of the split decoded again sentence by sentence (misaligned: '
              '0 sentence count, 0 empty sentence, 0 outside the length window)" > "$LOGS/translate-doc2doc.log"; '
              'GENERATE=(docctx-generate --processes 2 --); echo NOTE $(segment_note doc2doc)')
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    runs = out.split("RUN2")
    first, second = _commands(runs[0], "SCORE "), _commands(runs[1], "SCORE ")
    assert len(first) == 2 and first[0].startswith("bleu --both --hyp ") and "--pretokenize" not in first[0], first
    assert first[1].startswith("bleu --pretokenize moses --lang de --hyp "), first
    assert second[0].startswith("bleu --document --pretokenize moses --lang de --hyp "), second
    assert second[1].startswith("meteor "), second
    note = _commands(out, "NOTE ")[0]
    # the split's last line: every segment of the split its denominator, with the reasons
    assert ("g-transformer 3 of 9 segments decoded again sentence by sentence (misaligned: 1 sentence count, "
            "2 empty sentence, 0 outside the length window)") in note, note
    assert "doc2doc not counted (no count in" in note and "g-transformer-fnd not counted (no " in note
    assert "transformer no" not in note and "of the batch" not in note
    # docctx-generate logs the line summed over its shards: counted the same way
    assert "doc2doc 0 of 12 segments decoded again sentence by sentence" in _commands(out, "NOTE ")[1]
    rc, out = bash(f"source {REPO}/examples/lib/models.sh; model_settings; echo L $(metric_label d-bleu)", tmp_path)
    assert rc == 0 and "over whole test documents" in out, out


def test_hrnn_starts_from_random_weights_unless_hrnn_init_nematus(tmp_path):
    """Wang et al. (2017) train hrnn_context from random weights: the recipes' default; with
    HRNN_INIT=nematus every hrnn model starts from the trained Nematus baseline (a two-stage
    variant), and the note results.md gives the hrnn rows says which."""
    models = ["hrnn-init-enc", "hrnn-gating-auxi", "hrnn"]
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=zh TGT=en BIN=bin; "
              'train() { echo "TRAIN $1: ${*:3}"; }; step_done() { return 0; }; '
              + "; ".join(f"train_model {m}" for m in models) + "; echo NOTE $(hrnn_init_note)")
    for init, starts in (("", False), ("random", False), ("nematus", True)):
        rc, out = bash(script, tmp_path, **({"HRNN_INIT": init} if init else {}))
        assert rc == 0, out
        lines = [ln for ln in out.splitlines() if ln.startswith("TRAIN ")]
        assert len(lines) == len(models), out
        for line in lines:
            assert "--arch hrnn_context" in line, line
            assert ("--init-from-sentence-checkpoint" in line) == starts, line
            assert ("-d train-nematus" in line) == starts, line
        note = next(ln for ln in out.splitlines() if ln.startswith("NOTE "))
        assert ("HRNN_INIT=nematus" in note) == starts and ("random weights" in note) != starts, note
    rc, out = bash(script, tmp_path, HRNN_INIT="baseline")
    assert rc != 0 and "HRNN_INIT=baseline: random or nematus" in out, out


def test_kuang_xiong_models_train_with_bahdanau_settings(tmp_path):
    """rnnsearch and isg train as Kuang & Xiong (2018, §5.1) say: Adadelta (rho 0.95, eps 1e-6),
    80 sentences a batch, and Bahdanau et al.'s (2015) other settings: the gradient norm
    clipped at 1 (B.2) and their initialisation (B.1, --rnn-init bahdanau); Wang et al.'s
    models keep theirs."""
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; "
              'for hp in kuang wang; do "_$hp"; echo "$hp: ${HP[*]} "; done')
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    kuang = next(ln for ln in out.splitlines() if ln.startswith("kuang: "))
    wang = next(ln for ln in out.splitlines() if ln.startswith("wang: "))
    for flag in ("--optimizer adadelta ", "--adadelta-rho 0.95 ", "--adadelta-eps 1e-6 ", "--clip-norm 1 ",
                 "--rnn-init bahdanau ", "--batch-size 80 "):
        assert flag in kuang, kuang
    assert "--rnn-init" not in wang, wang


# ------------------------------------------------------------------------------ results


def test_published_scores_beside_the_runs(tmp_path, capsys):
    from fairseq_docctx.cli.score import cli_main
    from conftest import run_in_process

    (tmp_path / "a.json").write_text(json.dumps(
        {"run": "transformer", "metrics": {"bleu_tok": {"score": 20.5, "signature": "SIG"}}}))
    (tmp_path / "b.json").write_text(json.dumps({"run": "qcn", "metrics": {"bleu_tok": {"score": 21.0}}}))
    (tmp_path / "p.tsv").write_text("# comment\ntransformer\tbleu_tok\t24.55\tZhang et al. 2021, Table 1\n"
                                    "transformer\tbleu_tok\t23.28\tYang et al. 2019, Table 2\n"
                                    "mht\tbleu_tok\t26.22\tZhang et al. 2021, Table 1\n")
    rc, out, err = run_in_process(cli_main, ["table", tmp_path / "a.json", tmp_path / "b.json",
                                             "--paper-scores", tmp_path / "p.tsv"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "| run | bleu_tok | bleu_tok, paper |"
    assert lines[2] == ("| transformer | 20.50 | 24.55 (Zhang et al. 2021, Table 1) / "
                        "23.28 (Yang et al. 2019, Table 2) |")
    assert lines[3] == "| qcn | 21.00 | - |"
    assert "without a run or metric in this table: mht bleu_tok 26.22 (Zhang et al. 2021, Table 1)" in out
    (tmp_path / "bad.tsv").write_text("transformer\tbleu_tok\tn/a\tsomewhere\n")
    rc, _, err = run_in_process(cli_main, ["table", tmp_path / "a.json", "--paper-scores", tmp_path / "bad.tsv"],
                                capsys)
    assert rc == 2 and "bad.tsv, line 1: score 'n/a' is not a number" in err


# ------------------------------------------------------------------------------ end to end


def _check_smoke(work, out, models, metrics):
    results = (work / "results.md").read_text()
    assert "**SMOKE run**" in results
    head = next(ln for ln in results.splitlines() if ln.startswith("| run |"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    for name in models:
        row = next((ln for ln in results.splitlines() if ln.startswith(f"| {name} |")), None)
        assert row is not None, results
        cells = dict(zip(columns, (c.strip() for c in row.strip("|").split("|"))))
        assert all(re.fullmatch(r"\d+\.\d\d", cells[m]) for m in metrics), row
        assert (work / "checkpoints" / name / "checkpoint_best.pt").exists()
        run = json.loads((work / "scores" / f"{name}.json").read_text())
        assert set(run["metrics"]) == set(metrics)
    for m in metrics:
        if m.startswith("bleu"):
            assert re.search(rf"- {m}: nrefs:1\|.*\|version:", results), results


@pytest.mark.slow  # about 2 minutes: make test-all
@needs_data
def test_nc_ende_smoke_end_to_end_and_rerun(tmp_path):
    """examples/nc-ende/run.sh with SMOKE=1 (transformer, concat, qcn, and on segments doc2doc,
    g-transformer and g-transformer-fnd, on a slice of the bundled News Commentary dev/test
    documents): every model trained, the test documents translated (each sentence once, the
    segment models' too) and scored with BLEU and d-BLEU, results.md with the paper's numbers
    beside the scores; a second run redoes nothing."""
    work = tmp_path / "work"
    rc, out = _recipe("nc-ende", tmp_path, SMOKE="1", METRICS="bleu_tok,d-bleu_tok")
    assert rc == 0, out[-4000:]
    models = ["transformer", "concat", "qcn", "doc2doc", "g-transformer", "g-transformer-fnd"]
    _check_smoke(work, out, models, ["bleu_tok", "d-bleu_tok"])
    results = (work / "results.md").read_text()
    assert "21.67 (Yang et al. 2019, Table 2 (4+4 layers))" in results and "22.37 (Yang et al. 2019, Table 2)" in results
    assert "Segment models (trained and decoded on segments of at most 512 tokens" in results, results
    assert "initialised from" in (work / "logs" / "train-g-transformer-fnd.log").read_text()
    assert "initialised from" not in (work / "logs" / "train-g-transformer.log").read_text()
    assert "segments at 4 resolutions" in (work / "logs" / "train-doc2doc.log").read_text()
    n_ref = sum(1 for ln in (work / "smoke-data" / "test.de").read_text().splitlines() if ln.strip() != "<d>")
    for name in models:
        ids = [int(ln.split("\t")[0][2:]) for ln in (work / "generate" / name / "generate-test.txt").read_text().splitlines()
               if ln.startswith("H-")]
        assert sorted(ids) == list(range(n_ref))
    rc, out = _recipe("nc-ende", tmp_path, SMOKE="1", METRICS="bleu_tok,d-bleu_tok")
    assert rc == 0, out[-4000:]
    for step in ["prepare"] + [f"{s}-{m}" for m in models for s in ("train", "translate", "score")]:
        assert f"{step}: done with these settings" in out, out
    assert "(log:" not in out  # nothing ran again


@needs_data
@pytest.mark.slow  # about 40 s: make test-all (docctx-generate itself: tests/test_inference_shards.py)
def test_nc_ende_gen_processes_translates_again_over_two_processes(tmp_path):
    """nc-ende SMOKE with one model, then again with GEN_PROCESSES=2: only the translate and
    score steps run again, through docctx-generate over 2 processes, with the same
    translations and score."""
    work = tmp_path / "work"
    rc, out = _recipe("nc-ende", tmp_path, SMOKE="1", METRICS="bleu_tok", MODELS="concat")
    assert rc == 0, out[-4000:]

    def hypotheses(name):
        lines = (work / "generate" / name / "generate-test.txt").read_text().splitlines()
        return {ln.split("\t")[0]: ln.split("\t")[2] for ln in lines if ln.startswith("H-")}

    one = hypotheses("concat")
    score = json.loads((work / "scores" / "concat.json").read_text())["metrics"]["bleu_tok"]["score"]
    rc, out = _recipe("nc-ende", tmp_path, SMOKE="1", METRICS="bleu_tok", MODELS="concat", GEN_PROCESSES="2")
    assert rc == 0, out[-4000:]
    assert "train-concat: done with these settings" in out and "translate-concat: docctx-generate" in out, out
    assert "by 2 processes (docctx-generate)" in (work / "results.md").read_text()
    assert hypotheses("concat") == one
    assert json.loads((work / "scores" / "concat.json").read_text())["metrics"]["bleu_tok"]["score"] == score


@needs_data
@pytest.mark.slow  # about 5 minutes: make test-all
def test_ted_ende_smoke(tmp_path):
    rc, out = _recipe("ted-ende", tmp_path, SMOKE="1", timeout=1800)
    assert rc == 0, out[-4000:]
    _check_smoke(tmp_path / "work", out, ["transformer", "concat", "qcn", "han", "mht", "doc2doc", "g-transformer",
                                          "g-transformer-fnd"], ["bleu", "d-bleu", "bleu_tok", "meteor"])
    log = (tmp_path / "work" / "logs" / "train-mht.log").read_text()
    assert "source-side sentence encoder: initialised from the encoder of" in log
    assert "initialised from" in (tmp_path / "work" / "logs" / "train-han.log").read_text()


@needs_data
@pytest.mark.slow  # about 4 minutes: make test-all
def test_europarl_ende_smoke(tmp_path):
    rc, out = _recipe("europarl-ende", tmp_path, SMOKE="1", timeout=1800)
    assert rc == 0, out[-4000:]
    _check_smoke(tmp_path / "work", out, ["transformer", "qcn", "mht", "doc2doc", "g-transformer", "g-transformer-fnd"],
                 ["bleu", "d-bleu", "bleu_tok", "meteor"])


@pytest.mark.skipif(not (SHARED_DATA / "iwslt15-zhen").is_dir(), reason=f"needs the bundled corpora at {SHARED_DATA}")
@pytest.mark.slow  # about 5 minutes: make test-all
def test_ldc_zhen_smoke(tmp_path):
    """examples/ldc-zhen/run.sh with SMOKE=1 (the bundled IWSLT15 Zh-En files stand in for the
    licensed LDC/NIST data): RNNSearch and NMT_ISG from it (tuple-filtered data), Nematus and
    hrnn_context in every switch combination of Wang et al.'s Table 1 from it, NMT_ISG decoded
    with the three switches of Kuang & Xiong's Table 3, each scored with case-insensitive BLEU."""
    rc, out = _recipe("ldc-zhen", tmp_path, SMOKE="1", timeout=2400)
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    trained = ["rnnsearch", "isg", "nematus", "hrnn-init-enc", "hrnn-init-dec", "hrnn-init-enc-dec", "hrnn-auxi",
               "hrnn-gating-auxi", "hrnn"]
    runs = trained + ["isg-null", "isg-zero-gate", "isg-random-context"]
    results = (work / "results.md").read_text()
    assert "**SMOKE run**" in results and re.search(r"- dev2010: nrefs:1\|.*case:lc\|", results), results
    for name in runs:
        row = next((ln for ln in results.splitlines() if ln.startswith(f"| {name} |")), None)
        assert row is not None and re.fullmatch(r"\d+\.\d\d", row.strip("|").split("|")[1].strip()), results
    # isg starts from rnnsearch; hrnn_context from random weights (HRNN_INIT=random, Wang et al. 2017)
    assert "initialised from" in (work / "logs" / "train-isg.log").read_text()
    for name in trained[3:]:
        assert "initialised from" not in (work / "logs" / f"train-{name}.log").read_text(), name
    assert "tuple" in (work / "data-bin" / "kuang" / "docctx.json").read_text()
    log = (work / "stamps" / "translate-isg-zero-gate-dev2010.key").read_text()
    assert "isg_ablation" in log and "zero-gate" in log


@pytest.mark.skipif(not (SHARED_DATA / "iwslt15-zhen").is_dir(), reason=f"needs the bundled corpora at {SHARED_DATA}")
@pytest.mark.slow  # about 4 minutes: make test-all
def test_iwslt15_zhen_smoke(tmp_path):
    rc, out = _recipe("iwslt15-zhen", tmp_path, SMOKE="1", timeout=2400)
    assert rc == 0, out[-4000:]
    _check_smoke(tmp_path / "work", out, ["transformer", "han-encoder", "han-decoder", "han-decoder-source",
                                          "han-decoder-alignment", "han", "mht"], ["bleu", "bleu_tok"])


# ------------------------------------------------------------------------------ corpus converters

CORPORA = REPO / "examples" / "lib" / "corpora.sh"


def test_opus_moses_files_become_whole_documents_of_train_dev_and_test(tmp_path):
    """examples/lib/corpora.sh: the .ids file's first column is the document; listed documents
    go to dev and test, train stops at the first document boundary past its cap, a pair with an
    empty side is dropped and counted, a short line is an error naming the file and line."""
    docs = {"a": 3, "b": 2, "c": 4, "d": 2}
    ids, es, en = [], [], []
    for d, n in docs.items():
        for i in range(n):
            ids.append(f"en/{d}.xml.gz\tes/{d}.xml.gz\t{i}\t{i}")
            es.append(f"es {d}{i}")
            en.append("" if (d, i) == ("a", 1) else f"en {d}{i}")
    for name, lines in (("c.ids", ids), ("c.es", es), ("c.en", en)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "dev.list").write_text("en/b.xml.gz\n")
    (tmp_path / "test.list").write_text("en/d.xml.gz\n")
    rc, out = bash(f"source {CORPORA}; opus_docs $T/c.ids $T/c.es $T/c.en $T/o 3 $T/dev.list $T/test.list", tmp_path)
    assert rc == 0, out
    o = tmp_path / "o"
    # train: a (one pair dropped: an empty English side) gives 2 pairs, under the cap of 3, so
    # the next document, c, is taken whole
    assert (o / "train.docids").read_text().split() == ["en/a.xml.gz"] * 2 + ["en/c.xml.gz"] * 4
    assert (o / "train.en").read_text().splitlines() == ["en a0", "en a2", "en c0", "en c1", "en c2", "en c3"]
    assert (o / "dev.es").read_text().splitlines() == ["es b0", "es b1"]
    assert (o / "test.en").read_text().splitlines() == ["en d0", "en d1"]
    assert "train: 6 sentence pairs (1 dropped: an empty side)" in out
    rc, out = bash(f"source {CORPORA}; opus_docs $T/c.ids $T/c.es $T/c.en $T/o 1 $T/dev.list $T/test.list", tmp_path)
    assert rc == 0 and (o / "train.en").read_text().splitlines() == ["en a0", "en a2"], out
    (tmp_path / "c.en").write_text("\n".join(en[:5]) + "\n")  # fewer lines than the .ids file
    rc, out = bash(f"source {CORPORA}; opus_docs $T/c.ids $T/c.es $T/c.en $T/o 0 $T/dev.list $T/test.list", tmp_path)
    assert rc != 0 and f"{tmp_path}/c.ids, {tmp_path}/c.es, {tmp_path}/c.en: line counts differ (11/11/5)" in out, out
    (tmp_path / "c.en").write_text("\n".join(en[:10] + ["x\ty"]) + "\n")  # a tab inside a sentence is kept as a space
    (tmp_path / "c.ids").write_text("\n".join(ids[:10] + ["no-tab-line"]) + "\n")
    rc, out = bash(f"source {CORPORA}; opus_docs $T/c.ids $T/c.es $T/c.en $T/o 0 $T/dev.list $T/test.list", tmp_path)
    assert rc == 0 and (o / "train.en").read_text().splitlines()[-1] == "x y", out


def test_voita_windows_are_joined_back_into_documents(tmp_path):
    """Voita et al. (2019)'s lines (3 context sentences and the current one, joined by _eos):
    a line that continues the one before adds its last sentence; any other starts a document;
    empty leading context (document start) is dropped; unequal sentence counts are an error."""
    win = lambda xs: " _eos ".join(xs)
    src = [win(["a", "b", "c", "d"]), win(["b", "c", "d", "e"]), win(["x", "y", "z", "w"]), win(["", "", "p", "q"])]
    dst = [s.upper() for s in src]
    (tmp_path / "t.src").write_text("\n".join(src) + "\n")
    (tmp_path / "t.dst").write_text("\n".join(d.replace("_EOS", "_eos") for d in dst) + "\n")
    rc, out = bash(f"source {CORPORA}; voita_docs $T/t.src $T/t.dst $T/docs", tmp_path)
    assert rc == 0, out
    assert (tmp_path / "docs.en").read_text().split("\n")[:-1] == \
        ["<d>", "a", "b", "c", "d", "e", "<d>", "x", "y", "z", "w", "<d>", "p", "q"]
    assert (tmp_path / "docs.ru").read_text().split("\n")[1:6] == ["A", "B", "C", "D", "E"]
    assert "4 lines -> 3 documents (1 lines continued the line before)" in out
    (tmp_path / "t.dst").write_text("A _eos B\n")
    (tmp_path / "t.src").write_text("a _eos b _eos c\n")
    rc, out = bash(f"source {CORPORA}; voita_docs $T/t.src $T/t.dst $T/docs", tmp_path)
    assert rc != 0 and f"{tmp_path}/t.src, line 1: 3 source but 2 target sentences" in out, out


def test_voita_contrastive_set_json_is_read_with_each_candidates_context(tmp_path):
    """docctx-score contrastive --format voita on a hand-made file in the layout of Voita et
    al. (2019)'s consistency_testsets/*.json."""
    from fairseq_docctx.evaluation.contrastive import ContrastiveFormatError, read_voita

    data = [{"src": "a1 _eos a2 _eos a3", "dst": ["A1 _eos A2 _eos A3", "A1 _eos B2 _eos B3", "C1 _eos A2 _eos C3"],
             "true_ind": 0, "ctx_dist": 2},
            {"src": "b1 _eos b2", "dst": ["X1 _eos X2", "Y1 _eos Y2"], "true_ind": 1}]
    path = tmp_path / "ellipsis_vp_test.json"
    path.write_text(json.dumps(data))
    ex = read_voita(str(path))
    assert [e.source for e in ex] == ["a3", "b2"]
    assert ex[0].source_context == ["a1", "a2"] and ex[1].source_context == ["b1"]
    assert [(c.target, c.target_context) for c in ex[0].candidates] == \
        [("A3", ["A1", "A2"]), ("B3", ["A1", "B2"]), ("C3", ["C1", "A2"])]
    assert (ex[0].correct, ex[1].correct) == (0, 1)
    assert (ex[0].distance, ex[1].distance) == (2, None)
    assert {e.phenomenon for e in ex} == {"ellipsis_vp"}
    data[1]["dst"][1] = "Y2"  # a candidate without its context
    path.write_text(json.dumps(data))
    with pytest.raises(ContrastiveFormatError, match=r"example 2, candidate 2: 1 sentences"):
        read_voita(str(path))
    data[1]["dst"][1], data[1]["true_ind"] = "Y1 _eos Y2", 2
    path.write_text(json.dumps(data))
    with pytest.raises(ContrastiveFormatError, match=r"example 2: true_ind 2 is not a candidate index"):
        read_voita(str(path))


@pytest.mark.slow  # about 5 minutes: make test-all
def test_es_en_smoke(tmp_path):
    """examples/es-en/run.sh with SMOKE=1 on generated files in the layout of the IWSLT 2014,
    OPUS and WMT releases: each corpus prepared, transformer and han trained, translated and
    scored, its results.md beside the paper's numbers, and WORK/results.md joining them."""
    rc, out = _recipe("es-en", tmp_path, SMOKE="1", timeout=1800)
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    for corpus, paper in (("ted", "35.44"), ("subtitles", "35.20"), ("news", "21.36")):
        _check_smoke(work / corpus, out, ["transformer", "han"], ["bleu", "bleu_tok"])
        assert paper in (work / corpus / "results.md").read_text()
        assert "initialised from" in (work / corpus / "logs" / "train-han.log").read_text()
    assert (work / "results.md").read_text().count("**SMOKE run**") == 3
    split = work / "subtitles" / "split"
    assert set((split / "test.docids").read_text().split()) == set((split / "test.list").read_text().split())
    assert not set((split / "train.docids").read_text().split()) & set((split / "episodes.list").read_text().split())


@pytest.mark.slow  # about 4 minutes: make test-all
def test_opensubs_enru_smoke(tmp_path):
    """examples/opensubs-enru/run.sh with SMOKE=1 on generated files in the layout of Voita et
    al. (2019)'s release: transformer and mht (draft pipeline) trained, BLEU and the accuracy
    on each contrastive set in results.md."""
    rc, out = _recipe("opensubs-enru", tmp_path, SMOKE="1", timeout=1800)
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    sets = ["deixis_test", "lex_cohesion_test", "ellipsis_infl", "ellipsis_vp"]
    _check_smoke(work, out, ["transformer", "mht"], ["bleu", "bleu_tok"] + [f"contrastive:{s}" for s in sets])
    assert "19.46" in (work / "results.md").read_text()
    for name in ("transformer", "mht"):
        run = json.loads((work / "scores" / f"{name}.json").read_text())
        for s in sets:
            m = run["metrics"][f"contrastive:{s}"]
            assert m["examples"] == 6 and 0 <= m["correct"] <= 6


def test_es_en_news_sets_are_read_under_wmts_own_names(tmp_path, shared_data):
    """examples/es-en (News): WMT's 2008 set is news-test2008-{src,ref}.{es,en}.sgm
    (hyphenated), 2009-2013 newstestYYYY-...; wmt_es_en_sets links the real files (copied
    unmodified from WMT's dev.tgz) under one {lang} pattern, and every set reads as parallel
    documents with all its segments; a missing file is named."""
    from fairseq_docctx.data.readers import read_parallel

    real = shared_data / "wmt-es-en-dev"
    rc, out = bash(f"source {CORPORA}; wmt_es_en_sets {real} $T/wmt 'get dev.tgz'", tmp_path)
    assert rc == 0, out
    for y in range(2008, 2014):
        name = "news-test2008" if y == 2008 else f"newstest{y}"
        p = read_parallel(str(tmp_path / "wmt" / f"newstest{y}.{{lang}}.sgm"), "es", "en")
        segs = (real / f"{name}-src.es.sgm").read_text(encoding="utf-8").count("<seg ")
        assert p.num_sentences == segs > 0 and len(p.src) == len(p.tgt)
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "newstest2008-src.es.sgm").write_text("<srcset>\n")
    rc, out = bash(f"source {CORPORA}; wmt_es_en_sets $T/partial $T/wmt2 'get dev.tgz'", tmp_path)
    assert rc == 2 and f"missing {tmp_path}/partial/news-test2008-src.es.sgm: get dev.tgz" in out, out


def test_git_blob_id_is_gits_and_fetch_blob_checks_it(tmp_path):
    """recipe.sh: git_blob_id FILE equals `git hash-object FILE`; fetch_blob downloads and
    checks a file by that id (a mismatch is a clear error, the file kept)."""
    src = tmp_path / "remote.txt"
    src.write_bytes(b"<d>\r\nein Satz \xc3\xa4\n" * 300)
    want = subprocess.run(["git", "hash-object", str(src)], capture_output=True, text=True, check=True).stdout.strip()
    rc, out = bash(f"git_blob_id {src}", tmp_path)
    assert rc == 0 and out.strip() == want, out
    dest = tmp_path / "dl" / "file.txt"
    rc, out = bash(f"fetch_blob file://{src} {want} {dest}", tmp_path)
    assert rc == 0 and dest.read_bytes() == src.read_bytes(), out
    rc, out = bash(f"fetch_blob file://{src} {'0' * 40} {dest}", tmp_path)
    assert rc == 2 and f"git blob id mismatch for {dest}: {want}, expected {'0' * 40}" in out, out
    rc, out = bash(f"fetch_blob file://{tmp_path}/missing {want} {tmp_path}/x 'ask the authors'", tmp_path)
    assert rc == 2 and "could not download" in out and "ask the authors" in out, out


def test_ted_ende_downloads_its_training_side_and_nc_europarl_name_the_authors_readme(tmp_path):
    """ted-ende: a missing training side is downloaded from the authors' repository at the
    pinned commit and checked by its git blob id (a stand-in curl serves a wrong file here);
    nc-ende and europarl-ende point at the authors' data/readme.txt."""
    bin_, path = _fake_curl(tmp_path)
    data = tmp_path / "maruf"
    for corpus in ("IWSLT2017", "NC-2016", "Europarl7"):
        (data / corpus).mkdir(parents=True)
        for split in ("dev", "test"):
            for lang in ("en", "de"):
                (data / corpus / f"concatenated_en2de_{split}_{lang}.txt").write_text("<d>\na\n")
    rc, out = _recipe("ted-ende", tmp_path, DATA=str(data), PATH=path)
    url = ("https://raw.githubusercontent.com/sameenmaruf/selective-attn/1cb44c5ddd2cdf4f32ea74768a3389b52fc4db27"
           "/data/IWSLT2017/concatenated_en2de_train_en.txt")
    assert url in (bin_ / "urls").read_text()
    assert rc == 2 and "git blob id mismatch" in out and "expected c90aae48de6eebc5c539f8db559428d7ab1d9e23" in out, out
    for recipe, corpus in (("nc-ende", "NC-2016"), ("europarl-ende", "Europarl7")):
        rc, out = _recipe(recipe, tmp_path, DATA=str(data), PATH=path)
        assert rc == 2 and f"missing {data}/{corpus}/concatenated_en2de_train_en.txt" in out, out
        assert "https://github.com/sameenmaruf/selective-attn/blob/master/data/readme.txt" in out, out


def _fake_curl(tmp_path):
    """A stand-in curl on PATH: records its arguments, writes 'wrong' to its -o file."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "curl").write_text('#!/bin/bash\necho "$@" >> "$(dirname "$0")/urls"\n'
                               'for ((i = 1; i <= $#; i++)); do [[ ${!i} == -o ]] && { j=$((i + 1)); echo wrong > "${!j}"; }; done\nexit 0\n')
    (bin_ / "curl").chmod(0o755)
    return bin_, f"{bin_}:{venv_env()['PATH']}"


def test_voita_smoke_data_is_in_the_release_layout(tmp_path):
    """smoke_data.py voita-enru writes Voita et al. (2019)'s layout: the training archive's
    data_to_publish/context_aware/{en,ru}_{train,dev,test} (and context_agnostic/), and
    consistency_testsets/*.json as the repository has them (one JSON list of objects with
    dst, true_ind, src, ctx_dist; the correct candidate not always the first), which
    docctx-score's voita reader reads with true_ind as the correct candidate."""
    from fairseq_docctx.evaluation.contrastive import read_voita

    subprocess.run([sys.executable, str(REPO / "examples/lib/smoke_data.py"),
                    "voita-enru", str(tmp_path / "v")], check=True)
    for folder in ("context_aware", "context_agnostic"):
        for lang in ("en", "ru"):
            for split in ("train", "dev", "test"):
                assert (tmp_path / "v" / "data_to_publish" / folder / f"{lang}_{split}").is_file()
    ca = tmp_path / "v" / "data_to_publish" / "context_aware"
    for split in ("train", "dev", "test"):
        en, ru = ((ca / f"{lang}_{split}").read_text().splitlines() for lang in ("en", "ru"))
        assert len(en) == len(ru) and all(a.count(" _eos ") == b.count(" _eos ") <= 3 for a, b in zip(en, ru))
    correct = []
    for name in ("deixis_test", "lex_cohesion_test", "ellipsis_infl", "ellipsis_vp"):
        path = tmp_path / "v" / "consistency_testsets" / f"{name}.json"
        data = json.loads(path.read_text())
        assert all(list(ex) == ["dst", "true_ind", "src", "ctx_dist"] for ex in data)
        ex = read_voita(str(path))
        assert [e.correct for e in ex] == [d["true_ind"] for d in data]
        assert [e.candidates[e.correct].target for e in ex] == [d["dst"][d["true_ind"]].split(" _eos ")[-1] for d in data]
        correct += [e.correct for e in ex]
    assert 0 in correct and max(correct) > 0


def test_voita_groups_become_documents_and_each_test_line_scores_its_current_sentence(tmp_path):
    """voita_docs: growing groups at a document's start and overlapping groups in order join
    into one document (each sentence once); groups out of order stay apart; .current marks
    the last sentence of each line; MAX_LINES takes the first lines. current_sentences.py
    keeps exactly those sentences of the reference and of fairseq-generate's output."""
    win = lambda xs: " _eos ".join(xs)
    src = [win("ab"), win("abc"), win("abcd"), win("bcde"), win("pqrs"), win("opqr"), win("nopq")]
    (tmp_path / "t.en").write_text("\n".join(src) + "\n")
    (tmp_path / "t.ru").write_text("\n".join(s.upper().replace("_EOS", "_eos") for s in src) + "\n")
    rc, out = bash(f"source {CORPORA}; voita_docs $T/t.en $T/t.ru $T/d", tmp_path)
    assert rc == 0 and "7 lines -> 4 documents (3 lines continued the line before)" in out, out
    assert (tmp_path / "d.en").read_text().split() == \
        ["<d>", *"abcde", "<d>", *"pqrs", "<d>", *"opqr", "<d>", *"nopq"]
    assert (tmp_path / "d.current").read_text().split() == \
        ["0", "1", "1", "1", "1"] + ["0", "0", "0", "1"] * 3
    rc, out = bash(f"source {CORPORA}; voita_docs $T/t.en $T/t.ru $T/s 5", tmp_path)
    assert rc == 0 and "5 lines -> 2 documents" in out and (tmp_path / "s.en").read_text().split()[-5:] == ["<d>", *"pqrs"], out
    ru = (tmp_path / "d.ru").read_text().split()
    sents = [w for w in ru if w != "<d>"]
    (tmp_path / "gen.txt").write_text("".join(f"S-{i}\tx\nH-{i}\t-0.5\thyp{w}\nD-{i}\t-0.5\thyp{w}\n"
                                              for i, w in reversed(list(enumerate(sents)))))
    p = subprocess.run([sys.executable, str(REPO / "examples/lib/current_sentences.py"),
                        str(tmp_path / "d.current"), str(tmp_path / "d.ru"), str(tmp_path / "gen.txt"),
                        str(tmp_path / "cur" / "x")], capture_output=True, text=True, env=venv_env())
    assert p.returncode == 0 and "7 current sentences of 17 scored (10 context only)" in p.stdout, p.stdout + p.stderr
    assert (tmp_path / "cur" / "x.ref").read_text().split() == ["<d>", *"BCDE", "<d>", "S", "<d>", "R", "<d>", "Q"]
    assert (tmp_path / "cur" / "x.hyp").read_text().split() == [f"hyp{w}" for w in "BCDESRQ"]


def test_opensubs_enru_reads_the_release_layout_and_downloads_the_pinned_test_sets(tmp_path):
    """examples/opensubs-enru: DATA is the folder the archive unpacks into (a folder in
    another layout is an error naming the release's file); TESTSETS unset: the four JSON
    files are downloaded from the repository at the pinned commit and checked by sha256."""
    bin_, path = _fake_curl(tmp_path)
    old = tmp_path / "old"
    (old / "context_aware").mkdir(parents=True)
    for split in ("train", "dev", "test"):
        for ext in ("src", "dst"):
            (old / "context_aware" / f"{split}.{ext}").write_text("a _eos b\n")
    rc, out = _recipe("opensubs-enru", tmp_path, DATA=str(old), PATH=path)
    assert rc == 2 and f"missing {old}/data_to_publish/context_aware/en_train" in out, out
    assert "acl19_good_translation_wrong_in_context.zip" in out
    subprocess.run([sys.executable, str(REPO / "examples/lib/smoke_data.py"),
                    "voita-enru", str(tmp_path / "v")], check=True)
    rc, out = _recipe("opensubs-enru", tmp_path, DATA=str(tmp_path / "v"), PATH=path)
    url = ("https://raw.githubusercontent.com/lena-voita/good-translation-wrong-in-context/"
           "bb59382f6bc6c01e0cb8e58e370a8dff8198107b/consistency_testsets/deixis_test.json")
    assert url in (bin_ / "urls").read_text()
    assert rc == 2 and "checksum mismatch" in out and \
        "expected 006dff885951759513f8d67f45a14df5519450a8dbb81ac4f2a0c91220f0518a" in out, out


# ------------------------------------------------------------------------------ recipe wiring (stub tools)

def _stub_recipe(name, tmp_path, stub_tools, **env):
    e, log = stub_tools
    e = dict(e, WORK=str(tmp_path / "work"), DEVICE="cpu", **env)
    p = subprocess.run(["bash", str(REPO / "examples" / name / "run.sh")], env=e, capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr, (log.read_text().splitlines() if log.exists() else [])


@pytest.mark.slow  # ~18 s: make test-all
@pytest.mark.skipif(not (SHARED_DATA / "iwslt15-zhen").is_dir(), reason=f"needs the bundled corpora at {SHARED_DATA}")
def test_ldc_zhen_keeps_the_score_of_every_nist_set(tmp_path, stub_tools):
    """Each NIST set's score step has its own output (the step runner removes a step's outputs
    before it runs): results.md has a score in every test set's column; SMOKE tests on two
    sets so that this shows."""
    rc, out, calls = _stub_recipe("ldc-zhen", tmp_path, stub_tools, SMOKE="1", MODELS="rnnsearch,isg",
                                  ISG_SWITCHES="null")
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    assert "TEST_SETS=dev2010,tst2010" in (work / "settings.txt").read_text().splitlines()
    results = (work / "results.md").read_text()
    head = next(ln for ln in results.splitlines() if ln.startswith("| run |"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    for run in ("rnnsearch", "isg", "isg-null"):
        row = next(ln for ln in results.splitlines() if ln.startswith(f"| {run} |"))
        cells = dict(zip(columns, (c.strip() for c in row.strip("|").split("|"))))
        assert re.fullmatch(r"\d+\.\d\d", cells["dev2010"]) and re.fullmatch(r"\d+\.\d\d", cells["tst2010"]), results
        assert set(json.loads((work / "scores" / f"{run}.json").read_text())["metrics"]) == {"dev2010", "tst2010"}
    # a re-run redoes nothing and keeps both
    rc, out, _ = _stub_recipe("ldc-zhen", tmp_path, stub_tools, SMOKE="1", MODELS="rnnsearch,isg", ISG_SWITCHES="null")
    assert rc == 0 and "(log:" not in out, out[-4000:]
    assert set(json.loads((work / "scores" / "isg.json").read_text())["metrics"]) == {"dev2010", "tst2010"}


def _commands(out, prefix):
    return [ln[len(prefix):] for ln in out.splitlines() if ln.startswith(prefix)]


def test_several_gpus_keep_the_papers_batch_per_update(tmp_path):
    """fairseq's --max-tokens and --batch-size are per GPU: on NGPUS GPUs the recipes derive the
    per-GPU batch and --update-freq so that one update holds the papers' batch times
    BATCHES_PER_UPDATE (exactly where NGPUS divides it, else at most that), and the settings
    print-out says so."""
    script = (f"source {REPO}/examples/lib/models.sh; DEVICE=gpu; model_settings; recipe_settings; "
              'for hp in vaswani qcn kuang wang; do "_$hp"; echo "HP $hp: ${HP[*]} "; done')
    cases = {  # (NGPUS, BATCHES_PER_UPDATE): (per-GPU tokens, update-freq, per-GPU sentences)
        ("1", "1"): (4096, 1, 80), ("4", "1"): (1024, 1, 20), ("2", "8"): (4096, 4, 80), ("3", "4"): (2730, 2, 53)}
    for (ngpus, per_update), (tokens, uf, sentences) in cases.items():
        rc, out = bash(script, tmp_path, NGPUS=ngpus, BATCHES_PER_UPDATE=per_update)
        assert rc == 0, out
        hp = dict(ln.split(": ", 1) for ln in _commands(out, "HP "))
        assert f"--max-tokens {tokens} --update-freq {uf} " in hp["vaswani"], hp["vaswani"]
        assert f"--batch-size {sentences} --update-freq {uf} " in hp["kuang"], hp["kuang"]
        assert f"--batch-size {sentences} --update-freq {uf} " in hp["wang"], hp["wang"]
        per_update_tokens = int(ngpus) * uf * tokens
        assert per_update_tokens <= 4096 * int(per_update) < per_update_tokens + int(ngpus) * uf
        line = (f"one update (MAX_TOKENS): {ngpus} process(es) x update-freq {uf} x {tokens} tokens = "
                f"{per_update_tokens} tokens (the papers' batch: MAX_TOKENS 4096 x BATCHES_PER_UPDATE {per_update}")
        assert line in out and line in (tmp_path / "work" / "settings.txt").read_text(), out
    qcn = int(1500 / 4)  # QCN_MAX_TOKENS over 4 GPUs
    rc, out = bash(script, tmp_path, NGPUS="4", QCN_MAX_TOKENS="1500")
    assert f"--max-tokens {qcn} --update-freq 1 " in dict(ln.split(": ", 1) for ln in _commands(out, "HP "))["qcn"]
    rc, out = bash(script, tmp_path, NGPUS="2", UPDATE_FREQ="4")  # a given update-freq: the batch follows
    assert rc == 0 and "--max-tokens 512 --update-freq 4 " in out, out
    rc, out = bash(script, tmp_path, BATCHES_PER_UPDATE="0")
    assert rc == 2 and "BATCHES_PER_UPDATE=0: a number >= 1" in out, out


STEPS_SHOWN = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=en TGT=de BIN=bin REF_TEST=ref; "
               'step() { echo "STEP $1: ${*:2}"; }; step_done() { return 0; }; '
               'mkdir -p "$CKPT/transformer"; touch "$CKPT/transformer/checkpoint_best.pt"; ')


def test_num_workers_is_a_setting_with_fairseqs_default(tmp_path):
    """NUM_WORKERS (default 1, fairseq's) is --num-workers of every training and translation."""
    script = STEPS_SHOWN + "train_model transformer; translate transformer"
    for env, want in (({}, "1"), ({"NUM_WORKERS": "4"}, "4"), ({"NUM_WORKERS": "0"}, "0")):
        rc, out = bash(script, tmp_path, **env)
        assert rc == 0, out
        steps = dict(ln.split(": ", 1) for ln in _commands(out, "STEP "))
        for name in ("train-transformer", "translate-transformer"):
            assert re.findall(r"--num-workers (\S+)", steps[name]) == [want], steps[name]
    rc, out = bash(script, tmp_path, NUM_WORKERS="many")
    assert rc == 2 and "NUM_WORKERS=many" in out, out


def test_average_keeps_the_last_epoch_checkpoints_and_translates_their_mean(tmp_path):
    """AVERAGE=N: training keeps its last N epoch checkpoints (--keep-last-epochs N instead of
    --no-epoch-checkpoints), a step averages them (docctx-average) and the test set is
    translated with the mean; AVERAGE=0 (the default: none of the papers averages) translates
    checkpoint_best.pt."""
    script = STEPS_SHOWN + "train_model transformer; translate transformer; echo NOTE $(average_note)"
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    steps = dict(ln.split(": ", 1) for ln in _commands(out, "STEP "))
    assert "--no-epoch-checkpoints" in steps["train-transformer"] and "average-transformer" not in steps
    assert "--path work/checkpoints/transformer/checkpoint_best.pt " in steps["translate-transformer"].replace(
        str(tmp_path) + "/", ""), steps
    assert "AVERAGE=0" in out
    rc, out = bash(script, tmp_path, AVERAGE="3")
    assert rc == 0, out
    steps = dict(ln.split(": ", 1) for ln in _commands(out, "STEP "))
    train = steps["train-transformer"]
    assert "--keep-last-epochs 3 " in train and "--no-epoch-checkpoints" not in train, train
    avg = steps["average-transformer"]
    assert avg.startswith("-d train-transformer -o ") and "fairseq_docctx.cli.average --dir" in avg and "--last 3 " in avg
    ckpt = avg.split(" -o ")[1].split()[0]
    assert ckpt.endswith("checkpoints/transformer/checkpoint_avg3.pt")
    assert "-d average-transformer " in steps["translate-transformer"]
    assert f"--path {ckpt} " in steps["translate-transformer"], steps["translate-transformer"]
    assert "NOTE Translated with the mean of each model's last 3 epoch checkpoints (AVERAGE=3" in out, out


def test_han_joint_starts_from_han_encoder_and_stage_two_trains_one_epoch(tmp_path):
    """As Miculicich et al. (2018) ran HAN (their released commands, idiap/HAN_NMT): han (HAN
    encoder and decoder) starts from the trained han-encoder (trained first when MODELS lacks
    it), and every second stage trains one epoch; HAN_JOINT_FROM=sentence and
    HAN_STAGE2_EPOCHS=0 are today's alternatives, and results.md's note says which."""
    script = (f"source {REPO}/examples/lib/models.sh; model_settings; SRC=zh TGT=en BIN=bin; "
              'train() { echo "TRAIN $1: ${*:3} "; }; step_done() { return 0; }; '
              "train_model han-decoder; train_model han; echo NOTE $(han_note)")
    rc, out = bash(script, tmp_path)
    assert rc == 0, out
    trains = _commands(out, "TRAIN ")
    assert [t.split(":")[0] for t in trains] == ["han-decoder", "han-encoder", "han"], out
    got = dict(t.split(": ", 1) for t in trains)
    for name in ("han-decoder", "han-encoder"):
        assert got[name].startswith("-d train-transformer -- ") and "transformer/checkpoint_best.pt " in got[name]
    assert got["han"].startswith("-d train-han-encoder -- "), got["han"]
    assert "--init-from-sentence-checkpoint " in got["han"] and "han-encoder/checkpoint_best.pt " in got["han"]
    assert all("--max-epoch 1 " in t for t in got.values()), got
    note = _commands(out, "NOTE ")[0]
    assert "HAN_JOINT_FROM=encoder" in note and "1 epoch" in note, note
    rc, out = bash(script, tmp_path, HAN_JOINT_FROM="sentence", HAN_STAGE2_EPOCHS="0")
    assert rc == 0, out
    got = dict(t.split(": ", 1) for t in _commands(out, "TRAIN "))
    assert set(got) == {"han-decoder", "han"} and got["han"].startswith("-d train-transformer -- ")
    assert not any("--max-epoch" in t for t in got.values()), got
    assert "HAN_JOINT_FROM=sentence" in _commands(out, "NOTE ")[0]
    rc, out = bash(script, tmp_path, HAN_JOINT_FROM="decoder")
    assert rc == 2 and "HAN_JOINT_FROM=decoder: encoder or sentence" in out, out


def test_es_en_scores_tokenized_bleu_lowercased_and_results_say_how(tmp_path, stub_tools):
    """Miculicich et al. (2018) score lowercased text (their released outputs and references
    are lowercase): the es-en recipe's bleu_tok is lowercased, and every recipe's results.md
    says how each column was scored."""
    rc, out, calls = _stub_recipe("es-en", tmp_path, stub_tools, SMOKE="1", CORPORA="ted", MODELS="transformer")
    assert rc == 0, out[-4000:]
    scores = [c for c in calls if c.startswith("docctx-score bleu ")]
    assert len(scores) == 2, calls
    assert all(("--lowercase" in c) == ("--pretokenize" in c) for c in scores), scores  # bleu_tok only
    results = (tmp_path / "work" / "ted" / "results.md").read_text()
    assert "- `bleu`: BLEU (sacreBLEU 13a, cased, detokenized)" in results, results
    assert "- `bleu_tok`: BLEU (tokenized, lowercased" in results, results
    # elsewhere the papers' text is cased: bleu_tok too
    rc, out = bash(f"source {REPO}/examples/lib/models.sh; model_settings; echo LABEL $(metric_label bleu_tok)",
                   tmp_path)
    assert rc == 0 and "LABEL BLEU (tokenized, cased" in out, out


# ------------------------------------------------------------------------------ pretrained (examples/pretrained)

PRETRAINED_MODELS = ["wmt19-concat", "wmt19-g-transformer", "nllb-concat", "mbart25-g-transformer"]
#: the models started from transformers folders
HF_PRETRAINED_MODELS = ["opusmt-concat", "nllb-hf-concat"]


def test_pretrained_refuses_unknown_models_before_any_step(tmp_path):
    for models, line in [("nllb-g-transformer", "pretrained: error: MODELS: no model 'nllb-g-transformer' "
                                                "(wmt19-concat, wmt19-g-transformer, nllb-concat, "
                                                "mbart25-g-transformer, opusmt-concat, nllb-hf-concat)")]:
        rc, out = _recipe("pretrained", tmp_path, SMOKE="1", MODELS=models)
        assert rc == 2 and out.rstrip().splitlines()[-1] == line, out
        assert "(log:" not in out and "Traceback" not in out, out


def test_pretrained_fine_tunes_with_the_papers_settings(tmp_path, stub_tools):
    """examples/pretrained/run.sh's wiring on releases already on disk (WMT19_DIR, NLLB_DIR,
    MBART25_DIR): one data folder per release (NLLB's with its language codes), each model
    started from its release's checkpoint with the fine-tuning settings of Bao et al. (2021)'s
    run-mbart.sh (WMT19, mBART-25) or the NLLB Team's configuration (NLLB, and OPUS-MT), an update
    of their tokens, decoded with beam 5. The transformers folders (OPUSMT_DIR, NLLB_HF_DIR) are
    given whole to both docctx-prepare --pretrained and --init-from-pretrained."""
    wmt, nllb, mbart = tmp_path / "wmt19", tmp_path / "nllb", tmp_path / "mbart25"
    opusmt, nllb_hf = tmp_path / "opus-mt-en-de", tmp_path / "nllb-200-distilled-600M"
    for d, f in ((wmt, "model.pt"), (nllb, "checkpoint.pt"), (mbart, "model.pt"), (opusmt, "config.json"),
                 (nllb_hf, "config.json")):
        d.mkdir()
        (d / f).write_text("stub")
    rc, out, calls = _stub_recipe("pretrained", tmp_path, stub_tools, DATA=str(maruf_ted_files(tmp_path / "maruf")),
                                  WMT19_DIR=str(wmt), NLLB_DIR=str(nllb), MBART25_DIR=str(mbart),
                                  OPUSMT_DIR=str(opusmt), NLLB_HF_DIR=str(nllb_hf))
    assert rc == 0, out[-4000:]
    work = tmp_path / "work"
    prepare = {c.split("--destdir ")[1].split()[0]: c for c in calls if c.startswith("docctx-prepare ")}
    assert set(prepare) == {str(work / "data-bin" / f) for f in ("wmt19", "nllb", "mbart25", "opusmt", "nllb-hf")}, \
        calls
    assert f"--pretrained {opusmt} " in prepare[str(work / "data-bin" / "opusmt")]
    assert "--pretrained-langs" not in prepare[str(work / "data-bin" / "opusmt")]  # Marian: no language tokens
    assert f"--pretrained {nllb_hf} --pretrained-langs eng_Latn,deu_Latn " in \
        prepare[str(work / "data-bin" / "nllb-hf")]
    assert f"--pretrained {mbart} " in prepare[str(work / "data-bin" / "mbart25")]
    assert "--pretrained-langs" not in prepare[str(work / "data-bin" / "mbart25")]  # en_XX, de_DE found
    assert f"--pretrained {wmt} " in prepare[str(work / "data-bin" / "wmt19")]
    assert "--pretrained-langs" not in prepare[str(work / "data-bin" / "wmt19")]
    assert f"--pretrained {nllb} --pretrained-langs eng_Latn,deu_Latn " in prepare[str(work / "data-bin" / "nllb")]
    train = {c.split("--save-dir ")[1].split()[0].rsplit("/", 1)[1]: c + " " for c in calls
             if c.startswith("fairseq-train ")}
    assert set(train) == set(PRETRAINED_MODELS + HF_PRETRAINED_MODELS), calls
    bao_settings = ["--lr 3e-5 ", "--lr-scheduler polynomial_decay ", "--warmup-updates 2500 ",
                    "--total-num-update 1000000 ", "--label-smoothing 0.2 ", "--dropout 0.3 ", "--attention-dropout 0.1 ",
                    "--adam-eps 1e-06 ", "--max-tokens 2048 --update-freq 8 ", "--patience 5 "]
    bao = bao_settings + [f"--init-from-pretrained {wmt}/model.pt ", f"{work}/data-bin/wmt19 "]
    g_transformer = ["--arch g_transformer ", "--doc-mode segments ", "--max-segment-tokens 512 ",
                     "--encoder-ctxlayers 2 ", "--global-attn-init random "]
    nllb_settings = ["--lr 5e-5 ", "--lr-scheduler inverse_sqrt ", "--warmup-updates 10 ", "--warmup-init-lr 1e-07 ",
                     "--label-smoothing 0.1 ", "--dropout 0.1 ", "--attention-dropout 0.1 ",
                     "--max-tokens 4000 --update-freq 4 "]
    nllb_ft = nllb_settings + [f"--init-from-pretrained {nllb}/checkpoint.pt ", f"{work}/data-bin/nllb "]
    concat = ["--arch concat_transformer ", "--context-size 1 ", "--context-sides source "]
    for name, has in (("wmt19-concat", bao + ["--arch concat_transformer ", "--context-size 1 "]),
                      ("wmt19-g-transformer", bao + g_transformer),
                      ("mbart25-g-transformer", bao_settings + g_transformer + [
                          f"--init-from-pretrained {mbart}/model.pt ", f"{work}/data-bin/mbart25 "]),
                      ("nllb-concat", nllb_ft + concat),
                      ("opusmt-concat", nllb_settings + concat + [f"--init-from-pretrained {opusmt} ",
                                                                  f"{work}/data-bin/opusmt "]),
                      ("nllb-hf-concat", nllb_settings + concat + [f"--init-from-pretrained {nllb_hf} ",
                                                                   f"{work}/data-bin/nllb-hf "])):
        missing = [flag for flag in has if flag not in train[name]]
        assert not missing, (name, missing, train[name])
        # the network is the checkpoint's: no size given
        assert not any(f in train[name] for f in ("--encoder-layers", "--encoder-embed-dim", "--doc-noise-mask")), \
            train[name]
    gen = [c for c in calls if c.startswith("fairseq-generate ")]
    assert len(gen) == 6 and all("--beam 5 " in c and "--scoring sacrebleu" in c for c in gen), gen
    results = (work / "results.md").read_text()
    assert all(f"| {name} |" in results for name in PRETRAINED_MODELS + HF_PRETRAINED_MODELS), results
    assert f"the transformers folder {opusmt} (OPUSMT_DIR)" in results, results
    assert f"the transformers folder {nllb_hf} (NLLB_HF_DIR)" in results, results
    assert f"the release in {wmt} (WMT19_DIR)" in results and f"the release in {nllb} (NLLB_DIR)" in results
    assert f"the release in {mbart} (MBART25_DIR)" in results


def test_pretrained_downloads_are_recorded_or_checked(tmp_path):
    """No checksum is published for the releases: each download's sha256 is recorded in
    WORK/downloads.sha256 (a stand-in curl serves 'wrong' here); a sha256 given checks it; the
    NLLB language list is pinned by its git blob id in fairseq's nllb branch."""
    bin_, path = _fake_curl(tmp_path)
    data = maruf_ted_files(tmp_path / "maruf")
    work = tmp_path / "work"
    rc, out = _recipe("pretrained", tmp_path, DATA=str(data), PATH=path, MODELS="nllb-concat")
    urls = (bin_ / "urls").read_text()
    for url in ("https://tinyurl.com/nllb200densedst600mcheckpoint", "https://tinyurl.com/nllb200dictionary",
                "https://tinyurl.com/flores200sacrebleuspm",
                "https://raw.githubusercontent.com/facebookresearch/fairseq/ec0ae71a24fbc2f42252f37735f59dd6547eba38/"
                "examples/nllb/modeling/scripts/flores200/langs.txt"):
        assert url in urls, urls
    assert rc == 2 and "git blob id mismatch" in out and "expected b6670e3c2fdc2d6b46fa5582bb1ae44f65a4d4df" in out, out
    wrong = hashlib.sha256(b"wrong\n").hexdigest()
    nllb = work / "downloads" / "nllb-200-distilled-600M"
    assert sorted((work / "downloads.sha256").read_text().splitlines()) == sorted(
        f"{wrong}  {nllb / f}" for f in ("checkpoint.pt", "dictionary.txt", "sentencepiece.bpe.model"))
    assert "no published checksum, not checked" in out, out
    rc, out = _recipe("pretrained", tmp_path, DATA=str(data), PATH=path, MODELS="nllb-concat",
                      NLLB_CHECKPOINT_SHA256="0" * 64)
    assert rc == 2 and f"checksum mismatch for {nllb / 'checkpoint.pt'}: sha256 {wrong}" in out, out
    rc, out = _recipe("pretrained", tmp_path, DATA=str(data), PATH=path, MODELS="wmt19-concat")
    assert "https://dl.fbaipublicfiles.com/fairseq/models/wmt19.en-de.joined-dict.single_model.tar.gz" in \
        (bin_ / "urls").read_text()
    assert rc == 2 and "step unpack-wmt19 failed" in out, out  # 'wrong' is no archive
    assert f"{wrong}  {work / 'downloads' / 'wmt19.en-de.joined-dict.single_model.tar.gz'}" in \
        (work / "downloads.sha256").read_text().splitlines()
    rc, out = _recipe("pretrained", tmp_path, DATA=str(data), PATH=path, MODELS="mbart25-g-transformer")
    assert "https://dl.fbaipublicfiles.com/fairseq/models/mbart/mbart.cc25.v2.tar.gz" in (bin_ / "urls").read_text()
    assert rc == 2 and "step unpack-mbart25 failed" in out, out


@pytest.mark.slow  # ~10 s: make test-all
def test_pretrained_hub_model_is_downloaded_once_and_read_by_both_steps(tmp_path, stub_tools):
    """OPUSMT_DIR unset: the hub's Helsinki-NLP/opus-mt-en-de is fetched once into
    DOWNLOADS/hf-hub (examples/lib/hub_snapshot.py, docctx-prepare's own snapshot_download; here
    a hub cache made by hand, read offline), and its snapshot folder, named by the commit, is what
    both docctx-prepare --pretrained and --init-from-pretrained get; results.md records the
    revision. Not in the cache and offline: one line naming the hub id."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "work" / "downloads" / "hf-hub" / "models--Helsinki-NLP--opus-mt-en-de"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "marian"}')
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    data = str(maruf_ted_files(tmp_path / "maruf"))
    rc, out, calls = _stub_recipe("pretrained", tmp_path, stub_tools, DATA=data, MODELS="opusmt-concat",
                                  HF_HUB_OFFLINE="1")
    assert rc == 0, out[-4000:]
    prepare = [c for c in calls if c.startswith("docctx-prepare ")]
    train = [c + " " for c in calls if c.startswith("fairseq-train ")]
    assert len(prepare) == 1 and f"--pretrained {snapshot} " in prepare[0], prepare
    assert len(train) == 1 and f"--init-from-pretrained {snapshot} " in train[0], train
    results = (tmp_path / "work" / "results.md").read_text()
    assert f"the hub's Helsinki-NLP/opus-mt-en-de at revision {commit} (asked for: the default branch; " \
           f"OPUSMT_REVISION={commit} pins it)" in results, results
    rc, out, _ = _stub_recipe("pretrained", tmp_path, stub_tools, DATA=data, MODELS="nllb-hf-concat",
                              HF_HUB_OFFLINE="1", NLLB_HF_REVISION="v1")
    assert rc == 2 and "step download-nllb-hf failed" in out, out[-3000:]
    assert "facebook/nllb-200-distilled-600M@v1: not a directory, and the hub cannot give it" in out, out[-3000:]


@needs_data
@pytest.mark.slow  # about 2 minutes (130 s on 2 shared cores): make test-all
def test_pretrained_smoke(tmp_path):
    """examples/pretrained/run.sh with SMOKE=1: tiny releases in the WMT19, NLLB and mBART-25 layouts
    (examples/lib/tiny_release.py) -> docctx-prepare --pretrained -> fairseq-train
    --init-from-pretrained -> fairseq-generate -> docctx-score -> results.md: the weights are
    loaded (the separator's rows grown), every test sentence is translated once, the output text
    holds no language token nor pieces; a second run redoes nothing."""
    work = tmp_path / "work"
    rc, out = _recipe("pretrained", tmp_path, SMOKE="1", MODELS=",".join(PRETRAINED_MODELS), timeout=1800)
    assert rc == 0, out[-4000:]
    _check_smoke(work, out, PRETRAINED_MODELS, ["bleu", "d-bleu"])
    results = (work / "results.md").read_text()
    assert "Segment models (trained and decoded on segments of at most 512 tokens" in results, results
    assert all(f"a tiny local release in the {fam} layout" in results for fam in ("wmt19", "nllb", "mbart25")), results
    refs = [ln for ln in (work / "smoke-data" / "test.de").read_text().splitlines() if ln.strip() != "<d>"]
    ckpt = {"wmt19": work / "releases" / "wmt19" / "model.pt", "nllb": work / "releases" / "nllb" / "checkpoint.pt",
            "mbart25": work / "releases" / "mbart25" / "model.pt"}
    for name in PRETRAINED_MODELS:
        gen = (work / "generate" / name / "generate-test.txt").read_text()
        for kind in ("H", "D", "T"):
            ids = [int(i) for i in re.findall(rf"^{kind}-(\d+)\t", gen, re.M)]
            assert sorted(ids) == list(range(len(refs))), (name, kind)  # each test sentence once
        # in order: sentence i's reference is the test file's line i (the release's segmentation
        # undone; a piece the tiny release lacks reads <<unk>>; Moses' detokenizer does not give
        # back every space, e.g. "1: 300" for "1:300", so spaces are not compared)
        for i, ref in re.findall(r"^T-(\d+)\t(.*)$", gen, re.M):
            pattern = ".+?".join(re.escape(re.sub(r"\s", "", part)) for part in ref.split("<<unk>>"))
            assert re.fullmatch(pattern, re.sub(r"\s", "", refs[int(i)])), (name, i, ref, refs[int(i)])
        texts = re.findall(r"^[DT]-\d+\t(?:\S*\t)?(.*)$", gen, re.M)
        for bad in ("__deu_Latn__", "__eng_Latn__", "<MINED_DATA>", "[de_DE]", "[en_XX]", "@@ ", "\u2581", "&apos;",
                    "&quot;"):
            assert not any(bad in t for t in texts), (name, bad)
        log = (work / "logs" / f"train-{name}.log").read_text()
        m = re.search(r"initialised from (\S+) \(--init-from-pretrained, (?:transformer|bart)\): (\d+) loaded, "
                      r"(\d+) grown, "
                      r"(\d+) new, 0 left out", log)
        assert m and m.group(1) == str(ckpt[name.split("-")[0]]), log[-3000:]
        assert int(m.group(2)) > 0 and int(m.group(3)) >= 1, m.group(0)  # the separator's rows are new
    rc, out = _recipe("pretrained", tmp_path, SMOKE="1", MODELS=",".join(PRETRAINED_MODELS), timeout=600)
    assert rc == 0 and "(log:" not in out, out[-4000:]  # nothing ran again


@needs_data
@pytest.mark.slow  # about 35 s on 2 shared cores: make test-all
def test_pretrained_smoke_from_a_transformers_folder(tmp_path):
    """examples/pretrained/run.sh with SMOKE=1 and MODELS=opusmt-concat: a tiny OPUS-MT folder
    (examples/lib/tiny_hf_release.py: MarianTokenizer's files, a MarianMTModel) -> docctx-prepare
    --pretrained DIR -> fairseq-train --init-from-pretrained DIR -> fairseq-generate -> scores:
    the folder's weights are loaded, each test sentence is translated once, in plain text."""
    work = tmp_path / "work"
    rc, out = _recipe("pretrained", tmp_path, SMOKE="1", MODELS="opusmt-concat", timeout=600)
    assert rc == 0, out[-4000:]
    _check_smoke(work, out, ["opusmt-concat"], ["bleu", "d-bleu"])
    folder = work / "releases" / "opusmt"
    assert {"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json"} <= \
        {p.name for p in folder.iterdir()}
    manifest = json.loads((work / "data-bin" / "opusmt" / "docctx.json").read_text())
    assert manifest["pretrained"]["family"] == "marian" and manifest["pretrained"]["dir"] == str(folder), manifest
    log = (work / "logs" / "train-opusmt-concat.log").read_text()
    m = re.search(r"initialised from (\S+) \(--init-from-pretrained, transformers marian\): (\d+) loaded, (\d+) grown, "
                  r"0 new, 0 left out", log)
    assert m and m.group(1) == str(folder) and int(m.group(2)) > 0 and int(m.group(3)) >= 1, log[-3000:]
    refs = [ln for ln in (work / "smoke-data" / "test.de").read_text().splitlines() if ln.strip() != "<d>"]
    gen = (work / "generate" / "opusmt-concat" / "generate-test.txt").read_text()
    assert sorted(int(i) for i in re.findall(r"^D-(\d+)\t", gen, re.M)) == list(range(len(refs)))
    assert not any(bad in t for t in re.findall(r"^[DT]-\d+\t(?:\S*\t)?(.*)$", gen, re.M)
                   for bad in ("\u2581", "<sep>", "</s>", "<pad>")), gen[:2000]
    assert "a tiny local transformers folder in the opusmt layout" in (work / "results.md").read_text()
