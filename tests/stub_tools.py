"""Stand-ins for the heavy commands of the recipes and examples/mht/pipeline.sh: a recipe's
wiring (which step runs which command with which options, which outputs survive) checked in
seconds. ``fairseq-train``, ``fairseq-generate``, ``docctx-prepare``, ``docctx-drafts`` and
``docctx-score bleu|meteor`` write the files a recipe checks and record their command lines;
every other ``docctx-score`` subcommand (``table``) is the real one."""
import os
import sys

import pytest

from conftest import venv_env

STUB = r"""#!/usr/bin/env bash
# a stand-in for {name}: records its command line, writes the outputs a recipe checks
echo "{name} $*" >> "$STUB_LOG"
"$STUB_PYTHON" - {name} "$@" <<'PY'
import json, os, sys
name, args = sys.argv[1], sys.argv[2:]
def opt(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default
if name == "docctx-prepare":
    os.makedirs(opt("--destdir"), exist_ok=True)
    open(os.path.join(opt("--destdir"), "docctx.json"), "w").write("{}")
elif name == "fairseq-train":
    os.makedirs(opt("--save-dir"), exist_ok=True)
    for f in ("checkpoint_best.pt", "checkpoint_last.pt"):
        open(os.path.join(opt("--save-dir"), f), "w").write("stub")
elif name == "fairseq-generate" and opt("--results-path"):
    os.makedirs(opt("--results-path"), exist_ok=True)
    open(os.path.join(opt("--results-path"), "generate-test.txt"), "w").write("H-0\t-1\tx\n")
elif name == "docctx-score" and args[0] in ("bleu", "meteor"):
    metric = opt("--metric-name") or ("bleu_tok" if "--tokenized" in args else args[0])
    path = opt("--json")
    data = json.load(open(path)) if os.path.exists(path) else {"run": opt("--name"), "metrics": {}}
    case = "lc" if "--lowercase" in args else "mixed"
    data["metrics"][metric] = {"score": 1.0, "signature": f"nrefs:1|case:{case}|stub"}
    json.dump(data, open(path, "w"))
elif name == "docctx-score":
    sys.exit(3)  # the real one runs
PY
rc=$?
if [[ {name} == docctx-score && $rc == 3 ]]; then exec "$REAL_BIN/docctx-score" "$@"; fi
exit $rc
"""


@pytest.fixture
def stub_tools(tmp_path):
    """fairseq-train, fairseq-generate, docctx-prepare, docctx-drafts and docctx-score (bleu,
    meteor) replaced by stand-ins that write the outputs the recipe checks and record their
    command lines (``docctx-score table`` is the real one): a recipe's wiring in seconds."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    for name in ("docctx-prepare", "fairseq-train", "fairseq-generate", "docctx-drafts", "docctx-score"):
        f = bin_dir / name
        f.write_text(STUB.replace("{name}", name))
        f.chmod(0o755)
    env = venv_env()
    log = tmp_path / "stub.log"
    env.update(PATH=f"{bin_dir}:{env['PATH']}", STUB_LOG=str(log), STUB_PYTHON=sys.executable,
               REAL_BIN=os.path.dirname(sys.executable))
    return env, log


