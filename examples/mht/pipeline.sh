#!/usr/bin/env bash
# The Multi-Hop Transformer's four training steps (Zhang et al. 2021, §4.3), then the test set:
#
#   (1) a sentence-level src->tgt transformer;
#   (2) a sentence-level tgt->src transformer (same sizes);
#   (3) drafts: (1) translates every source sentence of train/valid/test (docctx-drafts);
#   (4) mht_transformer, its source-side sentence encoder initialised from (1)'s encoder and
#       its target-side one from (2)'s;
#   (5) beam search on the test split (drafts given: ordinary batches, not document order) and
#       BLEU of the post-processed text (SentencePiece pieces joined back into words).
#
#   DATA_BIN=data-bin bash examples/mht/pipeline.sh
#
# DATA_BIN is a data directory prepared by docctx-prepare with train, valid and test splits
# (use --joined-dictionary: the tgt->src model reads the target dictionary as its source).
# Run it with the environment active (`. .venv/bin/activate`, after `make venv`).
#
# Each step is skipped when it finished before with the same settings (a stamp file in
# WORK/ holds them); an interrupted step goes on where it stopped (fairseq-train restores
# checkpoint_last.pt, docctx-drafts skips its finished chunks). FRESH=1 starts over.
#
# Settings (environment variables, defaults in brackets):
#   DATA_BIN (required)  WORK [mht-work]  FRESH [0]
#   SRC, TGT [the data directory's languages, from its docctx.json]
#   CONTEXT_SIZE [3]  CONTEXT_SIDES [src,draft; src,ref,draft with --mht-target-context reference]
#   MHT_ARGS [''; e.g. '--mht-direction r2l' or '--mht-context-sides source']
#   model (all four): LAYERS [6] DIM [512] FFN [2048] HEADS [8] DROPOUT [0.1]
#   optimisation: LR [7e-4: Vaswani et al. (2017)'s schedule, which peaks at 512^-0.5 * 4000^-0.5;
#     the MHT paper's Thumt learning rate of 0.1 (Zhang et al. 2021, §4.3) is a multiplier of
#     Thumt's own schedule, not a peak: the same value as the recipes' LR, examples/lib/models.sh]
#     WARMUP [4000] MAX_TOKENS [4096] MAX_UPDATE [100000 sentence models,
#     MHT_MAX_UPDATE for MHT, default MAX_UPDATE] PATIENCE [10; validation loss, 0 = off]
#   BEAM [4] DRAFT_BEAM [BEAM] DEVICE_ARGS [--cpu without a GPU, --fp16 with one]
#   POST_PROCESS [auto: sentencepiece when DATA_BIN has a SentencePiece model (its docctx.json),
#     else none]: fairseq-generate --post-process, so that the BLEU printed (sacreBLEU,
#     --scoring sacrebleu) is that of words, not of pieces
#   NUM_WORKERS [1: fairseq's default]: --num-workers of training and generation
#   EXTRA_TRAIN_ARGS: appended to every fairseq-train command
#
# Smoke test on CPU (a meaningless model, about a minute on toy data):
#   DATA_BIN=... LAYERS=1 DIM=32 FFN=64 HEADS=2 MAX_UPDATE=20 BEAM=2 bash examples/mht/pipeline.sh
set -euo pipefail

: "${DATA_BIN:?set DATA_BIN to a data directory prepared by docctx-prepare}"
WORK=${WORK:-mht-work}
FRESH=${FRESH:-0}
CONTEXT_SIZE=${CONTEXT_SIZE:-3}
CONTEXT_SIDES=${CONTEXT_SIDES:-src,draft}
MHT_ARGS=${MHT_ARGS:-}
LAYERS=${LAYERS:-6}
DIM=${DIM:-512}
FFN=${FFN:-2048}
HEADS=${HEADS:-8}
DROPOUT=${DROPOUT:-0.1}
LR=${LR:-7e-4}
WARMUP=${WARMUP:-4000}
MAX_TOKENS=${MAX_TOKENS:-4096}
MAX_UPDATE=${MAX_UPDATE:-100000}
MHT_MAX_UPDATE=${MHT_MAX_UPDATE:-$MAX_UPDATE}
PATIENCE=${PATIENCE:-10}
BEAM=${BEAM:-4}
DRAFT_BEAM=${DRAFT_BEAM:-$BEAM}
POST_PROCESS=${POST_PROCESS:-auto}
NUM_WORKERS=${NUM_WORKERS:-1}
EXTRA_TRAIN_ARGS=${EXTRA_TRAIN_ARGS:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)

say() { printf '[mht %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { echo "pipeline: error: $*" >&2; exit 2; }

[[ -d $DATA_BIN ]] || die "DATA_BIN=$DATA_BIN: no such directory"
for cmd in fairseq-train fairseq-generate docctx-drafts python; do
  command -v $cmd >/dev/null || die "$cmd is not on PATH: activate .venv first (make venv)"
done
read -r M_SRC M_TGT M_SPM < <(python -c "
import sys
from fairseq_docctx.data.manifest import read_manifest, spm_model_path
m = read_manifest(sys.argv[1]) or {}
print(m.get('source_lang') or '-', m.get('target_lang') or '-', 1 if spm_model_path(sys.argv[1]) else 0)" "$DATA_BIN") || true
[[ -n ${SRC:-} || ${M_SRC:--} == - ]] || SRC=$M_SRC
[[ -n ${TGT:-} || ${M_TGT:--} == - ]] || TGT=$M_TGT
if [[ $POST_PROCESS == auto ]]; then
  if [[ ${M_SPM:-0} == 1 ]]; then POST_PROCESS=sentencepiece; else POST_PROCESS=none; fi
fi
[[ -n ${SRC:-} && -n ${TGT:-} ]] || die "$DATA_BIN has no docctx.json naming its languages: set SRC and TGT"
if [[ -z ${DEVICE_ARGS+x} ]]; then
  if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    DEVICE_ARGS=--fp16
  else
    DEVICE_ARGS=--cpu
  fi
fi
export PYTHONWARNINGS=ignore OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

if [[ $FRESH == 1 ]]; then
  say "FRESH=1: removing $WORK/"
  rm -rf "$WORK"
fi
mkdir -p "$WORK"
stamp_ok() { [[ -f $WORK/$1.done && "$(cat "$WORK/$1.done")" == "$2" ]]; }
stamp() { echo "$2" > "$WORK/$1.done"; }

MODEL=(--encoder-layers "$LAYERS" --decoder-layers "$LAYERS" --encoder-embed-dim "$DIM"
  --decoder-embed-dim "$DIM" --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN"
  --encoder-attention-heads "$HEADS" --decoder-attention-heads "$HEADS" --dropout "$DROPOUT"
  --share-all-embeddings)
OPTIM=(--optimizer adam --adam-betas '(0.9, 0.98)' --lr "$LR" --lr-scheduler inverse_sqrt
  --warmup-updates "$WARMUP" --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --max-tokens "$MAX_TOKENS" --no-epoch-checkpoints --log-format simple --log-interval 100
  --num-workers "$NUM_WORKERS")
(( PATIENCE > 0 )) && OPTIM+=(--patience "$PATIENCE")
# shellcheck disable=SC2206
EXTRA=($EXTRA_TRAIN_ARGS)

train() {  # name, max updates, fairseq-train arguments...
  local name=$1 updates=$2; shift 2
  local args=("$DATA_BIN" --user-dir "$REPO/fairseq_docctx" --task document_translation
    "$@" "${MODEL[@]}" "${OPTIM[@]}" --max-update "$updates" --save-dir "$WORK/$name" $DEVICE_ARGS "${EXTRA[@]}")
  local key="${args[*]}"
  if stamp_ok "$name" "$key" && [[ -f $WORK/$name/checkpoint_best.pt ]]; then
    say "reusing $WORK/$name/"
    return
  fi
  say "training $name -> $WORK/$name/ (log: $WORK/$name.log)"
  fairseq-train "${args[@]}" > "$WORK/$name.log" 2>&1 \
    || { tail -20 "$WORK/$name.log" >&2; die "training $name failed (see $WORK/$name.log)"; }
  stamp "$name" "$key"
}

# (1), (2): the two sentence-level models
train fwd "$MAX_UPDATE" --context-size 0 -s "$SRC" -t "$TGT" --arch transformer
train bwd "$MAX_UPDATE" --context-size 0 -s "$TGT" -t "$SRC" --arch transformer

# (3) drafts of every split, by (1)
key="$WORK/fwd/checkpoint_best.pt beam $DRAFT_BEAM $(stat -c %Y "$WORK/fwd/checkpoint_best.pt")"
if stamp_ok drafts "$key"; then
  say "reusing the drafts in $DATA_BIN/"
else
  say "(3) docctx-drafts: translating train, valid and test with $WORK/fwd/checkpoint_best.pt"
  docctx-drafts "$DATA_BIN" --path "$WORK/fwd/checkpoint_best.pt" --splits train,valid,test \
    --beam "$DRAFT_BEAM" --max-tokens "$MAX_TOKENS" $DEVICE_ARGS
  stamp drafts "$key"
fi

# (4) the Multi-Hop Transformer, its sentence encoders from (1) and (2)
# shellcheck disable=SC2206
MHT=($MHT_ARGS)
train mht "$MHT_MAX_UPDATE" --context-size "$CONTEXT_SIZE" --context-sides "$CONTEXT_SIDES" --arch mht_transformer \
  -s "$SRC" -t "$TGT" --src-sentence-encoder-from "$WORK/fwd/checkpoint_best.pt" \
  --tgt-sentence-encoder-from "$WORK/bwd/checkpoint_best.pt" "${MHT[@]}"

# (5) the test split: beam search with the drafts given; sacreBLEU of the post-processed text
# (POST_PROCESS: the pieces joined back into words, as the references are)
post=()
[[ $POST_PROCESS == none ]] || post=(--post-process "$POST_PROCESS")
say "(5) fairseq-generate on the test split -> $WORK/test.out (BLEU after --post-process $POST_PROCESS)"
fairseq-generate "$DATA_BIN" --user-dir "$REPO/fairseq_docctx" --task document_translation \
  -s "$SRC" -t "$TGT" --path "$WORK/mht/checkpoint_best.pt" --gen-subset test --beam "$BEAM" \
  --max-tokens "$MAX_TOKENS" --required-batch-size-multiple 1 --num-workers "$NUM_WORKERS" \
  "${post[@]}" --scoring sacrebleu $DEVICE_ARGS > "$WORK/test.out" 2> "$WORK/test.log" \
  || { tail -20 "$WORK/test.log" >&2; die "fairseq-generate failed (see $WORK/test.log)"; }
grep -h "BLEU" "$WORK/test.out" "$WORK/test.log" | tail -1 | sed 's/^/    /' || true
say "done: $WORK/mht/checkpoint_best.pt, translations in $WORK/test.out"
