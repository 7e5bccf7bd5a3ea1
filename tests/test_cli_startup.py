"""The commands start in a fraction of a second: parsing the command line, ``--help`` and a
refused option import neither torch nor fairseq (about 3 s on the tests' machine), which the
library imports where a command loads a model or runs fairseq (``fairseq_docctx.register``).

Each command runs as the console script a user runs, with Python's import log
(``PYTHONPROFILEIMPORTTIME``); the modules it imported are read from that log."""
import os
import subprocess
import sys

import pytest

from conftest import venv_env

#: what a command may not import to parse its command line
HEAVY = ("torch", "fairseq", "sklearn", "matplotlib", "ctranslate2", "sentencepiece")

COMMANDS = ["docctx-prepare", "docctx-probe", "docctx-translate", "docctx-analyze", "docctx-score",
            "docctx-drafts", "docctx-generate", "docctx-average", "docctx-export"]


def imported(argv):
    """``(exit code, the top-level modules the command imported, stderr without the log)``."""
    script = os.path.join(os.path.dirname(sys.executable), argv[0])
    env = {**venv_env(), "PYTHONPROFILEIMPORTTIME": "1"}
    p = subprocess.run([script, *argv[1:]], env=env, capture_output=True, text=True, timeout=120)
    log = [ln for ln in p.stderr.splitlines() if ln.startswith("import time:")]
    modules = {ln.rsplit("|", 1)[1].strip().split(".")[0] for ln in log[1:]}
    return p.returncode, modules, "\n".join(ln for ln in p.stderr.splitlines() if not ln.startswith("import time:"))


def test_every_console_script_is_tested():
    from importlib.metadata import entry_points

    scripts = {e.name for e in entry_points(group="console_scripts") if e.value.startswith("fairseq_docctx.")}
    assert scripts == set(COMMANDS)


@pytest.mark.parametrize("argv", [[c, "--help"] for c in COMMANDS] + [
    ["docctx-score", "bleu", "--help"], ["docctx-score", "cxmi", "--help"], ["docctx-score", "contrastive", "--help"],
    ["docctx-probe", "evaluate", "--help"], ["docctx-export", "ctranslate2", "--help"],
    ["docctx-export", "transformers", "--help"],
    ["docctx-analyze", "qcn", "--help"],
])
def test_help_imports_neither_torch_nor_fairseq(argv):
    code, modules, err = imported(argv)
    assert code == 0, err
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
    assert "fairseq_docctx" in modules  # the log is read


@pytest.mark.parametrize("argv,line", [
    (["docctx-translate", "--path", "x.pt", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["docctx-translate", "in.txt", "--path", "x.pt", "--beam", "0"], "docctx-translate: error: --beam 0: must be "
                                                                      "at least 1"),
    (["docctx-score", "bleu", "--hyp", "h"], "the following arguments are required: --ref/-r"),
    (["docctx-average", "-o", "a.pt"], "one of the arguments --inputs --dir is required"),
])
def test_a_refused_option_imports_neither_torch_nor_fairseq(argv, line):
    code, modules, err = imported(argv)
    assert code == 2 and line in err, err
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
