#!/usr/bin/env bash
# Recipe: OpenSubtitles English-Russian with Voita et al. (2019)'s context-aware data (each
# example: the current sentence and its 3 previous sentences) and their contrastive test sets
# (deixis, lexical cohesion, ellipsis inflection, ellipsis VP), for the MHT paper's En-Ru
# setting (Zhang et al. 2021, Table 1: Transformer 19.46, MHT 20.46 BLEU). Trains the sentence
# baseline and MHT (its draft pipeline, §4.3), translates the test set, scores BLEU on the
# current sentence of each test example and the contrastive accuracy of each test set
# (docctx-score contrastive) and writes WORK/results.md with each score beside the paper's.
# README.md beside this script.
#
#   DATA=/path/to/unpacked-archive bash examples/opensubs-enru/run.sh
#   SMOKE=1 bash examples/opensubs-enru/run.sh      # generated toy files in the same layout
#   SMOKE=1 DATA=... TESTSETS=... bash examples/opensubs-enru/run.sh   # the chain on given files
#
# Data: DATA is the folder Voita et al.'s training archive acl19_good_translation_wrong_in_context.zip
# (linked from https://github.com/lena-voita/good-translation-wrong-in-context) unpacks into:
# DATA/data_to_publish/context_aware/{en,ru}_{train,dev,test} (each line a group of consecutive
# sentences joined by " _eos ", cased, Moses-tokenized; the last one the current sentence, the
# others its context). TESTSETS holds the consistency test sets
# {deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp}.json; by default they are
# downloaded from the repository (pinned commit, sha256 checked) into DOWNLOADS. Groups become
# documents (voita_docs, examples/lib/corpora.sh): a line continuing the one before (its
# sentences but the last are that line's last ones) adds its current sentence, any other
# starts a document. BLEU counts the current sentence of each test line once (context
# sentences are translated as context, not scored: examples/lib/current_sentences.py).
# Note: the MHT paper trained and tested on Maruf et al. (2018)'s OpenSubtitles En-Ru corpus
# (0.3M / 6K / 9K sentence pairs), which is not public; its BLEU is shown for reference only.
# SMOKE=1 without DATA writes toy files in this layout (examples/lib/smoke_data.py) to
# WORK/smoke-raw (and the test sets to WORK/smoke-raw/consistency_testsets).
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [transformer,mht]  METRICS [bleu,bleu_tok]
#   CONTRASTIVE_SETS [deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp]
#   data: DATA [none / WORK/smoke-raw] TESTSETS [downloaded / with generated data: theirs]
#     SMOKE_LINES [0 / 300: the first lines of each split with SMOKE=1; 0: all]
#     SPM_VOCAB [30000: MHT's 30K BPE merges / 300] MAX_LEN [250] MAX_LEN_RATIO [3]
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
setting BLEU_PRETOKENIZE none   # Voita et al.'s text is Moses-tokenized already: bleu_tok scores its tokens
setting CONTRASTIVE_SETS deixis_test,lex_cohesion_test,ellipsis_infl,ellipsis_vp
setting DATA "" ""
setting TESTSETS ""
setting SMOKE_LINES 0 300
setting SPM_VOCAB 30000 300
setting MAX_LEN 250
setting MAX_LEN_RATIO 3
model_settings
recipe_settings
SRC=en TGT=ru
PAPER_SCORES=$HERE/paper-scores.tsv
HOWTO="download Voita et al. (2019)'s training data (acl19_good_translation_wrong_in_context.zip, linked from https://github.com/lena-voita/good-translation-wrong-in-context), unpack it and set DATA to the folder holding data_to_publish/; SMOKE=1 alone runs on generated toy files"
# the consistency test sets: the repository at a pinned commit, each file checked by its sha256
VOITA_URL=https://raw.githubusercontent.com/lena-voita/good-translation-wrong-in-context/bb59382f6bc6c01e0cb8e58e370a8dff8198107b/consistency_testsets
declare -A VOITA_SHA256=(
  [deixis_test]=006dff885951759513f8d67f45a14df5519450a8dbb81ac4f2a0c91220f0518a
  [lex_cohesion_test]=0db3420c92b04e25bb72712ba0324261b61147ea3debaadc126dfcc7f486382d
  [ellipsis_infl]=373301d702775d80478127a88f759aad05311d82f808d340110915ce214d94d2
  [ellipsis_vp]=6e740a80f7ab42fc4942a35ff534989f28c71d80068d7231aac03bfe81ad9c2c
)

if [[ -z $DATA ]]; then
  [[ $SMOKE == 1 ]] || die "set DATA: $HOWTO"
  DATA=$WORK/smoke-raw
  step smoke-data -o "$DATA/data_to_publish/context_aware/ru_test" -o "$DATA/consistency_testsets/ellipsis_vp.json" \
    -- python "$RECIPE_LIB/smoke_data.py" voita-enru "$DATA"
  [[ -n $TESTSETS ]] || TESTSETS=$DATA/consistency_testsets
fi
CA=$DATA/data_to_publish/context_aware
for split in train dev test; do
  for lang in en ru; do need_file "$CA/${lang}_$split" "$HOWTO"; done
done
if [[ -z $TESTSETS ]]; then
  TESTSETS=$DOWNLOADS/consistency_testsets
  for set in ${CONTRASTIVE_SETS//,/ }; do
    [[ -n ${VOITA_SHA256[$set]:-} ]] || die "CONTRASTIVE_SETS: no test set '$set' (${!VOITA_SHA256[*]})"
    fetch "$VOITA_URL/$set.json" "${VOITA_SHA256[$set]}" "$TESTSETS/$set.json" \
      "no network? download consistency_testsets/$set.json of the repository and set TESTSETS to its folder"
  done
fi
for set in ${CONTRASTIVE_SETS//,/ }; do need_file "$TESTSETS/$set.json" "TESTSETS holds Voita et al.'s consistency_testsets/*.json (unset: downloaded)"; done

DOCS=$WORK/documents
mkdir -p "$DOCS"
all_docs() {
  local split
  for split in train dev test; do
    voita_docs "$CA/en_$split" "$CA/ru_$split" "$DOCS/$split" "$SMOKE_LINES" || return 1
  done
}
step documents -o "$DOCS/test.ru" -o "$DOCS/test.current" -- all_docs
REF_TEST=$DOCS/test.ru
DATA_MODE="Voita et al. (2019)'s context-aware data ($CA); BLEU on the current sentence of each test line, each once"
BIN=$WORK/data-bin
step prepare -d documents -o "$BIN/docctx.json" -- docctx-prepare -s en -t ru --joined-dictionary --workers "$(nproc)" \
  --trainpref "$DOCS/train" --validpref "$DOCS/dev" --testpref "$DOCS/test" \
  --spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" \
  --destdir "$BIN"

score_all() {  # NAME: BLEU of the current sentences' translations (each test line's once) and
  # the accuracy on each contrastive set
  local name=$1 set cur=$WORK/current/$1
  python "$RECIPE_LIB/current_sentences.py" "$DOCS/test.current" "$DOCS/test.ru" "$GEN/$name/generate-test.txt" "$cur" || return 1
  REF_TEST=$cur.ref score_run "$name" "$METRICS" "$cur.hyp" || return 1
  eval_checkpoint "$name"  # the checkpoint that translated the test set
  for set in ${CONTRASTIVE_SETS//,/ }; do
    docctx-score contrastive "$TESTSETS/$set.json" --format voita \
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
