#!/usr/bin/env bash
# Recipe: OpenSubtitles English-Russian with Voita et al. (2019)'s context-aware data (each
# example: the current sentence and its 3 previous sentences) and their contrastive test sets
# (deixis, lexical cohesion, ellipsis inflection, ellipsis VP), for the MHT paper's En-Ru
# setting (Zhang et al. 2021, Table 1: Transformer 19.46, MHT 20.46 BLEU). Trains the sentence
# baseline and MHT (its draft pipeline, §4.3), translates the test set, scores BLEU and the
# contrastive accuracy of each test set (docctx-score contrastive) and writes
# WORK/results.md with each score beside the paper's. README.md beside this script.
#
#   DATA=/path/to/good_translation_wrong_in_context bash examples/opensubs-enru/run.sh
#   SMOKE=1 bash examples/opensubs-enru/run.sh      # generated toy files in the same layout
#
# Data: DATA holds Voita et al. (2019)'s release (linked from
# https://github.com/lena-voita/good-translation-wrong-in-context; no file is downloaded: its
# sha256 could not be pinned when this recipe was written): context_aware/{train,dev,test}.{src,dst}
# (English source, Russian target; each line the 3 context sentences and the current one joined by
# " _eos ") and consistency_testsets/{deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp}.json.
# The lines are joined back into documents where consecutive lines continue one another (they
# overlap by three sentences); a line that does not continue the one before starts a document.
# Note: the MHT paper trained and tested on Maruf et al. (2018)'s OpenSubtitles En-Ru corpus
# (0.3M / 6K / 9K sentence pairs), which is not public; its BLEU is shown for reference only.
# SMOKE=1 without DATA writes toy files in this layout (examples/lib/smoke_data.py) to WORK/smoke-raw.
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [transformer,mht]  METRICS [bleu,bleu_tok]
#   CONTRASTIVE_SETS [deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp]
#   data: DATA [none / WORK/smoke-raw] SPM_VOCAB [30000: MHT's 30K BPE merges / 300]
#     MAX_LEN [250] MAX_LEN_RATIO [3]
#   models (examples/lib/models.sh): LAYERS [6 / 1] DIM [512 / 32] FFN [2048 / 64] HEADS [8 / 2]
#     DROPOUT [0.1] LR [7e-4 / 3e-3] WARMUP [4000 / 5] MAX_TOKENS [4096 / 1000]
#     MAX_UPDATE [100000 / 8] PATIENCE [10] CONTEXT_SIZE [3] SEED [1] BEAM [4 / 2] LENPEN [1.0]
#     GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20]
#     BATCHES_PER_UPDATE [1] UPDATE_FREQ [auto: per-GPU batch and --update-freq that keep an
#     update at the papers' batch x BATCHES_PER_UPDATE on NGPUS GPUs; printed with the settings]
#     AVERAGE [0: none of the papers averages / N: the mean of the last N epoch checkpoints]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/opensubs-enru,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
source "$RECIPE_LIB/corpora.sh"
recipe_init opensubs-enru
setting MODELS transformer,mht
setting METRICS bleu,bleu_tok
setting CONTRASTIVE_SETS deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp
setting DATA "" ""
setting SPM_VOCAB 30000 300
setting MAX_LEN 250
setting MAX_LEN_RATIO 3
model_settings
recipe_settings
SRC=en TGT=ru
PAPER_SCORES=$HERE/paper-scores.tsv
HOWTO="download Voita et al. (2019)'s data (the link in https://github.com/lena-voita/good-translation-wrong-in-context), unpack it and set DATA to the folder holding context_aware/ and consistency_testsets/; SMOKE=1 alone runs on generated toy files"

if [[ -z $DATA ]]; then
  [[ $SMOKE == 1 ]] || die "set DATA: $HOWTO"
  DATA=$WORK/smoke-raw
  step smoke-data -o "$DATA/consistency_testsets/ellipsis_vp.json" -- python "$RECIPE_LIB/smoke_data.py" voita-enru "$DATA"
fi
for split in train dev test; do
  for ext in src dst; do need_file "$DATA/context_aware/$split.$ext" "$HOWTO"; done
done
for set in ${CONTRASTIVE_SETS//,/ }; do need_file "$DATA/consistency_testsets/$set.json" "$HOWTO"; done


DOCS=$WORK/documents
mkdir -p "$DOCS"
all_docs() {
  local split
  for split in train dev test; do
    voita_docs "$DATA/context_aware/$split.src" "$DATA/context_aware/$split.dst" "$DOCS/$split" || return 1
  done
}
step documents -o "$DOCS/test.ru" -- all_docs
REF_TEST=$DOCS/test.ru
BIN=$WORK/data-bin
step prepare -d documents -o "$BIN/docctx.json" -- docctx-prepare -s en -t ru --joined-dictionary --workers "$(nproc)" \
  --trainpref "$DOCS/train" --validpref "$DOCS/dev" --testpref "$DOCS/test" \
  --spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" \
  --destdir "$BIN"

score_all() {  # NAME: BLEU of the test translations and the accuracy on each contrastive set
  local name=$1 set
  score_run "$name" "$METRICS" || return 1
  eval_checkpoint "$name"  # the checkpoint that translated the test set
  for set in ${CONTRASTIVE_SETS//,/ }; do
    docctx-score contrastive "$DATA/consistency_testsets/$set.json" --format voita \
      --path "$EVAL_CKPT" --data "$BIN" --json "$SCORES/$name.json" --name "$name" \
      $([[ $DEVICE == gpu ]] && echo --gpu) || return 1
  done
}

for name in ${MODELS//,/ }; do
  train_model "$name"
  translate "$name"
  step "score-$name" -d "translate-$name" -o "$SCORES/$name.json" -- score_all "$name"
done
sets=()
for set in ${CONTRASTIVE_SETS//,/ }; do sets+=("contrastive:$set"); done
METRICS="$METRICS,$(IFS=,; echo "${sets[*]}")"
write_results "OpenSubtitles En-Ru (Voita et al. 2019's context-aware data and contrastive sets)" ${MODELS//,/ }
