# Shared machinery of the dataset recipes (examples/<dataset>/run.sh), sourced by each.
# Documented in docs/recipes.md. Nothing here knows a dataset or a model; models.sh holds the
# papers' training commands.
#
#   recipe_init NAME              common settings (below), work folders, device
#   setting VAR FULL [SMOKE]      VAR from the environment, else FULL (SMOKE with SMOKE=1)
#   step NAME [-d DEP]... [-o PATH]... -- COMMAND...
#                                 run COMMAND once: skipped on a re-run when it finished with
#                                 the same command line and the same DEP steps; FRESH=1 redoes
#   fetch URL SHA256 DEST [HOWTO] resumable download, checked against its sha256
#   fetch_blob URL BLOB DEST [HOWTO]  the same, checked against its git blob id (git_blob_id FILE)
#   fetch_or_record URL SHA256 DEST [HOWTO]  fetch when SHA256 is given; empty (no published
#                                 checksum): downloaded unchecked; either way its sha256 is
#                                 recorded in WORK/downloads.sha256
#   need_file PATH HOWTO          a clear error when a file the user must supply is missing
#   slice_marker FILE SKIP N OUT  documents SKIP+1 .. SKIP+N of a "<d>"-marked file
#   merge_scores OUT IN...        one run's score files (docctx-score --json) joined into OUT
#
# Common settings (environment variables, defaults in brackets):
#   SMOKE [0]   1: the whole chain on a small slice of the bundled data, tiny models, a few updates
#   FRESH [0]   1: redo every step (downloads are kept: they are checked by their sha256)
#   WORK [demo-work/recipes/NAME, NAME-smoke with SMOKE=1]  DOWNLOADS [WORK/downloads]
#   DEVICE [auto: one GPU when there is one, else CPU | gpu | cpu]  NGPUS [1: fairseq's
#   distributed training over N GPUs]  PRECISION [fp16 on a GPU | bf16 | fp32]
#   GEN_PROCESSES [auto: NGPUS on GPUs, 1 on the CPU: the test set is translated by that many
#   processes, one share of the documents each (docctx-generate; 1: plain fairseq-generate)]
#   NUM_WORKERS [1: fairseq's default; the processes that load batches, --num-workers of
#   every fairseq-train and fairseq-generate; 0 loads them in the main process]
#   EXTRA_TRAIN_ARGS, EXTRA_GEN_ARGS: appended to every fairseq-train / fairseq-generate command

RECIPE_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$RECIPE_LIB/../.." && pwd)
RECIPE_SETTINGS=()
RECIPE_NOTES=()  # derived values the settings print-out and settings.txt give after the settings

say() { printf '[%s %s +%ds] %s\n' "$RECIPE" "$(date +%H:%M:%S)" "$(( $(date +%s) - RECIPE_T0 ))" "$*"; }
die() { echo "$RECIPE: error: $*" >&2; exit 2; }

setting() {  # VAR FULL [SMOKE]: the environment's value, else the default of this mode
  local name=$1 full=$2 smoke=${3-$2}
  if [[ -z ${!name+x} ]]; then
    if [[ ${SMOKE:-0} == 1 ]]; then printf -v "$name" '%s' "$smoke"; else printf -v "$name" '%s' "$full"; fi
  fi
  RECIPE_SETTINGS+=("$name")
}

recipe_init() {  # NAME
  RECIPE=$1
  RECIPE_T0=$(date +%s)
  cd "$REPO"
  setting SMOKE 0
  setting FRESH 0
  [[ $SMOKE == 0 || $SMOKE == 1 ]] || die "SMOKE=$SMOKE: use 0 or 1"
  [[ $FRESH == 0 || $FRESH == 1 ]] || die "FRESH=$FRESH: use 0 or 1"
  setting WORK "demo-work/recipes/$RECIPE" "demo-work/recipes/$RECIPE-smoke"
  setting DOWNLOADS "$WORK/downloads"
  setting DEVICE auto
  setting NGPUS 1
  setting PRECISION ""
  setting GEN_PROCESSES auto
  setting NUM_WORKERS 1
  [[ $NUM_WORKERS =~ ^[0-9]+$ ]] || die "NUM_WORKERS=$NUM_WORKERS: use a number of processes (0: the main process)"
  setting EXTRA_TRAIN_ARGS ""
  setting EXTRA_GEN_ARGS ""
  for cmd in docctx-prepare fairseq-train fairseq-generate docctx-score python sha256sum; do
    command -v $cmd >/dev/null || die "$cmd is not on PATH: run 'make venv' and '. .venv/bin/activate'"
  done
  export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
  # torch's OpenMP threads sleep instead of spinning while they wait (a busy CPU machine)
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  STAMPS=$WORK/stamps
  LOGS=$WORK/logs
  if [[ $FRESH == 1 && -d $STAMPS ]]; then
    rm -rf "$STAMPS"
  fi
  mkdir -p "$STAMPS" "$LOGS"
  recipe_device
}

recipe_settings() {  # print and record every setting (after the recipe's own `setting` lines)
  local name
  local -A seen=()
  : > "$WORK/settings.txt"
  for name in "${RECIPE_SETTINGS[@]}"; do
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    echo "$name=${!name}" >> "$WORK/settings.txt"
  done
  say "settings ($WORK/settings.txt): $(tr '\n' ' ' < "$WORK/settings.txt")"
  local note
  for note in "${RECIPE_NOTES[@]}"; do
    echo "# $note" >> "$WORK/settings.txt"
    say "$note"
  done
}

recipe_device() {  # TRAIN_DEVICE_ARGS, GEN_DEVICE_ARGS, GENERATE from DEVICE, NGPUS, PRECISION, GEN_PROCESSES
  local gpus=0
  if [[ $DEVICE != cpu ]]; then
    gpus=$(python -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  fi
  case $DEVICE in
    auto) if (( gpus > 0 )); then DEVICE=gpu; else DEVICE=cpu; fi ;;
    gpu) (( gpus > 0 )) || die "DEVICE=gpu but torch sees no GPU" ;;
    cpu) ;;
    *) die "DEVICE=$DEVICE: use auto, gpu or cpu" ;;
  esac
  if [[ $DEVICE == cpu ]]; then
    [[ -z $PRECISION || $PRECISION == fp32 ]] || die "PRECISION=$PRECISION needs a GPU (DEVICE=$DEVICE)"
    TRAIN_DEVICE_ARGS=(--cpu)
    GEN_DEVICE_ARGS=(--cpu)
    DEVICE_NOTE="CPU"
    recipe_generate 1 ""
    return
  fi
  (( NGPUS >= 1 && NGPUS <= gpus )) || die "NGPUS=$NGPUS but torch sees $gpus GPU(s)"
  PRECISION=${PRECISION:-fp16}
  local prec=()
  case $PRECISION in
    fp16) prec=(--fp16) ;;
    bf16) prec=(--bf16) ;;
    fp32) ;;
    *) die "PRECISION=$PRECISION: use fp16, bf16 or fp32" ;;
  esac
  TRAIN_DEVICE_ARGS=(--distributed-world-size "$NGPUS" "${prec[@]}")
  GEN_DEVICE_ARGS=("${prec[@]}")
  DEVICE_NOTE="$NGPUS GPU(s), $PRECISION"
  # the GPUs the processes run on: the first NGPUS of CUDA_VISIBLE_DEVICES, else 0..NGPUS-1
  local visible=() devices
  IFS=, read -r -a visible <<< "${CUDA_VISIBLE_DEVICES:-}"
  (( ${#visible[@]} > 0 )) || visible=($(seq 0 $(( NGPUS - 1 ))))
  devices=$(IFS=,; echo "${visible[*]:0:$NGPUS}")
  recipe_generate "$NGPUS" "$devices"
}

recipe_generate() {  # AUTO_PROCESSES DEVICES: GENERATE, the command that translates a split
  # (fairseq-generate's arguments follow it): plain fairseq-generate for one process, else
  # docctx-generate over GEN_PROCESSES processes (documents shared out, outputs merged in
  # sentence-id order: the same content as one process's output)
  local n=$GEN_PROCESSES
  [[ $n == auto ]] && n=$1
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "GEN_PROCESSES=$GEN_PROCESSES: use auto or a number of processes"
  if (( n == 1 )); then
    GENERATE=(fairseq-generate)
    return
  fi
  command -v docctx-generate >/dev/null || die "docctx-generate is not on PATH: run 'make venv' and '. .venv/bin/activate'"
  GENERATE=(docctx-generate --processes "$n" ${2:+--devices "$2"} --)
  DEVICE_NOTE+="; test sets translated by $n processes (docctx-generate)"
}

_stamp_hash() { sha256sum | cut -c1-64; }

step() {  # NAME [-d DEP]... [-o PATH]... -- COMMAND...
  local name=$1; shift
  local deps=() outs=() d o key hash
  while [[ $# -gt 0 && $1 != -- ]]; do
    case $1 in
      -d) deps+=("$2"); shift 2 ;;
      -o) outs+=("$2"); shift 2 ;;
      *) die "step $name: unknown option $1" ;;
    esac
  done
  [[ ${1:-} == -- ]] || die "step $name: no command"
  shift
  key=$(printf '%q ' "$@")
  for d in "${deps[@]}"; do
    [[ -f $STAMPS/$d.done ]] || die "step $name needs step $d, which has not finished"
    key+=$'\n'"after $d $(cat "$STAMPS/$d.done")"
  done
  hash=$(printf '%s' "$key" | _stamp_hash)
  if [[ -f $STAMPS/$name.done && $(cat "$STAMPS/$name.done") == "$hash" ]]; then
    local missing=
    for o in "${outs[@]}"; do [[ -e $o ]] || missing=$o; done
    if [[ -z $missing ]]; then
      say "$name: done with these settings (FRESH=1 redoes it)"
      return
    fi
  fi
  rm -f "$STAMPS/$name.done"
  # a step interrupted with the same settings goes on (fairseq-train resumes from
  # checkpoint_last.pt); with other settings its outputs are removed first
  if [[ ! -f $STAMPS/$name.started || $(cat "$STAMPS/$name.started") != "$hash" ]]; then
    for o in "${outs[@]}"; do rm -rf "$o"; done
  fi
  echo "$hash" > "$STAMPS/$name.started"
  printf '%s\n' "$key" > "$STAMPS/$name.key"
  say "$name: $1 ... (log: $LOGS/$name.log)"
  if ! "$@" > "$LOGS/$name.log" 2>&1; then
    tail -25 "$LOGS/$name.log" >&2
    die "step $name failed (the whole log: $LOGS/$name.log)"
  fi
  for o in "${outs[@]}"; do [[ -e $o ]] || die "step $name finished but wrote no $o (see $LOGS/$name.log)"; done
  echo "$hash" > "$STAMPS/$name.done"
}

step_done() { [[ -f $STAMPS/$1.done ]]; }

fetch() {  # URL SHA256 DEST [HOWTO]: resumable download (curl -C -), checked against SHA256
  _download "$1" "$3" "${4:-}"
  _check_sum "$3" "$2"
}

fetch_blob() {  # URL BLOB DEST [HOWTO]: resumable download, checked against its git blob id:
  # a file of a public git repository is pinned by the id its tree records (git ls-tree), known
  # without downloading the file
  local got
  _download "$1" "$3" "${4:-}"
  got=$(git_blob_id "$3")
  [[ $got == "$2" ]] || die "git blob id mismatch for $3: $got, expected $2 (a changed or damaged download: delete the file to download it again)"
}

fetch_or_record() {  # URL SHA256 DEST [HOWTO]: fetch when SHA256 is given; empty (a file whose
  # checksum is not published): downloaded unchecked; the file's sha256 is recorded in
  # WORK/downloads.sha256 ("SHA256  DEST", one line a file) either way, so that it can be pinned
  if [[ -n $2 ]]; then
    fetch "$1" "$2" "$3" "${4:-}"
  else
    _download "$1" "$3" "${4:-}"
  fi
  local got record=$WORK/downloads.sha256
  got=$(sha256sum < "$3" | cut -c1-64)
  { [[ -f $record ]] && awk -v f="$3" 'substr($0, 67) != f' "$record"; echo "$got  $3"; } > "$record.part"
  mv "$record.part" "$record"
  [[ -n $2 ]] || say "$3: no published checksum, not checked; its sha256 $got is recorded in $record"
}

_download() {  # URL DEST HOWTO: DEST downloaded unless it is there (DEST.part until complete)
  local url=$1 dest=$2 howto=$3
  [[ -f $dest ]] && return
  mkdir -p "$(dirname "$dest")"
  command -v curl >/dev/null || die "curl is needed to download $url${howto:+ -- $howto}"
  say "downloading $url -> $dest (resumable: a re-run goes on where it stopped)"
  curl -fL --retry 3 -C - -o "$dest.part" "$url" || die "could not download $url${howto:+ -- $howto}"
  mv "$dest.part" "$dest"
}

git_blob_id() {  # FILE: git's id of the file's content (git hash-object): the sha1 of
  # "blob SIZE\0" followed by the content
  { printf 'blob %d\0' "$(wc -c < "$1")"; cat "$1"; } | sha1sum | cut -c1-40
}

_check_sum() {  # FILE SHA256
  local got
  got=$(sha256sum < "$1" | cut -c1-64)
  [[ $got == "$2" ]] || die "checksum mismatch for $1: sha256 $got, expected $2 (a changed or damaged download: delete the file to download it again)"
}

need_file() {  # PATH HOWTO
  [[ -f $1 ]] || die "missing $1: $2"
}

slice_marker() {  # FILE SKIP N OUT: documents SKIP+1 .. SKIP+N of a "<d>"-marked file
  tr -d '\r' < "$1" | awk -v a="$2" -v n="$3" '
    /^[[:space:]]*<d>[[:space:]]*$/ { d++ }
    d > a && d <= a + n' > "$4"
  grep -q '<d>' "$4" || die "$1 has fewer than $(( $2 + 1 )) documents"
}

merge_scores() {  # OUT IN...: the metrics of one run's score files (docctx-score --json, one
  # step each) joined into OUT; a metric in two files, or two runs, is an error
  python - "$@" <<'PY'
import json, sys
out, ins = sys.argv[1], sys.argv[2:]
merged = {"run": None, "files": {}, "metrics": {}}
origin = {}
for path in ins:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if merged["run"] is not None and data.get("run") != merged["run"]:
        sys.exit(f"merge_scores: {path} scores run {data.get('run')!r}, {ins[0]} run {merged['run']!r}")
    merged["run"] = data.get("run")
    merged["files"].update(data.get("files", {}))
    for name, metric in data.get("metrics", {}).items():
        if name in origin:
            sys.exit(f"merge_scores: metric {name!r} is in {origin[name]} and in {path}")
        origin[name] = path
        merged["metrics"][name] = metric
with open(out + ".part", "w", encoding="utf-8") as f:
    json.dump(merged, f, indent=1, ensure_ascii=False)
    f.write("\n")
import os
os.replace(out + ".part", out)
PY
}
