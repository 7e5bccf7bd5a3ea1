#!/usr/bin/env bash
# Recipe: TED Zh-En of the IWSLT 2015 evaluation campaign (train: the IWSLT15 Zh-En training
# talks, about 0.2M sentence pairs; dev2010 for validation; tst2010-2013 for testing), the data
# of the HAN (Miculicich et al. 2018, Table 1) and MHT (Zhang et al. 2021, Table 1) papers.
# Trains the sentence baseline, HAN in its five configurations (two-stage: each starts from the
# baseline) and MHT, translates the test talks (in document order where a model reads its own
# previous translations), scores them and writes WORK/results.md with each score beside the
# papers'. README.md beside this script.
#
#   DATA=/path/to/zh-en bash examples/iwslt15-zhen/run.sh   # the papers' setting
#   SMOKE=1 bash examples/iwslt15-zhen/run.sh               # the bundled dev2010/tst2010 files
#
# Data: DATA holds the IWSLT15 Zh-En release (texts/zh/en/zh-en.tgz of https://wit3.fbk.eu/2015-01,
# unpacked; TED talks, CC BY-NC-ND; the site hands the archive out through a form, so the recipe
# cannot download it): train.tags.zh-en.{zh,en} and IWSLT15.TED.{dev2010,tst2010,tst2011,
# tst2012,tst2013}.zh-en.{zh,en}.xml. SMOKE=1 needs only the bundled dev2010 and tst2010:
# it trains on tst2010 and validates and tests on dev2010.
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [transformer,han-encoder,han-decoder,han-decoder-source,han-decoder-alignment,han,mht]
#   METRICS [bleu,bleu_tok]
#   data: DATA [../shared/data/iwslt15-zhen: the bundled dev2010 and tst2010] TEST_SETS
#     [tst2010,tst2011,tst2012,tst2013 / dev2010] SPM_VOCAB [30000: the papers' 30K vocabulary
#     / 2500] MAX_LEN [250] MAX_LEN_RATIO [3]
#   models (examples/lib/models.sh): LAYERS [6 / 1] DIM [512 / 32] FFN [2048 / 64] HEADS [8 / 2]
#     DROPOUT [0.1] LR [7e-4 / 3e-3] WARMUP [4000 / 5] MAX_TOKENS [4096 / 1000]
#     MAX_UPDATE [100000 / 8] PATIENCE [10] CONTEXT_SIZE [3] SEED [1] BEAM [4 / 2] LENPEN [1.0]
#     GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20]
#     BATCHES_PER_UPDATE [1] UPDATE_FREQ [auto: per-GPU batch and --update-freq that keep an
#     update at the papers' batch x BATCHES_PER_UPDATE on NGPUS GPUs; printed with the settings]
#     AVERAGE [0: none of the papers averages / N: the mean of the last N epoch checkpoints]
#     HAN_JOINT_FROM [encoder: han from the trained han-encoder / sentence] HAN_STAGE2_EPOCHS [1: as
#     the HAN authors' released commands / 0: until MAX_UPDATE or PATIENCE]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/iwslt15-zhen,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] GEN_PROCESSES [auto: NGPUS on GPUs, 1 on the CPU]
#     EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
recipe_init iwslt15-zhen
setting MODELS transformer,han-encoder,han-decoder,han-decoder-source,han-decoder-alignment,han,mht
setting METRICS bleu,bleu_tok
setting DATA ../shared/data/iwslt15-zhen
setting TEST_SETS tst2010,tst2011,tst2012,tst2013 dev2010
setting SPM_VOCAB 30000 2500   # SMOKE: Chinese needs about 2,000 characters as pieces
setting MAX_LEN 250
setting MAX_LEN_RATIO 3
model_settings
recipe_settings
SRC=zh TGT=en
PAPER_SCORES=$RECIPE_LIB/../iwslt15-zhen/paper-scores.tsv
HOWTO="download the IWSLT 2015 Zh-En TED data (texts/zh/en/zh-en.tgz) from https://wit3.fbk.eu/2015-01 (a form; CC BY-NC-ND), unpack it and set DATA to its zh-en folder; SMOKE=1 runs on the bundled dev2010 and tst2010"
xml() { echo "$DATA/IWSLT15.TED.$1.zh-en.$2.xml"; }
if [[ $SMOKE == 1 ]]; then
  train="$(xml tst2010 '{lang}')"
  DATA_MODE=smoke
else
  for lang in zh en; do need_file "$DATA/train.tags.zh-en.$lang" "$HOWTO"; done
  train="$DATA/train.tags.zh-en.{lang}"
  DATA_MODE="IWSLT15 TED Zh-En: train.tags, dev2010 (validation, checkpoint selection), test ${TEST_SETS}"
fi
tests=()
for t in ${TEST_SETS//,/ } dev2010; do
  for lang in zh en; do need_file "$(xml "$t" $lang)" "$HOWTO"; done
done
for t in ${TEST_SETS//,/ }; do tests+=("$(xml "$t" '{lang}')"); done
# one reference file of the test sets, in the order docctx-prepare concatenates them
REF_TEST=$WORK/test-ref.en.xml
for t in ${TEST_SETS//,/ }; do cat "$(xml "$t" en)"; done > "$REF_TEST"
BIN=$WORK/data-bin
step prepare -o "$BIN/docctx.json" -- docctx-prepare -s zh -t en --joined-dictionary --workers "$(nproc)" \
  --trainpref "$train" --validpref "$(xml dev2010 '{lang}')" --testpref "$(IFS=,; echo "${tests[*]}")" \
  --spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" \
  --destdir "$BIN"
run_models ${MODELS//,/ }
write_results "TED Zh-En (IWSLT15; test ${TEST_SETS})" ${MODELS//,/ }
