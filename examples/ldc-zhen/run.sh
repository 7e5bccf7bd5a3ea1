#!/usr/bin/env bash
# Recipe: LDC Chinese-English with the NIST test sets, the data of Wang et al. (2017, §3.1:
# dev MT05, test MT06 and MT08) and Kuang & Xiong (2018, §5.1: dev NIST05, test NIST02, 03, 04,
# 06, 08). Trains Wang et al.'s Nematus baseline and hrnn_context in each switch combination of
# their Table 1 (two-stage: each starts from the baseline), Kuang & Xiong's RNNSearch and NMT_ISG
# (from RNNSearch, on tuple-filtered data), translates every NIST set with each (NMT_ISG also
# with the three inference switches of Kuang & Xiong's Table 3), scores them with the papers'
# case-insensitive BLEU-4 against the four references and writes WORK/results.md beside the
# papers' numbers. README.md beside this script.
#
#   DATA=/path/to/ldc bash examples/ldc-zhen/run.sh     # the papers' setting (licensed data)
#   SMOKE=1 bash examples/ldc-zhen/run.sh               # the bundled IWSLT15 Zh-En files instead
#
# Data (licensed by the LDC: never downloaded; every file is a setting, defaults under DATA):
#   TRAIN_ZH, TRAIN_EN [DATA/train.zh, DATA/train.en]: the training documents, sentence-aligned,
#     Chinese word-segmented and English tokenized as the papers' word vocabularies need, in a
#     document format docctx-prepare reads (a "<d>" line before each document, XML, ...);
#   for each NIST set S of VALID_SET and TEST_SETS: SRC_<S> [NIST/S.src.sgm] its source and
#     REFS_<S> [NIST/S.ref0.sgm,...,NIST/S.ref3.sgm] its four references, one file each
#     (NIST [DATA/nist]). A missing file stops the recipe naming it and the LDC catalogue numbers.
#   SMOKE=1 trains on the bundled IWSLT15 tst2010, validates on dev2010 and tests on dev2010
#   and tst2010 (one reference; two test sets, as the NIST sets are several, each its own
#   column), with SentencePiece instead of the user's segmentation.
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [rnnsearch,isg,nematus,hrnn-init-enc,hrnn-init-dec,hrnn-init-enc-dec,hrnn-auxi,
#     hrnn-gating-auxi,hrnn]  ISG_SWITCHES [null,zero-gate,random-context: Table 3's +NULL,
#     +z=0, +RV, each a decoding of isg]
#   data: DATA [WORK/data / ../shared/data/iwslt15-zhen] NIST [DATA/nist] TRAIN_ZH TRAIN_EN SRC_<S>
#     REFS_<S> (above) VALID_SET [mt05 / dev2010] TEST_SETS [mt05,mt02,mt03,mt04,mt06,mt08 /
#     dev2010,tst2010] SPM_VOCAB [0: the given words / 2500: SentencePiece] KX_VOCAB [30000: Kuang &
#     Xiong's 30K words per language] WANG_VOCAB [35000: Wang et al.'s 35K] TUPLE_MAX_LEN [50]
#     TUPLE_MAX_LEN_RATIO [3: the paper gives no ratio]
#   models (examples/lib/models.sh): RNN_DIM [the architectures' sizes / 32] RNN_BATCH [80]
#     KX_MAX_LEN [50] WANG_MAX_LEN [80] NEMATUS_LR [1e-4 / 3e-3] CONTEXT_SIZE [3: hrnn_context's K]
#     HRNN_INIT [random: as Wang et al. train / nematus: two-stage, from the trained baseline]
#     MAX_UPDATE [100000 / 8] PATIENCE [10] SEED [1] BEAM [10 / 2] LENPEN [1.0] GEN_MAX_TOKENS
#     [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20]
#     BATCHES_PER_UPDATE [1] UPDATE_FREQ [auto: per-GPU batch and --update-freq that keep an
#     update at the papers' batch x BATCHES_PER_UPDATE on NGPUS GPUs; printed with the settings]
#     AVERAGE [0: none of the papers averages / N: the mean of the last N epoch checkpoints]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/ldc-zhen,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] GEN_PROCESSES [auto: NGPUS on GPUs, 1 on the CPU]
#     EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
recipe_init ldc-zhen
setting MODELS rnnsearch,isg,nematus,hrnn-init-enc,hrnn-init-dec,hrnn-init-enc-dec,hrnn-auxi,hrnn-gating-auxi,hrnn
setting ISG_SWITCHES null,zero-gate,random-context
setting DATA "$WORK/data" ../shared/data/iwslt15-zhen
setting NIST "$DATA/nist"
setting VALID_SET mt05 dev2010
setting TEST_SETS mt05,mt02,mt03,mt04,mt06,mt08 dev2010,tst2010
iwslt() { echo "$DATA/IWSLT15.TED.$1.zh-en.$2.xml"; }
setting TRAIN_ZH "$DATA/train.zh" "$(iwslt tst2010 zh)"
setting TRAIN_EN "$DATA/train.en" "$(iwslt tst2010 en)"
SETS=()
for s in $VALID_SET ${TEST_SETS//,/ }; do [[ " ${SETS[*]} " == *" $s "* ]] || SETS+=("$s"); done
for s in "${SETS[@]}"; do
  [[ $s =~ ^[a-z0-9]+$ ]] || die "NIST set name '$s': use lower-case letters and digits (mt02)"
  setting "SRC_${s^^}" "$NIST/$s.src.sgm" "$(iwslt "$s" zh)"
  setting "REFS_${s^^}" "$NIST/$s.ref0.sgm,$NIST/$s.ref1.sgm,$NIST/$s.ref2.sgm,$NIST/$s.ref3.sgm" "$(iwslt "$s" en)"
done
setting SPM_VOCAB 0 2500
setting KX_VOCAB 30000
setting WANG_VOCAB 35000
setting TUPLE_MAX_LEN 50
setting TUPLE_MAX_LEN_RATIO 3
setting BEAM 10 2   # Kuang & Xiong (2018), §5.1 (Wang et al. do not give theirs)
model_settings
recipe_settings
SRC=zh TGT=en
PAPER_SCORES=$RECIPE_LIB/../ldc-zhen/paper-scores.tsv

# ---------------------------------------------------------------- the user's files
declare -A LDC=([mt02]=LDC2010T10 [mt03]=LDC2010T11 [mt04]=LDC2010T12 [mt05]=LDC2010T14 [mt06]=LDC2010T17 [mt08]=LDC2010T21)
HOWTO_TRAIN="the training corpus is licensed by the LDC (https://catalog.ldc.upenn.edu): Wang et al. (2017, footnote 3) \
used LDC2003E07, LDC2003E14, LDC2004T07, LDC2005E83, LDC2005T06, LDC2006E24, LDC2006E34, LDC2006E85, LDC2006E92, \
LDC2007E87, LDC2007E101, LDC2007T09, LDC2008E40, LDC2008E56, LDC2009E16 and LDC2009E95; Kuang & Xiong (2018, §5.1) \
LDC2003E14, LDC2004T07, LDC2005T06, LDC2005T10 and LDC2004T08 (Hong Kong Hansards/Laws/News). Put their \
sentence-aligned documents (Chinese word-segmented, English tokenized) in DATA/train.zh and DATA/train.en (a <d> \
line before each document, or another format docctx-prepare reads), or set TRAIN_ZH and TRAIN_EN; SMOKE=1 runs \
on the bundled IWSLT15 files instead"
howto_set() {  # SET
  local var=${1^^}
  echo "NIST $1 (${LDC[$1]:+the NIST Open MT evaluation set ${LDC[$1]}, https://catalog.ldc.upenn.edu/${LDC[$1]}, licensed}${LDC[$1]:-a set of your own}): \
set SRC_$var to its Chinese source (the SGML file) and REFS_$var to its four English references, one file each, \
comma-separated (the LDC reference file holds the four: one file per <doc sysid=...>), or put them in NIST=$NIST as \
$1.src.sgm and $1.ref0.sgm ... $1.ref3.sgm; SMOKE=1 runs on the bundled IWSLT15 files instead"
}
if [[ $SMOKE == 1 ]]; then
  DATA_MODE=smoke
else
  DATA_MODE="LDC Zh-En; NIST $VALID_SET validates (checkpoint selection); test ${TEST_SETS}"
fi
need_file "$TRAIN_ZH" "$HOWTO_TRAIN"
need_file "$TRAIN_EN" "$HOWTO_TRAIN"
declare -A SET_REFS=()
for s in "${SETS[@]}"; do
  v=SRC_${s^^}; need_file "${!v}" "$(howto_set "$s")"
  v=REFS_${s^^}
  IFS=, read -r -a refs <<< "${!v}"
  (( ${#refs[@]} > 0 )) || die "REFS_${s^^} is empty: $(howto_set "$s")"
  for r in "${refs[@]}"; do need_file "$r" "$(howto_set "$s")"; done
  SET_REFS[$s]=${!v}
done
# docctx-prepare reads PREFIX.zh / PREFIX.en: the files linked under those names
STAGE=$WORK/staged
mkdir -p "$STAGE"
ln -sfn "$(realpath "$TRAIN_ZH")" "$STAGE/train.zh"
ln -sfn "$(realpath "$TRAIN_EN")" "$STAGE/train.en"
for s in "${SETS[@]}"; do
  v=SRC_${s^^}
  ln -sfn "$(realpath "${!v}")" "$STAGE/$s.zh"
  ln -sfn "$(realpath "${SET_REFS[$s]%%,*}")" "$STAGE/$s.en"
done

# ---------------------------------------------------------------- preparation, per paper
TESTS=(${TEST_SETS//,/ })
prepare_paper() {  # NAME VOCAB MAX_LEN [docctx-prepare options]: BIN_NAME, then each test set
  local name=$1 vocab=$2 max_len=$3; shift 3
  local bin=$WORK/data-bin/$name spm=() s
  (( SPM_VOCAB > 0 )) && spm=(--spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe)
  step "prepare-$name" -o "$bin/docctx.json" -- docctx-prepare -s zh -t en --workers "$(nproc)" \
    --trainpref "$STAGE/train.{lang}" --validpref "$STAGE/$VALID_SET.{lang}" \
    --nwordssrc "$vocab" --nwordstgt "$vocab" --max-len "$max_len" "${spm[@]}" "$@" --destdir "$bin"
  (( SPM_VOCAB > 0 )) && spm=(--spm-model "$bin/spm.model")
  for s in "${TESTS[@]}"; do  # each NIST set its own test split, in the training dictionaries
    step "prepare-$name-$s" -d "prepare-$name" -o "$bin/$s/docctx.json" -- docctx-prepare -s zh -t en \
      --testpref "$STAGE/$s.{lang}" --srcdict "$bin/dict.zh.txt" --tgtdict "$bin/dict.en.txt" "${spm[@]}" \
      --destdir "$bin/$s"
  done
}
paper_of() {  # MODEL: kuang (rnnsearch, isg) or wang (nematus, hrnn*)
  case $1 in rnnsearch|isg) echo kuang ;; *) echo wang ;; esac
}
BIN_KUANG=$WORK/data-bin/kuang PREPARE_KUANG=prepare-kuang
BIN_WANG=$WORK/data-bin/wang PREPARE_WANG=prepare-wang
MODEL_LIST=(${MODELS//,/ })
if [[ " ${MODEL_LIST[*]} " =~ \ (rnnsearch|isg)\  ]]; then
  # Kuang & Xiong (2018), §5.1: 30K words, sentences of at most 50 words, and the tuple filter
  # of footnote 1 (every element of (x, before-x, y) at most 50 words, x and before-x of
  # similar lengths) on the training data
  prepare_paper kuang "$KX_VOCAB" "$KX_MAX_LEN" --tuple-max-len "$TUPLE_MAX_LEN" --tuple-max-len-ratio "$TUPLE_MAX_LEN_RATIO"
fi
if [[ " ${MODEL_LIST[*]} " =~ \ (nematus|hrnn[a-z-]*)\  ]]; then
  # Wang et al. (2017), §3.1: 35K words, sentences of at most 80 words
  prepare_paper wang "$WANG_VOCAB" "$WANG_MAX_LEN"
fi

# ---------------------------------------------------------------- train, translate, score
RUNS=()
score_set() {  # RUN SET DATA: case-insensitive BLEU-4 against every reference of SET, into
  # SCORES/RUN/SET.json (one output per step: a step's outputs are removed before it runs)
  local run=$1 s=$2 data=$3 refs=() r
  IFS=, read -r -a r <<< "${SET_REFS[$s]}"
  for f in "${r[@]}"; do refs+=(--ref "$f"); done
  mkdir -p "$SCORES/$run"
  step "score-$run-$s" -d "translate-$run-$s" -o "$SCORES/$run/$s.json" -- \
    docctx-score bleu --tokenized --lowercase --hyp "$GEN/$run/$s/generate-test.txt" --data "$data" \
      "${refs[@]}" --json "$SCORES/$run/$s.json" --name "$run" --metric-name "$s"
}
for model in "${MODEL_LIST[@]}"; do
  train_model "$model"
  eval_checkpoint "$model"
  paper=$(paper_of "$model")
  runs=("$model")
  [[ $model == isg ]] && for sw in ${ISG_SWITCHES//,/ }; do runs+=("isg-$sw"); done
  for run in "${runs[@]}"; do
    extra=()
    # Kuang & Xiong (2018), Table 3: the trained NMT_ISG decoded with +NULL, +z=0 or +RV
    [[ $run == isg-* ]] && extra=(--seed "$SEED" --model-overrides "{'isg_ablation': '${run#isg-}'}")
    set_deps=() set_scores=()
    for s in "${TESTS[@]}"; do
      generate_step "translate-$run-$s" "$WORK/data-bin/$paper/$s" "$EVAL_CKPT" "$GEN/$run/$s" \
        -d "$EVAL_STEP" -d "prepare-$paper-$s" -- "${extra[@]}"
      score_set "$run" "$s" "$WORK/data-bin/$paper/$s"
      set_deps+=(-d "score-$run-$s") set_scores+=("$SCORES/$run/$s.json")
    done
    # the run's row of results.md: its sets' scores in one file
    step "scores-$run" "${set_deps[@]}" -o "$SCORES/$run.json" -- merge_scores "$SCORES/$run.json" "${set_scores[@]}"
    RUNS+=("$run")
  done
done
METRICS=$TEST_SETS
RESULTS_NOTE="One column per NIST set: case-insensitive BLEU-4 against its references (\`docctx-score bleu --tokenized --lowercase\`: multi-bleu.perl -lc on the tokenized text, as the papers; signatures below)."
[[ " ${MODEL_LIST[*]} " =~ \ hrnn[a-z-]*\  ]] && RESULTS_NOTE+=$'\n'"$(hrnn_init_note)"
write_results "LDC Zh-En, NIST sets (test ${TEST_SETS})" "${RUNS[@]}"
