#!/usr/bin/env bash
# The wheels a GPU machine without network needs to run `python -m benchmarks.gpu_check`:
# what fairseq_docctx and fairseq (ve-fairseq, the fork the Makefile installs) import that a
# standard PyTorch installation (torch and its own dependencies: filelock, fsspec, jinja2,
# networkx, sympy, typing-extensions, setuptools) lacks, at the versions of requirements.txt,
# downloaded here into .whl/ for CPython 3.12 on manylinux x86_64.
#
# Usage (repository root, a machine with the package registry):
#   bash benchmarks/device_wheels.sh              # .whl/, ~46 MiB
#   WITH_CT2=1 bash benchmarks/device_wheels.sh   # + ctranslate2 (43 MB more; see below)
#   PYVER=3.11 DEST=/tmp/whl311 bash benchmarks/device_wheels.sh   # another Python, another folder
# On the GPU machine (repository root, .whl/ beside it):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD && python3 -m benchmarks.gpu_check
#
# ctranslate2 is left out unless WITH_CT2=1: its wheel (43 MB) does not fit beside the others
# in a 64 MiB transfer, and its GPU build loads CUDA 12's cuBLAS (libcublas.so.12) at run time,
# which a CUDA 13 PyTorch does not bring; without it gpu_check skips its CTranslate2 part and
# says why. antlr4-python3-runtime 4.9.3 (omegaconf's parser runtime) has no wheel on the
# registry, only a source archive of pure Python: it is built into a py3-none-any wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
PIP=${PIP:-python3 -m pip}
# name==version: fairseq and what it imports, hydra/omegaconf and theirs, sacrebleu and
# its dependencies, and this package's runtime dependencies (setup.py, requirements.txt)
WHEELS=(
  ve-fairseq==0.12.3
  hydra-core==1.3.8 omegaconf==2.3.1 PyYAML==6.0.4 packaging==26.3
  bitarray==3.12.3 regex==2026.11.15 tqdm==4.70.1 numpy==2.4.6
  sacrebleu==2.6.0 portalocker==4.4.2 tabulate==0.10.0 colorama==0.4.6 lxml==6.1.3
  sentencepiece==0.2.3
  sacremoses==0.2.0 click==8.5.1 joblib==1.6.0
)
if [[ -n ${WITH_CT2:-} ]]; then
  WHEELS+=(ctranslate2==4.8.5)
fi
mkdir -p "$DEST"
for w in "${WHEELS[@]}"; do
  $PIP download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" "$w"
done
# pure Python, source only on the registry: a wheel built from it (no compiler involved)
$PIP wheel -q --no-deps --no-binary=antlr4-python3-runtime -w "$DEST" antlr4-python3-runtime==4.9.3
ls -1 "$DEST"
du -sh "$DEST"
