#!/usr/bin/env bash
# Recipe: document models started from public pretrained translation models (fairseq releases and
# Hugging Face transformers folders; --init-from-pretrained, docs/pretrained.md), fine-tuned on
# TED En-De (IWSLT17, Maruf et al. 2019's split: the data of examples/ted-ende), translated and
# scored; WORK/results.md.
# README.md beside this script.
#
#   bash examples/pretrained/run.sh               # downloads the releases (checkpoints of GBs)
#   SMOKE=1 bash examples/pretrained/run.sh       # tiny local releases in the same layouts, no network
#
# Models (MODELS, comma-separated):
#   wmt19-concat           WMT19 En->De single model (Ng et al. 2019) -> concat_transformer
#   wmt19-g-transformer    the same release -> g_transformer on segments (Bao et al. 2021)
#   nllb-concat            NLLB-200 distilled 600M (NLLB Team 2022) -> concat_transformer
#   mbart25-g-transformer  mBART-25 (Liu et al. 2020) -> g_transformer on segments, as the
#                          G-Transformer authors' run-mbart.sh (Bao et al. 2021)
#   opusmt-concat          OPUS-MT en-de (Tiedemann & Thottingal 2020), its transformers folder
#                          (Helsinki-NLP/opus-mt-en-de) -> concat_transformer
#   nllb-hf-concat         NLLB-200 distilled 600M from its transformers folder
#                          (facebook/nllb-200-distilled-600M) -> concat_transformer
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [wmt19-concat,wmt19-g-transformer,nllb-concat,mbart25-g-transformer,opusmt-concat,
#     nllb-hf-concat]  METRICS [bleu,d-bleu]
#   data (examples/lib/maruf-ende.sh): DATA [../shared/data/maruf-ende] MAX_LEN [250]
#     MAX_LEN_RATIO [3] SMOKE_TRAIN_DOCS [6] SMOKE_VALID_DOCS [1] SMOKE_TEST_DOCS [2]
#   releases: WMT19_DIR, NLLB_DIR, MBART25_DIR [empty: downloaded into DOWNLOADS / SMOKE: tiny
#     releases made by examples/lib/tiny_release.py; a folder: the release already there, in its
#     layout] WMT19_SHA256, NLLB_CHECKPOINT_SHA256, NLLB_DICTIONARY_SHA256, NLLB_SPM_SHA256,
#     MBART25_SHA256 [empty: no
#     checksum is published; the sha256 of what was downloaded is recorded in
#     WORK/downloads.sha256: set these to pin it] SMOKE_RELEASE_UPDATES [20]
#   transformers folders: OPUSMT_DIR, NLLB_HF_DIR [empty: the hub's OPUSMT_HUB
#     [Helsinki-NLP/opus-mt-en-de] / NLLB_HF_HUB [facebook/nllb-200-distilled-600M] at
#     OPUSMT_REVISION / NLLB_HF_REVISION [empty: the default branch; a commit pins it], downloaded
#     once into DOWNLOADS/hf-hub (examples/lib/hub_snapshot.py) / SMOKE: tiny folders made by
#     examples/lib/tiny_hf_release.py; a folder: a transformers model folder already there]
#   from WMT19 and mBART-25 (Bao et al. 2021's fine-tuning of mBART-25, run-mbart.sh):
#     PT_DROPOUT [0.3] PT_ATTENTION_DROPOUT [0.1] PT_LR [3e-5 / 3e-3] PT_WARMUP [2500 / 5]
#     PT_TOTAL_UPDATES [1000000] PT_LABEL_SMOOTHING [0.2] PT_MAX_TOKENS [2048 / 1000]
#     PT_BATCHES [8: 4 GPUs x --update-freq 2 / 1] GT_CTXLAYERS [2 / 1]
#   from NLLB and OPUS-MT (the NLLB Team's fine-tuning configuration, fairseq's nllb branch):
#     NLLB_DROPOUT [0.1] NLLB_ATTENTION_DROPOUT [0.1] NLLB_LR [5e-5 / 3e-3] NLLB_WARMUP [10 / 5]
#     NLLB_MAX_TOKENS [4000 / 1000] NLLB_BATCHES [4 / 1]
#   models (examples/lib/models.sh): MAX_UPDATE [100000 / 8] PATIENCE [5: run-mbart.sh]
#     CONCAT_CONTEXT_SIZE [1] SEG_TOKENS [512] SEED [1] BEAM [5: run-mbart.sh / 2] LENPEN [1.0]
#     GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20] AVERAGE [0]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/pretrained,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] GEN_PROCESSES [auto: NGPUS on GPUs, 1 on the CPU]
#     EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
source "$RECIPE_LIB/maruf-ende.sh"
recipe_init pretrained
ALL_MODELS=wmt19-concat,wmt19-g-transformer,nllb-concat,mbart25-g-transformer,opusmt-concat,nllb-hf-concat
setting MODELS $ALL_MODELS
for name in ${MODELS//,/ }; do
  [[ ,$ALL_MODELS, == *,$name,* ]] || die "MODELS: no model '$name' (${ALL_MODELS//,/, })"
done
setting METRICS bleu,d-bleu
setting DATA ../shared/data/maruf-ende
setting MAX_LEN 250
setting MAX_LEN_RATIO 3
setting SMOKE_TRAIN_DOCS 6
setting SMOKE_VALID_DOCS 1
setting SMOKE_TEST_DOCS 2
setting WMT19_DIR ""
setting NLLB_DIR ""
setting MBART25_DIR ""
setting OPUSMT_DIR ""
setting OPUSMT_HUB Helsinki-NLP/opus-mt-en-de
setting OPUSMT_REVISION ""
setting NLLB_HF_DIR ""
setting NLLB_HF_HUB facebook/nllb-200-distilled-600M
setting NLLB_HF_REVISION ""
setting WMT19_SHA256 ""
setting NLLB_CHECKPOINT_SHA256 ""
setting NLLB_DICTIONARY_SHA256 ""
setting NLLB_SPM_SHA256 ""
setting MBART25_SHA256 ""
setting SMOKE_RELEASE_UPDATES 20
setting PT_DROPOUT 0.3
setting PT_ATTENTION_DROPOUT 0.1
setting PT_LR 3e-5 3e-3
setting PT_WARMUP 2500 5
setting PT_TOTAL_UPDATES 1000000
setting PT_LABEL_SMOOTHING 0.2
setting PT_MAX_TOKENS 2048 1000
setting PT_BATCHES 8 1
setting NLLB_DROPOUT 0.1
setting NLLB_ATTENTION_DROPOUT 0.1
setting NLLB_LR 5e-5 3e-3
setting NLLB_WARMUP 10 5
setting NLLB_MAX_TOKENS 4000 1000
setting NLLB_BATCHES 4 1
setting PATIENCE 5
setting BEAM 5 2
model_settings
RECIPE_NOTES=()  # the other recipes' batches (model_settings) are not used here: this recipe's own
for v in PT_BATCHES NLLB_BATCHES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: a number of batches >= 1"
done
_pt_batch() {  # BATCH BATCHES: PER_GPU and UF (models.sh's _per_gpu) that keep one update at
  # BATCHES x BATCH tokens on the training processes
  local keep=$BATCHES_PER_UPDATE
  BATCHES_PER_UPDATE=$2
  _per_gpu "$1"
  BATCHES_PER_UPDATE=$keep
}
_pt_batch "$PT_MAX_TOKENS" "$PT_BATCHES"
RECIPE_NOTES+=("one update (wmt19 and mbart25 rows): $(_train_gpus) process(es) x update-freq $UF x $PER_GPU tokens (PT_BATCHES $PT_BATCHES x PT_MAX_TOKENS $PT_MAX_TOKENS; Bao et al.'s run-mbart.sh: 4 GPUs x update-freq 2 x 2048)")
_pt_batch "$NLLB_MAX_TOKENS" "$NLLB_BATCHES"
RECIPE_NOTES+=("one update (nllb and opusmt rows): $(_train_gpus) process(es) x update-freq $UF x $PER_GPU tokens (NLLB_BATCHES $NLLB_BATCHES x NLLB_MAX_TOKENS $NLLB_MAX_TOKENS; the NLLB Team's fine-tuning: 64 GPUs x 250)")
recipe_settings
SRC=en TGT=de
PAPER_SCORES=$REPO/examples/pretrained/paper-scores.tsv
SEGMENT_MODELS+="wmt19-g-transformer mbart25-g-transformer "
maruf_ende_files IWSLT2017

# ---------------------------------------------------------------- the releases

WMT19_URL=https://dl.fbaipublicfiles.com/fairseq/models/wmt19.en-de.joined-dict.single_model.tar.gz
# NLLB-200: the links of the README of fairseq's nllb branch (tinyurl redirects to the files)
NLLB_CHECKPOINT_URL=https://tinyurl.com/nllb200densedst600mcheckpoint
NLLB_DICTIONARY_URL=https://tinyurl.com/nllb200dictionary
NLLB_SPM_URL=https://tinyurl.com/flores200sacrebleuspm
# the language list: fairseq's nllb branch at commit ec0ae71a, pinned by its git blob id
NLLB_LANGS_URL=https://raw.githubusercontent.com/facebookresearch/fairseq/ec0ae71a24fbc2f42252f37735f59dd6547eba38/examples/nllb/modeling/scripts/flores200/langs.txt
NLLB_LANGS_BLOB=b6670e3c2fdc2d6b46fa5582bb1ae44f65a4d4df
# mBART-25: the link of fairseq's examples/mbart/README.md (model.pt, dict.txt, sentence.bpe.model)
MBART25_URL=https://dl.fbaipublicfiles.com/fairseq/models/mbart/mbart.cc25.v2.tar.gz
declare -A REL_DIR REL_CKPT REL_STEP REL_NOTE

unpacked_release() {  # FAMILY URL SHA256 ARCHIVE: the archive downloaded (or its checksum recorded),
  # unpacked into DOWNLOADS/FAMILY (step unpack-FAMILY); UNPACKED: the folder holding its model.pt
  local fam=$1 archive=$DOWNLOADS/$4 found
  fetch_or_record "$2" "$3" "$archive" \
    "no network? download it elsewhere, unpack it and set ${fam^^}_DIR to the folder holding model.pt"
  step "unpack-$fam" -o "$DOWNLOADS/$fam" -- bash -c 'mkdir -p "$2" && tar -xzf "$1" -C "$2"' _ "$archive" \
    "$DOWNLOADS/$fam"
  found=$(find "$DOWNLOADS/$fam" -name model.pt -print -quit)
  [[ -n $found ]] || die "$archive: no model.pt in it (unpacked into $DOWNLOADS/$fam)"
  UNPACKED=$(dirname "$found")
}

release() {  # FAMILY (wmt19 | nllb | mbart25): REL_DIR, REL_CKPT, REL_STEP (the step that makes it, or none), REL_NOTE
  local fam=$1 dir ckpt step="" note
  local given=${WMT19_DIR}
  [[ $fam == nllb ]] && given=$NLLB_DIR
  [[ $fam == mbart25 ]] && given=$MBART25_DIR
  if [[ $fam == nllb ]]; then ckpt=checkpoint.pt; else ckpt=model.pt; fi
  if [[ -n $given ]]; then
    dir=$(cd "$given" 2>/dev/null && pwd) || die "missing folder $given (${fam^^}_DIR)"
    need_file "$dir/$ckpt" "${fam^^}_DIR=$given must hold the release's $ckpt (README.md: the layout)"
    note="the release in $dir (${fam^^}_DIR)"
  elif [[ $SMOKE == 1 ]]; then
    dir=$WORK/releases/$fam step=release-$fam
    # made in DIR.part, renamed when complete (an interrupted step starts it again)
    step "$step" -o "$dir" -- bash -c 'rm -rf "$2.part" && python "$1" "$3" "$2.part" --source "$4" --target "$5" \
      --updates "$6" && mv "$2.part" "$2"' _ "$RECIPE_LIB/tiny_release.py" "$dir" "$fam" "$WORK/smoke-data/train.en" \
      "$WORK/smoke-data/train.de" "$SMOKE_RELEASE_UPDATES"
    note="a tiny local release in the $fam layout (examples/lib/tiny_release.py, $SMOKE_RELEASE_UPDATES updates)"
  elif [[ $fam == wmt19 ]]; then
    unpacked_release wmt19 "$WMT19_URL" "$WMT19_SHA256" wmt19.en-de.joined-dict.single_model.tar.gz
    dir=$UNPACKED step=unpack-wmt19
    note="$WMT19_URL (the single model of the WMT19 En-De ensemble, fairseq's transformer.wmt19.en-de.single_model)"
  elif [[ $fam == mbart25 ]]; then
    unpacked_release mbart25 "$MBART25_URL" "$MBART25_SHA256" mbart.cc25.v2.tar.gz
    dir=$UNPACKED step=unpack-mbart25
    note="$MBART25_URL (mBART-25, fairseq's mbart.CC25)"
  else
    dir=$DOWNLOADS/nllb-200-distilled-600M
    local howto="no network? put checkpoint.pt, dictionary.txt, SPM-200 (flores200_sacrebleu_tokenizer_spm.model or sentencepiece.bpe.model) and langs.txt in a folder and set NLLB_DIR"
    fetch_or_record "$NLLB_CHECKPOINT_URL" "$NLLB_CHECKPOINT_SHA256" "$dir/checkpoint.pt" "$howto"
    fetch_or_record "$NLLB_DICTIONARY_URL" "$NLLB_DICTIONARY_SHA256" "$dir/dictionary.txt" "$howto"
    fetch_or_record "$NLLB_SPM_URL" "$NLLB_SPM_SHA256" "$dir/sentencepiece.bpe.model" "$howto"
    fetch_blob "$NLLB_LANGS_URL" "$NLLB_LANGS_BLOB" "$dir/langs.txt" "$howto"
    note="$NLLB_CHECKPOINT_URL (NLLB-200-Distilled 600M), its dictionary and SPM-200 model, langs.txt of fairseq's nllb branch"
  fi
  REL_DIR[$fam]=$dir REL_CKPT[$fam]=$dir/$ckpt REL_STEP[$fam]=$step REL_NOTE[$fam]=$note
}

hf_release() {  # FAMILY (opusmt | nllb-hf): a transformers model folder (OPUSMT_DIR / NLLB_HF_DIR, a
  # tiny one in SMOKE, else the hub model downloaded once); REL_DIR and REL_CKPT are that folder, which
  # docctx-prepare --pretrained and fairseq-train --init-from-pretrained both read
  local fam=$1 var=OPUSMT dir step="" note hub revision where
  [[ $fam == nllb-hf ]] && var=NLLB_HF
  local given_var=${var}_DIR hub_var=${var}_HUB revision_var=${var}_REVISION
  local given=${!given_var}
  hub=${!hub_var} revision=${!revision_var}
  if [[ -n $given ]]; then
    dir=$(cd "$given" 2>/dev/null && pwd) || die "missing folder $given ($given_var)"
    need_file "$dir/config.json" "$given_var=$given must be a transformers model folder (config.json, the weights, the tokenizer's files)"
    note="the transformers folder $dir ($given_var)"
  elif [[ $SMOKE == 1 ]]; then
    dir=$WORK/releases/$fam step=release-$fam
    step "$step" -o "$dir" -- bash -c 'rm -rf "$2.part" && python "$1" "$3" "$2.part" --source "$4" --target "$5" \
      && mv "$2.part" "$2"' _ "$RECIPE_LIB/tiny_hf_release.py" "$dir" "$fam" "$WORK/smoke-data/train.en" \
      "$WORK/smoke-data/train.de"
    note="a tiny local transformers folder in the $fam layout (examples/lib/tiny_hf_release.py, random weights)"
  else
    # downloaded once (docctx-prepare's own snapshot_download, into DOWNLOADS/hf-hub); both steps
    # then read the snapshot folder, named by the commit the revision resolved to
    where=$DOWNLOADS/$fam.hub.json step=download-$fam
    step "$step" -o "$where" -- env HF_HUB_CACHE="$DOWNLOADS/hf-hub" python "$RECIPE_LIB/hub_snapshot.py" \
      "$hub${revision:+@$revision}" "$where"
    mapfile -t got < <(python -c 'import json, sys; w = json.load(open(sys.argv[1])); print(w["dir"]); print(w["revision"])' "$where")
    dir=${got[0]}
    need_file "$dir/config.json" "the hub's $hub should have been downloaded there (delete $where to download it again)"
    note="the hub's $hub at revision ${got[1]} (asked for: ${revision:-the default branch}; $revision_var=${got[1]} pins it), downloaded into $dir"
  fi
  REL_DIR[$fam]=$dir REL_CKPT[$fam]=$dir REL_STEP[$fam]=$step REL_NOTE[$fam]=$note
}

prepare_release() {  # FAMILY: the data folder WORK/data-bin/FAMILY in the release's vocabulary (step prepare-FAMILY)
  local fam=$1 langs=()
  [[ $fam == nllb || $fam == nllb-hf ]] && langs=(--pretrained-langs eng_Latn,deu_Latn)
  local deps=()
  [[ -n ${REL_STEP[$fam]} ]] && deps=(-d "${REL_STEP[$fam]}")
  step "prepare-$fam" "${deps[@]}" -o "$WORK/data-bin/$fam/docctx.json" -- docctx-prepare -s en -t de \
    --input-format marker --workers "$(nproc)" --pretrained "${REL_DIR[$fam]}" "${langs[@]}" \
    --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" "${MARUF_FILES[@]}" --destdir "$WORK/data-bin/$fam"
}

# ---------------------------------------------------------------- fine-tuning settings

_bao_pretrained() {  # Bao et al. (2021)'s fine-tuning of G-Transformer from mBART-25 (the authors'
  # exp_gtrans/run-mbart.sh): Adam (0.9, 0.98, eps 1e-6), polynomial decay from 3e-5 after 2500
  # warm-up updates (over --total-num-update, 1M by default in the fairseq of their fork), label
  # smoothing 0.2, dropout 0.3, attention dropout 0.1, 2048 tokens a batch, --update-freq 2 on 4 GPUs
  HP=(--dropout "$PT_DROPOUT" --attention-dropout "$PT_ATTENTION_DROPOUT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-06
    --lr-scheduler polynomial_decay --lr "$PT_LR" --warmup-updates "$PT_WARMUP" --total-num-update "$PT_TOTAL_UPDATES"
    --criterion label_smoothed_cross_entropy --label-smoothing "$PT_LABEL_SMOOTHING")
  _pt_batch "$PT_MAX_TOKENS" "$PT_BATCHES"
  HP+=(--max-tokens "$PER_GPU" --update-freq "$UF")
}

_nllb_finetune() {  # the NLLB Team's (2022) fine-tuning of a dense NLLB-200 model (fairseq's nllb
  # branch: examples/nllb/modeling/README.md, dropout 0.1; train/conf/cfg/
  # nllb200_dense3.3B_finetune_on_fbseed.yaml: inverse square root from 5e-5 after 10 warm-up
  # updates, 250 tokens a batch on 64 GPUs; sweep/sweep_mmt.py: Adam (0.9, 0.98, eps 1e-6) from
  # 1e-7, label smoothing 0.1, no clipping or weight decay; attention dropout 0.1 of transformer_12_12)
  HP=(--dropout "$NLLB_DROPOUT" --attention-dropout "$NLLB_ATTENTION_DROPOUT"
    --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-06 --clip-norm 0.0 --weight-decay 0.0
    --lr-scheduler inverse_sqrt --lr "$NLLB_LR" --warmup-updates "$NLLB_WARMUP" --warmup-init-lr 1e-07
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1)
  _pt_batch "$NLLB_MAX_TOKENS" "$NLLB_BATCHES"
  HP+=(--max-tokens "$PER_GPU" --update-freq "$UF")
}

# ---------------------------------------------------------------- models

declare -A DONE_FAMILY
for name in ${MODELS//,/ }; do
  fam=${name%-concat}
  fam=${fam%-g-transformer}
  if [[ -z ${DONE_FAMILY[$fam]:-} ]]; then
    case $fam in
      opusmt|nllb-hf) hf_release "$fam" ;;
      *) release "$fam" ;;
    esac
    prepare_release "$fam"
    DONE_FAMILY[$fam]=1
  fi
  BIN=$WORK/data-bin/$fam
  init=(--init-from-pretrained "${REL_CKPT[$fam]}")
  case $name in
    wmt19-concat)
      TRAIN_BIN=$BIN TRAIN_PREPARE=prepare-$fam train "$name" bao_pretrained -- -s en -t de \
        --context-size "$CONCAT_CONTEXT_SIZE" --context-sides source --arch concat_transformer "${init[@]}" ;;
    wmt19-g-transformer)
      # Bao et al.'s run-mbart.sh: segments of 512 tokens, combined attention in the top 2 layers
      # of each kind, the global attentions at random (--load-partial without
      # --load-partial-global-from-local), no word masking
      TRAIN_BIN=$BIN TRAIN_PREPARE=prepare-$fam train "$name" bao_pretrained -- -s en -t de --doc-mode segments \
        --max-segment-tokens "$SEG_TOKENS" --arch g_transformer --encoder-ctxlayers "$GT_CTXLAYERS" \
        --decoder-ctxlayers "$GT_CTXLAYERS" --cross-ctxlayers "$GT_CTXLAYERS" --global-attn-init random "${init[@]}" ;;
    mbart25-g-transformer)
      # Bao et al.'s run-mbart.sh itself: mBART-25 (pre-norm, layernorm_embedding: the
      # checkpoint's network), segments of 512 tokens, the settings of wmt19-g-transformer
      TRAIN_BIN=$BIN TRAIN_PREPARE=prepare-$fam train "$name" bao_pretrained -- -s en -t de --doc-mode segments \
        --max-segment-tokens "$SEG_TOKENS" --arch g_transformer --encoder-ctxlayers "$GT_CTXLAYERS" \
        --decoder-ctxlayers "$GT_CTXLAYERS" --cross-ctxlayers "$GT_CTXLAYERS" --global-attn-init random "${init[@]}" ;;
    nllb-concat|nllb-hf-concat|opusmt-concat)
      # OPUS-MT: the NLLB Team's settings too, a choice of this recipe (README.md)
      TRAIN_BIN=$BIN TRAIN_PREPARE=prepare-$fam train "$name" nllb_finetune -- -s en -t de \
        --context-size "$CONCAT_CONTEXT_SIZE" --context-sides source --arch concat_transformer "${init[@]}" ;;
  esac
  eval_checkpoint "$name"
  # --scoring sacrebleu: the log's BLEU of the D- text (the default scorer compares token ids)
  generate_step "translate-$name" "$BIN" "$EVAL_CKPT" "$GEN/$name" -d "$EVAL_STEP" -- --scoring sacrebleu
  step "score-$name" -d "translate-$name" -o "$SCORES/$name.json" -- score_run "$name" "$METRICS"
done
write_results "TED En-De (IWSLT17, Maruf et al. 2019 split): document models from pretrained models" ${MODELS//,/ }
{
  echo
  echo "Pretrained models (--init-from-pretrained):"
  for fam in "${!DONE_FAMILY[@]}"; do echo "- $fam: ${REL_NOTE[$fam]}: \`${REL_CKPT[$fam]}\`"; done
  if [[ -f $WORK/downloads.sha256 ]]; then
    echo "- sha256 of the downloads (\`downloads.sha256\`):"
    sed 's/^\([0-9a-f]*\)  \(.*\)$/  - `\2`: \1/' "$WORK/downloads.sha256"
  fi
} >> "$WORK/results.md"
