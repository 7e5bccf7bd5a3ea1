# The papers' models as recipe steps (sourced after recipe.sh; documented in docs/recipes.md).
# A recipe sets SRC, TGT, BIN (its prepared data directory, with train/valid/test), REF_TEST
# (the raw test references), PAPER_SCORES (its published scores) and METRICS, calls
# model_settings, then run_models with the models it trains, then write_results.
#
# Hyper-parameters (environment variables; the recipe may change a default before
# model_settings; SMOKE=1 makes every model tiny):
#   Transformer base (Vaswani et al. 2017), the sentence baseline and the models of the HAN
#   (Miculicich et al. 2018, §3.2) and MHT (Zhang et al. 2021, §4.3) papers, and concat:
#     LAYERS [6] DIM [512] FFN [2048] HEADS [8] DROPOUT [0.1] LR [7e-4: Vaswani et al.'s
#     schedule peaks at 512^-0.5 * 4000^-0.5] WARMUP [4000] MAX_TOKENS [4096]
#   QCN (Yang et al. 2019, §4.1): QCN_LAYERS [4] QCN_DROPOUT [0.2: the context-aware models]
#     QCN_AGNOSTIC_DROPOUT [0.1: the rows of Table 2 that read no context] QCN_LR [1e-4, constant]
#     QCN_MAX_TOKENS [1500 TED, 900 News and Europarl: the recipe's default] PCC_WEIGHT [1]
#   RNNs (Bahdanau et al. 2015's RNNSearch with feedback attention; docs/rnn.md): the named
#     architectures' sizes (rnnsearch: Kuang & Xiong 2018, §5.1; rnnsearch_nematus and
#     hrnn_context: Wang et al. 2017, §3.1) unless RNN_DIM [/ 32 in SMOKE] sets every size;
#     RNN_BATCH [80 sentences: both papers]; Kuang & Xiong: Adadelta rho 0.95 eps 1e-6 (lr 1.0),
#     gradient norm clipped at 1 and Bahdanau et al.'s initialisation (--rnn-init bahdanau),
#     training sentences of at most KX_MAX_LEN [50]
#     tokens; Wang et al.: Adam at NEMATUS_LR [1e-4 / 3e-3] with clipping at 1 (Nematus'
#     defaults; the paper does not state its optimiser), at most WANG_MAX_LEN [80] tokens (both
#     limits: the recipe's docctx-prepare --max-len); HRNN_INIT [random: hrnn_context starts
#     from random weights, as Wang et al. (2017) describe its training / nematus: every weight
#     of the trained Nematus baseline copied first, a two-stage variant the paper does not
#     describe; results.md says which]
#   HAN's stages (Miculicich et al. 2018, §3.2, as their released commands run them:
#     github.com/idiap/HAN_NMT, README): HAN_JOINT_FROM [encoder: han (HAN encoder and decoder)
#     starts from the trained han-encoder, which is trained first when MODELS lacks it /
#     sentence: from the sentence transformer, like the other HAN models] HAN_STAGE2_EPOCHS [1:
#     every HAN model's second stage trains one epoch / 0: until MAX_UPDATE or PATIENCE];
#     results.md says which
#   batches: BATCHES_PER_UPDATE [1: the papers' batch (MAX_TOKENS, QCN_MAX_TOKENS, RNN_BATCH) is
#     one update] UPDATE_FREQ [auto]: fairseq's batch sizes are per GPU, so on NGPUS GPUs the
#     per-GPU batch and --update-freq are derived to keep an update at BATCHES_PER_UPDATE x the
#     paper's batch: update-freq ceil(BATCHES_PER_UPDATE / NGPUS) (UPDATE_FREQ when set), per-GPU
#     batch floor(batch x BATCHES_PER_UPDATE / (NGPUS x update-freq)) (exact when NGPUS divides
#     BATCHES_PER_UPDATE; else at most NGPUS x update-freq tokens or sentences under it); the
#     settings print-out gives the numbers
#   scores: BLEU_TOK_LOWERCASE [0 / 1 in es-en: Miculicich et al. (2018) score lowercased
#     text]: bleu_tok on lowercased text (docctx-score bleu --tokenized --lowercase)
#   AVERAGE [0: no paper of these models averages checkpoints / N: translate with the mean of
#     the last N epoch checkpoints (fairseq-train --keep-last-epochs N, docctx-average),
#     Vaswani et al. 2017, §6.1]
#   document-to-document models over segments (docs/g-transformer.md): SEG_TOKENS [512: Bao et
#     al. 2021's segments of at most 512 tokens, --max-segment-tokens]; doc2doc (Sun et al. 2022's
#     doc2doc_transformer with --multi-resolution) trains with the Transformer-base settings
#     above; G-Transformer as the authors ran it (github.com/baoguangsheng/g-transformer,
#     exp_gtrans/run-randinit.sh and run-finetune.sh): GT_DROPOUT [0.3: their gtransformer_base]
#     GT_LR [5e-4 / 3e-3] GT_WARMUP [4000 / 5] GT_MAX_TOKENS [4096 / 1000] (Adam (0.9, 0.98),
#     inverse square root, label smoothing 0.1), GT_CTXLAYERS [2 / 1: --encoder-ctxlayers,
#     --decoder-ctxlayers, --cross-ctxlayers]; word masking GT_NOISE_MASK [0.3] GT_NOISE_EPOCHS [30] from random
#     initialisation (g-transformer), GT_FND_NOISE_MASK [0.1] GT_FND_NOISE_EPOCHS [40] when
#     fine-tuned from the trained sentence transformer (g-transformer-fnd), which also learns
#     at two rates, GT_FND_LR_SCALE [0.2: their --doc-double-lr --lr-scale-pretrained 0.2;
#     1: one rate] times the learning rate for the sentence transformer's weights
#     (--lr-scale-pretrained), and starts its global attentions and gates GT_FND_GLOBAL_INIT
#     [random: their run-finetune.sh does not pass --load-partial-global-from-local / group:
#     copies of the group attentions] (--global-attn-init)
#   all: MAX_UPDATE [100000] PATIENCE [10: stop after 10 validations without a better dev
#     loss; checkpoint_best.pt, the best dev loss, is translated] CONTEXT_SIZE [3: HAN, QCN,
#     MHT] CONCAT_CONTEXT_SIZE [1: the previous source sentence, Tiedemann & Scherrer 2017]
#     SEED [1] BEAM [4] LENPEN [1.0] GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A, GEN_MAX_LEN_B [1.2, 10;
#     0, 20 in SMOKE: a translation has at most A * source length + B tokens]

model_settings() {
  setting LAYERS 6 1
  setting DIM 512 32
  setting FFN 2048 64
  setting HEADS 8 2
  setting DROPOUT 0.1
  setting LR 7e-4 3e-3
  setting WARMUP 4000 5
  setting MAX_TOKENS 4096 1000
  setting QCN_LAYERS 4 1
  setting QCN_DROPOUT 0.2
  setting QCN_AGNOSTIC_DROPOUT 0.1
  setting QCN_LR 1e-4 3e-3
  setting QCN_MAX_TOKENS 1500 1000
  setting PCC_WEIGHT 1
  setting MAX_UPDATE 100000 8
  setting PATIENCE 10
  setting CONTEXT_SIZE 3
  setting CONCAT_CONTEXT_SIZE 1
  setting SEED 1
  setting BEAM 4 2
  setting LENPEN 1.0
  setting GEN_MAX_TOKENS 8000
  setting GEN_MAX_LEN_A 1.2 0
  setting GEN_MAX_LEN_B 10 20
  setting RNN_DIM "" 32
  setting RNN_BATCH 80
  setting KX_MAX_LEN 50
  setting WANG_MAX_LEN 80
  setting NEMATUS_LR 1e-4 3e-3
  setting HRNN_INIT random
  [[ $HRNN_INIT == random || $HRNN_INIT == nematus ]] || die "HRNN_INIT=$HRNN_INIT: random or nematus"
  setting HAN_JOINT_FROM encoder
  [[ $HAN_JOINT_FROM == encoder || $HAN_JOINT_FROM == sentence ]] || die "HAN_JOINT_FROM=$HAN_JOINT_FROM: encoder or sentence"
  setting HAN_STAGE2_EPOCHS 1
  [[ $HAN_STAGE2_EPOCHS =~ ^[0-9]+$ ]] || die "HAN_STAGE2_EPOCHS=$HAN_STAGE2_EPOCHS: a number of epochs (0: no limit)"
  setting BATCHES_PER_UPDATE 1
  [[ $BATCHES_PER_UPDATE =~ ^[1-9][0-9]*$ ]] || die "BATCHES_PER_UPDATE=$BATCHES_PER_UPDATE: a number >= 1"
  setting UPDATE_FREQ auto
  [[ $UPDATE_FREQ == auto || $UPDATE_FREQ =~ ^[1-9][0-9]*$ ]] || die "UPDATE_FREQ=$UPDATE_FREQ: auto or a number >= 1"
  setting AVERAGE 0
  setting SEG_TOKENS 512
  setting GT_DROPOUT 0.3
  setting GT_CTXLAYERS 2 1
  setting GT_LR 5e-4 3e-3
  setting GT_WARMUP 4000 5
  setting GT_MAX_TOKENS 4096 1000
  setting GT_NOISE_MASK 0.3
  setting GT_NOISE_EPOCHS 30
  setting GT_FND_NOISE_MASK 0.1
  setting GT_FND_NOISE_EPOCHS 40
  setting GT_FND_LR_SCALE 0.2
  setting GT_FND_GLOBAL_INIT random
  [[ $GT_FND_GLOBAL_INIT == random || $GT_FND_GLOBAL_INIT == group ]] || die "GT_FND_GLOBAL_INIT=$GT_FND_GLOBAL_INIT: random or group"
  [[ $SEG_TOKENS =~ ^[1-9][0-9]*$ ]] || die "SEG_TOKENS=$SEG_TOKENS: a number of tokens >= 1"
  setting BLEU_TOK_LOWERCASE 0
  [[ $BLEU_TOK_LOWERCASE == 0 || $BLEU_TOK_LOWERCASE == 1 ]] || die "BLEU_TOK_LOWERCASE=$BLEU_TOK_LOWERCASE: 0 or 1"
  [[ $AVERAGE =~ ^[0-9]+$ ]] || die "AVERAGE=$AVERAGE: a number of checkpoints (0: no averaging)"
  local what batch
  for what in "MAX_TOKENS tokens" "QCN_MAX_TOKENS tokens" "GT_MAX_TOKENS tokens" "RNN_BATCH sentences"; do
    batch=${what%% *}
    _per_gpu "${!batch}" "$batch"
    RECIPE_NOTES+=("one update ($batch): $(_train_gpus) process(es) x update-freq $UF x $PER_GPU ${what#* } = $(( $(_train_gpus) * UF * PER_GPU )) ${what#* } (the papers' batch: $batch ${!batch} x BATCHES_PER_UPDATE $BATCHES_PER_UPDATE = $(( ${!batch} * BATCHES_PER_UPDATE )))")
  done
  CKPT=$WORK/checkpoints
  GEN=$WORK/generate
  SCORES=$WORK/scores
  mkdir -p "$SCORES"
}

# ---------------------------------------------------------------- training

_train_gpus() {  # the processes fairseq-train runs: NGPUS on GPUs, 1 on the CPU
  if [[ $DEVICE == gpu ]]; then echo "$NGPUS"; else echo 1; fi
}

_per_gpu() {  # BATCH [NAME]: PER_GPU (fairseq's per-GPU batch) and UF (--update-freq) that keep
  # one update at BATCH x BATCHES_PER_UPDATE on the training processes (batch sizes are per GPU)
  local n b=$BATCHES_PER_UPDATE
  n=$(_train_gpus)
  if [[ $UPDATE_FREQ == auto ]]; then UF=$(( (b + n - 1) / n )); else UF=$UPDATE_FREQ; fi
  PER_GPU=$(( $1 * b / (n * UF) ))
  (( PER_GPU >= 1 )) || die "${2:-the batch} $1 x BATCHES_PER_UPDATE $b over $n GPU(s) x update-freq $UF: less than 1 per GPU"
}

_vaswani() {  # [DROPOUT LR WARMUP BATCH_SETTING]: Transformer base sizes and Vaswani et al.'s
  # optimisation, with the recipe's DROPOUT, LR, WARMUP and MAX_TOKENS unless given
  local dropout=${1:-$DROPOUT} lr=${2:-$LR} warmup=${3:-$WARMUP} batch=${4:-MAX_TOKENS}
  HP=(--encoder-layers "$LAYERS" --decoder-layers "$LAYERS"
    --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM"
    --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN"
    --encoder-attention-heads "$HEADS" --decoder-attention-heads "$HEADS"
    --dropout "$dropout" --share-all-embeddings
    --optimizer adam --adam-betas '(0.9, 0.98)' --lr "$lr"
    --lr-scheduler inverse_sqrt --warmup-updates "$warmup" --warmup-init-lr 1e-07
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1)
  _per_gpu "${!batch}" "$batch"
  HP+=(--max-tokens "$PER_GPU" --update-freq "$UF")
}

_qcn() {  # Yang et al. (2019), §4.1: 4+4 layers, dropout 0.2, Adam at a constant 1e-4
  HP=(--encoder-layers "$QCN_LAYERS" --decoder-layers "$QCN_LAYERS"
    --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM"
    --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN"
    --encoder-attention-heads "$HEADS" --decoder-attention-heads "$HEADS"
    --dropout "$QCN_DROPOUT" --share-all-embeddings
    --optimizer adam --lr "$QCN_LR" --lr-scheduler fixed
    --criterion label_smoothed_cross_entropy_pcc --label-smoothing 0.1 --pcc-weight "$PCC_WEIGHT")
  _per_gpu "$QCN_MAX_TOKENS" QCN_MAX_TOKENS
  HP+=(--max-tokens "$PER_GPU" --update-freq "$UF")
}

_gtrans() {  # G-Transformer as Bao et al. (2021) ran it (the authors' exp_gtrans/run-randinit.sh
  # and run-finetune.sh): Vaswani et al.'s settings at Transformer-base sizes with dropout 0.3,
  # Adam at 5e-4 after 4000 warm-up updates, 4096 tokens a batch; combined attention in the top
  # GT_CTXLAYERS (2) layers of each kind
  _vaswani "$GT_DROPOUT" "$GT_LR" "$GT_WARMUP" GT_MAX_TOKENS
  HP+=(--encoder-ctxlayers "$GT_CTXLAYERS" --decoder-ctxlayers "$GT_CTXLAYERS" --cross-ctxlayers "$GT_CTXLAYERS")
}

_rnn_sizes() {  # every size RNN_DIM when it is set, else the named architecture's
  RNN_SIZES=()
  [[ -z $RNN_DIM ]] || RNN_SIZES=(--encoder-embed-dim "$RNN_DIM" --encoder-hidden-size "$RNN_DIM"
    --decoder-embed-dim "$RNN_DIM" --decoder-hidden-size "$RNN_DIM" --decoder-out-embed-dim "$RNN_DIM"
    --attention-dim "$RNN_DIM")
}

# The papers' length limits (KX_MAX_LEN, WANG_MAX_LEN) are applied to the training data by the
# recipe's docctx-prepare --max-len, not by --max-source-positions: fairseq would then refuse
# the longer dev and test sentences, which an RNN translates whatever their length.
_kuang() {  # Kuang & Xiong (2018), §5.1: Adadelta (rho 0.95, eps 1e-6), 80 sentences a batch;
  # Bahdanau et al. (2015)'s other settings: gradient norm clipped at 1 (B.2), their
  # initialisation (B.1: --rnn-init bahdanau)
  _rnn_sizes
  HP=("${RNN_SIZES[@]}" --optimizer adadelta --adadelta-rho 0.95 --adadelta-eps 1e-6 --lr 1.0
    --clip-norm 1 --rnn-init bahdanau --criterion cross_entropy)
  _per_gpu "$RNN_BATCH" RNN_BATCH
  HP+=(--batch-size "$PER_GPU" --update-freq "$UF")
}

_wang() {  # Wang et al. (2017), §3.1, on Nematus: 80 sentences a batch;
  # Adam 1e-4 with clipping at 1 (Nematus' defaults)
  _rnn_sizes
  HP=("${RNN_SIZES[@]}" --optimizer adam --lr "$NEMATUS_LR" --clip-norm 1 --criterion cross_entropy)
  _per_gpu "$RNN_BATCH" RNN_BATCH
  HP+=(--batch-size "$PER_GPU" --update-freq "$UF")
}

train() {  # NAME HP(vaswani|qcn|gtrans|kuang|wang) [-d DEP]... -- fairseq-train arguments (task, arch, context)
  # (on TRAIN_BIN, prepared by step TRAIN_PREPARE, when they are set; else BIN, step prepare)
  local name=$1 hp=$2; shift 2
  local deps=()
  while [[ $1 == -d ]]; do deps+=(-d "$2"); shift 2; done
  [[ $1 == -- ]] && shift
  "_$hp"
  # shellcheck disable=SC2206
  local extra=($EXTRA_TRAIN_ARGS)
  local valid=(--valid-subset valid --best-checkpoint-metric loss)
  (( PATIENCE > 0 )) && valid+=(--patience "$PATIENCE")
  # AVERAGE=N: the last N epoch checkpoints are kept (the others are removed as training goes)
  local epochs=(--no-epoch-checkpoints)
  (( AVERAGE > 0 )) && epochs=(--keep-last-epochs "$AVERAGE")
  step "train-$name" -d "${TRAIN_PREPARE:-prepare}" "${deps[@]}" -o "$CKPT/$name" -- \
    fairseq-train "${TRAIN_BIN:-$BIN}" --user-dir "$REPO/fairseq_docctx" --task document_translation "$@" "${HP[@]}" \
      "${valid[@]}" --max-update "$MAX_UPDATE" --seed "$SEED" --save-dir "$CKPT/$name" \
      "${epochs[@]}" --log-format simple --log-interval 100 --num-workers "$NUM_WORKERS" \
      "${TRAIN_DEVICE_ARGS[@]}" "${extra[@]}"
  [[ -f $CKPT/$name/checkpoint_best.pt ]] || die "training $name wrote no checkpoint_best.pt (see $LOGS/train-$name.log)"
  if (( AVERAGE > 0 )); then
    # the mean of the last AVERAGE epoch checkpoints (the plugin of this checkout: python -m)
    step "average-$name" -d "train-$name" -o "$CKPT/$name/checkpoint_avg$AVERAGE.pt" -- \
      python -m fairseq_docctx.cli.average --dir "$CKPT/$name" --last "$AVERAGE" -o "$CKPT/$name/checkpoint_avg$AVERAGE.pt"
  fi
}

eval_checkpoint() {  # NAME: EVAL_CKPT, the checkpoint of NAME that translates the test set, and
  # EVAL_STEP, the step that makes it: checkpoint_best.pt (lowest dev loss), or with AVERAGE=N
  # the mean of the last N epoch checkpoints
  if (( AVERAGE > 0 )); then
    EVAL_CKPT=$CKPT/$1/checkpoint_avg$AVERAGE.pt EVAL_STEP=average-$1
  else
    EVAL_CKPT=$CKPT/$1/checkpoint_best.pt EVAL_STEP=train-$1
  fi
}

train_model() {  # NAME: one of the models below (the sentence baseline first: others start from it)
  local name=$1
  case $name in
    transformer)
      train transformer vaswani -- -s "$SRC" -t "$TGT" --context-size 0 --arch transformer ;;
    concat)
      train concat vaswani -- -s "$SRC" -t "$TGT" --context-size "$CONCAT_CONTEXT_SIZE" --context-sides source \
        --arch concat_transformer ;;
    qcn)
      train qcn qcn -- -s "$SRC" -t "$TGT" --context-size "$CONTEXT_SIZE" --context-sides source --arch qcn_transformer ;;
    qcn-transformer|qcn-regularizer-only)
      # Yang et al. (2019), Table 2, rows "Transformer" and "Transformer + Regularization
      # Term": the QCN settings (§4.1) without the capsule network, so no context is read
      # (dropout 0.1, the paper's for a context-agnostic model)
      local flags=(--no-qcn)
      [[ $name == qcn-transformer ]] && flags+=(--no-pcc-regularizer)
      QCN_DROPOUT=$QCN_AGNOSTIC_DROPOUT train "$name" qcn -- -s "$SRC" -t "$TGT" --context-size 0 \
        --arch qcn_transformer "${flags[@]}" ;;
    qcn-no-regularizer)
      # Yang et al. (2019), Table 2, row "Transformer + QCN"
      train "$name" qcn -- -s "$SRC" -t "$TGT" --context-size "$CONTEXT_SIZE" --context-sides source \
        --arch qcn_transformer --no-pcc-regularizer ;;
    han|han-encoder|han-decoder|han-decoder-source|han-decoder-alignment)
      # two stages (Miculicich et al. 2018, §3.2): the sentence-level transformer, then the
      # whole network with the HAN parts added, initialised from it; as the authors' released
      # commands run it (idiap/HAN_NMT, README): the second stage one epoch
      # (HAN_STAGE2_EPOCHS), and han (HAN encoder and decoder) from the trained han-encoder
      # (HAN_JOINT_FROM=encoder)
      local arch sides from=transformer stage2=()
      case $name in
        han) arch=han_transformer sides=both ;;
        han-encoder) arch=han_encoder_transformer sides=source ;;
        han-decoder) arch=han_decoder_transformer sides=both ;;
        han-decoder-source) arch=han_decoder_source_transformer sides=source ;;
        han-decoder-alignment) arch=han_decoder_alignment_transformer sides=both ;;
      esac
      _need_model transformer "$name"
      if [[ ${DIVIDE_AND_RULE:-none} != none ]]; then
        # divide and rule (Lupo et al. 2022, as their released commands run it: K0 the
        # sentence transformer, K1 trained on the split pairs from it, then fine-tuned on the
        # documents, the sentence weights frozen in both stages)
        _divide_and_rule "$name" "$arch" "$sides"
        return
      fi
      if [[ $name == han && $HAN_JOINT_FROM == encoder ]]; then
        from=han-encoder
        train_model han-encoder  # a step: skipped when han-encoder is trained already
      fi
      (( HAN_STAGE2_EPOCHS > 0 )) && stage2=(--max-epoch "$HAN_STAGE2_EPOCHS")
      train "$name" vaswani -d "train-$from" -- -s "$SRC" -t "$TGT" --context-size "$CONTEXT_SIZE" \
        --context-sides "$sides" --arch "$arch" --han-context-size "$CONTEXT_SIZE" \
        --init-from-sentence-checkpoint "$CKPT/$from/checkpoint_best.pt" "${stage2[@]}" ;;
    mht)
      # the four steps of Zhang et al. (2021), §4.3: (1) the src->tgt sentence model (the
      # baseline), (2) a tgt->src one, (3) drafts of every split by (1), (4) MHT with its
      # sentence encoders initialised from (1) and (2)
      _need_model transformer mht
      train mht-backward vaswani -- -s "$TGT" -t "$SRC" --context-size 0 --arch transformer
      step drafts -d prepare -d train-transformer -- \
        docctx-drafts "$BIN" --path "$CKPT/transformer/checkpoint_best.pt" --splits train,valid,test \
          --beam "$BEAM" --max-tokens "$GEN_MAX_TOKENS" --overwrite "${GEN_DEVICE_ARGS[@]}"
      train mht vaswani -d train-transformer -d train-mht-backward -d drafts -- -s "$SRC" -t "$TGT" \
        --context-size "$CONTEXT_SIZE" --context-sides src,draft --arch mht_transformer \
        --src-sentence-encoder-from "$CKPT/transformer/checkpoint_best.pt" \
        --tgt-sentence-encoder-from "$CKPT/mht-backward/checkpoint_best.pt" ;;
    doc2doc)
      # Sun et al. (2022)'s document-to-document Transformer: segments of consecutive sentences
      # of at most SEG_TOKENS tokens, every document also cut into 2, 4, ... parts
      # (multi-resolutional doc2doc), from random weights
      train doc2doc vaswani -- -s "$SRC" -t "$TGT" --doc-mode segments --max-segment-tokens "$SEG_TOKENS" \
        --multi-resolution --arch doc2doc_transformer ;;
    g-transformer)
      # Bao et al. (2021), randomly initialised: segments of at most SEG_TOKENS tokens, source
      # and decoder-input words masked at GT_NOISE_MASK while the epoch is below GT_NOISE_EPOCHS
      train g-transformer gtrans -- -s "$SRC" -t "$TGT" --doc-mode segments --max-segment-tokens "$SEG_TOKENS" \
        --arch g_transformer --doc-noise-mask "$GT_NOISE_MASK" --doc-noise-epochs "$GT_NOISE_EPOCHS" ;;
    g-transformer-fnd)
      # Bao et al. (2021)'s "fnd.": fine-tuned from the trained sentence-level transformer (its
      # attentions become the group attentions), as the authors' run-finetune.sh runs it:
      # global attentions and gates from random weights, the sentence model's weights at 0.2 x
      # the learning rate, masking less for longer
      _need_model transformer g-transformer-fnd
      train g-transformer-fnd gtrans -d train-transformer -- -s "$SRC" -t "$TGT" --doc-mode segments \
        --max-segment-tokens "$SEG_TOKENS" --arch g_transformer \
        --init-from-sentence-checkpoint "$CKPT/transformer/checkpoint_best.pt" \
        --global-attn-init "$GT_FND_GLOBAL_INIT" --lr-scale-pretrained "$GT_FND_LR_SCALE" \
        --doc-noise-mask "$GT_FND_NOISE_MASK" --doc-noise-epochs "$GT_FND_NOISE_EPOCHS" ;;
    rnnsearch)
      # Kuang & Xiong (2018)'s baseline, on their data (BIN_KUANG, step PREPARE_KUANG)
      TRAIN_BIN=${BIN_KUANG:-$BIN} TRAIN_PREPARE=${PREPARE_KUANG:-prepare} \
        train rnnsearch kuang -- -s "$SRC" -t "$TGT" --context-size 0 --arch rnnsearch ;;
    isg)
      # NMT_ISG (Kuang & Xiong 2018, §5.1): initialised from RNNSearch but for the gate's
      # weights, on the tuple-filtered training data, the previous source sentence as context
      _need_model rnnsearch isg
      TRAIN_BIN=${BIN_KUANG:-$BIN} TRAIN_PREPARE=${PREPARE_KUANG:-prepare} \
        train isg kuang -d train-rnnsearch -- -s "$SRC" -t "$TGT" --context-size 1 --context-sides source \
          --arch isg_rnnsearch --init-from-sentence-checkpoint "$CKPT/rnnsearch/checkpoint_best.pt" ;;
    nematus)
      # Wang et al. (2017)'s baseline (Table 1, row 2), on their data (BIN_WANG, step PREPARE_WANG)
      TRAIN_BIN=${BIN_WANG:-$BIN} TRAIN_PREPARE=${PREPARE_WANG:-prepare} \
        train nematus wang -- -s "$SRC" -t "$TGT" --context-size 0 --arch rnnsearch_nematus ;;
    hrnn|hrnn-*)
      # Wang et al. (2017), Table 1, rows 3-8: the switches of hrnn_context, K previous
      # source sentences; from random weights (HRNN_INIT=random, the paper's training) or
      # from every weight of the trained sentence model (HRNN_INIT=nematus)
      local switches init=()
      case $name in
        hrnn-init-enc) switches=(--init-dec False --aux-context none) ;;             # row 3
        hrnn-init-dec) switches=(--init-enc False --aux-context none) ;;             # row 4
        hrnn-init-enc-dec) switches=(--aux-context none) ;;                           # row 5
        hrnn-auxi) switches=(--init-enc False --init-dec False --aux-context plain) ;; # row 6
        hrnn-gating-auxi) switches=(--init-enc False --init-dec False) ;;              # row 7
        hrnn) switches=() ;;                                                           # row 8
        *) die "no model '$name' (hrnn-init-enc, hrnn-init-dec, hrnn-init-enc-dec, hrnn-auxi, hrnn-gating-auxi, hrnn)" ;;
      esac
      if [[ $HRNN_INIT == nematus ]]; then
        _need_model nematus "$name"
        init=(-d train-nematus -- --init-from-sentence-checkpoint "$CKPT/nematus/checkpoint_best.pt")
      else
        init=(--)
      fi
      TRAIN_BIN=${BIN_WANG:-$BIN} TRAIN_PREPARE=${PREPARE_WANG:-prepare} \
        train "$name" wang "${init[@]}" -s "$SRC" -t "$TGT" --context-size "$CONTEXT_SIZE" \
          --context-sides source --arch hrnn_context "${switches[@]}" ;;
    *) die "no model '$name' (transformer, concat, qcn, doc2doc, g-transformer, g-transformer-fnd, qcn-transformer, qcn-regularizer-only, qcn-no-regularizer, han, han-encoder, han-decoder, han-decoder-source, han-decoder-alignment, mht, rnnsearch, isg, nematus, hrnn, hrnn-init-enc, hrnn-init-dec, hrnn-init-enc-dec, hrnn-auxi, hrnn-gating-auxi)" ;;
  esac
}

_divide_and_rule() {  # NAME ARCH SIDES: a HAN model trained by divide and rule (Lupo, Dinarelli &
  # Besacier 2022, ACL; lorelupo/divide-and-rule, README steps 5-8 and sh/run/en-de/iwslt17/han.sh):
  # NAME-split, the context model (K1) started from the sentence transformer (K0) and trained on
  # the training pairs split in two (BIN_SPLIT, step prepare-split: docctx-prepare
  # --split-sentences DIVIDE_AND_RULE), then NAME, fine-tuned from it on the documents; the
  # sentence weights stay frozen in both stages (their --freeze-transfo-params); the
  # fine-tuning learns at a fixed DR_FINETUNE_LR, x0.99 each epoch (their --lr-scheduler fixed
  # --lr 2e-4 --fa 1 --lr-shrink 0.99)
  local name=$1 arch=$2 sides=$3
  [[ -n ${BIN_SPLIT:-} ]] || die "DIVIDE_AND_RULE=$DIVIDE_AND_RULE: this recipe prepares no split corpus"
  local model=(-s "$SRC" -t "$TGT" --context-size "$CONTEXT_SIZE" --context-sides "$sides" --arch "$arch"
    --han-context-size "$CONTEXT_SIZE" --freeze-sentence-weights)
  TRAIN_BIN=$BIN_SPLIT TRAIN_PREPARE=prepare-split train "$name-split" vaswani -d train-transformer -- \
    "${model[@]}" --init-from-sentence-checkpoint "$CKPT/transformer/checkpoint_best.pt"
  train "$name" drfinetune -d "train-$name-split" -- "${model[@]}" \
    --finetune-from-model "$CKPT/$name-split/checkpoint_best.pt"
}

_drfinetune() {  # Lupo et al. (2022)'s fine-tuning on the documents: the Transformer-base
  # settings with Adam at a fixed DR_FINETUNE_LR, shrunk x0.99 each epoch
  _vaswani
  local hp=() k=0
  while (( k < ${#HP[@]} )); do
    case ${HP[k]} in
      --lr|--lr-scheduler|--warmup-updates|--warmup-init-lr) k=$(( k + 2 )) ;;
      *) hp+=("${HP[k]}"); k=$(( k + 1 )) ;;
    esac
  done
  HP=("${hp[@]}" --lr "$DR_FINETUNE_LR" --lr-scheduler fixed --force-anneal 1 --lr-shrink 0.99)
}

hrnn_init_note() {  # the line results.md gives the hrnn_context rows: how they were initialised
  if [[ $HRNN_INIT == nematus ]]; then
    echo "hrnn rows: two-stage, every weight copied from the trained nematus model first (HRNN_INIT=nematus; a variant: Wang et al. 2017 describe no such stage)."
  else
    echo "hrnn rows: trained from random weights, as Wang et al. (2017) describe (HRNN_INIT=random)."
  fi
}

han_note() {  # the line results.md gives the HAN rows: how their stages were trained
  if [[ ${DIVIDE_AND_RULE:-none} != none ]]; then
    echo "HAN rows: divide and rule (Lupo et al. 2022; DIVIDE_AND_RULE=$DIVIDE_AND_RULE): each HAN model (K1) started from the sentence transformer (K0) and trained on the training pairs split in two ($DIVIDE_AND_RULE split, pairs of at least $DR_MIN_LEN source words; checkpoints/NAME-split), then fine-tuned on the documents at a fixed learning rate $DR_FINETUNE_LR (x0.99 each epoch), the sentence weights frozen in both stages, as the authors' released commands."
    return
  fi
  local epochs="until MAX_UPDATE or PATIENCE (HAN_STAGE2_EPOCHS=0)"
  (( HAN_STAGE2_EPOCHS > 0 )) && epochs="$HAN_STAGE2_EPOCHS epoch(s) (HAN_STAGE2_EPOCHS=$HAN_STAGE2_EPOCHS; the authors' released commands: 1)"
  if [[ $HAN_JOINT_FROM == encoder ]]; then
    echo "HAN rows: stage 2 from the sentence transformer, han from the trained han-encoder (HAN_JOINT_FROM=encoder, as Miculicich et al.'s released commands), stage 2 for $epochs."
  else
    echo "HAN rows: stage 2 from the sentence transformer, han too (HAN_JOINT_FROM=sentence; the authors' released commands start han from han-encoder), stage 2 for $epochs."
  fi
}

SEGMENT_MODELS=" doc2doc g-transformer g-transformer-fnd "

segment_note() {  # MODEL...: the line results.md gives the segment models: how their test
  # segments were decoded (the task logs, once the split is decoded, the segments whose best
  # hypothesis was misaligned with the source and were decoded again sentence by sentence,
  # of all the split's segments; docctx-generate logs the same line summed over its shards)
  local name line parts=() log
  for name in "$@"; do
    [[ $SEGMENT_MODELS == *" $name "* ]] || continue
    log=$LOGS/translate-$name.log
    if [[ ! -f $log ]]; then
      parts+=("$name not counted (no $log)")
      continue
    fi
    line=$(grep -o '[0-9]* of [0-9]* segments of the split decoded again sentence by sentence ([^)]*)' "$log" | tail -1 || true)
    if [[ -n $line ]]; then
      parts+=("$name ${line/ of the split/}")
    else
      parts+=("$name not counted (no count in $log: the decoding did not finish)")
    fi
  done
  (( ${#parts[@]} )) || return 0
  local joined
  joined=$(printf '%s; ' "${parts[@]}")
  echo "Segment models (trained and decoded on segments of at most $SEG_TOKENS tokens, one output sentence per source sentence, each output sentence within the G-Transformer authors' length window; a segment whose best hypothesis is misaligned with the source (another number of sentences, an empty sentence, a sentence outside its window) is decoded again sentence by sentence): ${joined%; }."
}

average_note() {  # the line results.md gives the translated checkpoints
  if (( AVERAGE > 0 )); then
    echo "Translated with the mean of each model's last $AVERAGE epoch checkpoints (AVERAGE=$AVERAGE: \`checkpoints/*/checkpoint_avg$AVERAGE.pt\`)."
  else
    echo "Translated with each model's \`checkpoint_best.pt\` (the lowest dev loss; AVERAGE=0: no averaging, as none of the papers average)."
  fi
}

_need_model() {  # MODEL WHO: WHO starts from MODEL, which must be trained first
  step_done "train-$1" || die "$2 starts from the $1 model: put $1 before $2 in MODELS"
}

# ---------------------------------------------------------------- test set

translate() {  # NAME: the test split with checkpoint_best.pt; document order where the model
  # reads its own previous translations (HAN decoders), the drafts given (MHT)
  local name=$1
  eval_checkpoint "$name"
  local deps=(-d "$EVAL_STEP")
  [[ $name == mht ]] && deps+=(-d drafts)
  generate_step "translate-$name" "$BIN" "$EVAL_CKPT" "$GEN/$name" "${deps[@]}"
}

generate_step() {  # STEP DATA CHECKPOINT OUTDIR [-d DEP]... [-- fairseq-generate arguments]:
  # DATA's test split translated into OUTDIR/generate-test.txt (GENERATE: one process or several)
  local name=$1 data=$2 ckpt=$3 out=$4; shift 4
  local deps=()
  while [[ $# -gt 0 && $1 == -d ]]; do deps+=(-d "$2"); shift 2; done
  [[ ${1:-} == -- ]] && shift
  # shellcheck disable=SC2206
  local extra=($EXTRA_GEN_ARGS)
  step "$name" "${deps[@]}" -o "$out/generate-test.txt" -- \
    "${GENERATE[@]}" "$data" --user-dir "$REPO/fairseq_docctx" --task document_translation \
      --path "$ckpt" --gen-subset test --beam "$BEAM" --lenpen "$LENPEN" \
      --max-len-a "$GEN_MAX_LEN_A" --max-len-b "$GEN_MAX_LEN_B" --max-tokens "$GEN_MAX_TOKENS" --required-batch-size-multiple 1 \
      --num-workers "$NUM_WORKERS" --results-path "$out" "${GEN_DEVICE_ARGS[@]}" "$@" "${extra[@]}"
}

score_run() {  # NAME METRICS [HYP]: docctx-score of the test translations (HYP, default
  # GEN/NAME/generate-test.txt) against REF_TEST into SCORES/NAME.json
  # (a BLEU and its d-BLEU both asked for: one docctx-score bleu --both gives the two)
  local name=$1 metrics=$2 hyp=${3:-$GEN/$1/generate-test.txt} json=$SCORES/$1.json m lc=() level
  rm -f "$json"
  (( BLEU_TOK_LOWERCASE )) && lc=(--lowercase)
  local tok=(--pretokenize "${BLEU_PRETOKENIZE:-moses}" --lang "$TGT" "${lc[@]}")
  for m in ${metrics//,/ }; do
    case $m in
      bleu|d-bleu|bleu_tok|d-bleu_tok)
        local s=${m#d-} pair=
        [[ ,$metrics, == *,$s,* && ,$metrics, == *,d-$s,* ]] && pair=1
        [[ -n $pair && $m == d-* ]] && continue  # scored with its sentence-level BLEU
        if [[ -n $pair ]]; then level=(--both); elif [[ $m == d-* ]]; then level=(--document); else level=(); fi
        local pre=()
        [[ $s == bleu_tok ]] && pre=("${tok[@]}")
        docctx-score bleu "${level[@]}" "${pre[@]}" --hyp "$hyp" --data "$BIN" --ref "$REF_TEST" --json "$json" \
          --name "$name" ;;
      meteor) docctx-score meteor --hyp "$hyp" --data "$BIN" --ref "$REF_TEST" --json "$json" --name "$name" ;;
      meteor-1.5*) local mods=${m#meteor-1.5}; mods=${mods#-}  # meteor-1.5-exact-stem: modules exact stem
        docctx-score meteor --meteor 1.5 --lang "$TGT" ${mods:+--meteor-modules "${mods//-/ }"} --hyp "$hyp" \
          --data "$BIN" --ref "$REF_TEST" --json "$json" --name "$name" ;;
      *) echo "unknown metric $m (bleu, bleu_tok, d-bleu, d-bleu_tok, meteor, meteor-1.5[-MODULE...])" >&2; return 2 ;;
    esac
  done
}

metric_label() {  # METRIC: how score_run scores it (results.md's legend of its columns)
  case $1 in
    bleu) echo "BLEU (sacreBLEU 13a, cased, detokenized)" ;;
    bleu_tok)  # multi-bleu.perl's BLEU of the text tokenized by --pretokenize (Moses': as the papers)
      local how="docctx-score bleu --pretokenize ${BLEU_PRETOKENIZE:-moses} -l ${TGT:-TGT}"
      if (( BLEU_TOK_LOWERCASE )); then echo "BLEU (tokenized, lowercased: multi-bleu.perl -lc; $how --lowercase)"
      else echo "BLEU (tokenized, cased: multi-bleu.perl; $how)"; fi ;;
    d-bleu) echo "d-BLEU: sacreBLEU 13a, cased, detokenized, over whole test documents, each document's sentences joined (docctx-score bleu --document)" ;;
    d-bleu_tok) echo "d-BLEU of the tokenized text: multi-bleu.perl over whole test documents, each document's sentences joined (docctx-score bleu --document --pretokenize ${BLEU_PRETOKENIZE:-moses} -l ${TGT:-TGT})" ;;
    meteor) echo "nltk's METEOR (docctx-score meteor, WordNet): not METEOR 1.5, not comparable with a paper's Meteor" ;;
    meteor-1.5) echo "METEOR 1.5 (docctx-score meteor --meteor 1.5 -l ${TGT:-TGT})" ;;
    meteor-1.5-*) echo "METEOR 1.5 with the modules ${1#meteor-1.5-} only (docctx-score meteor --meteor 1.5 -l ${TGT:-TGT} --meteor-modules; without paraphrases: pycocoevalcap ships English's table only)" ;;
    contrastive:*) echo "accuracy on the contrastive set ${1#contrastive:} (docctx-score contrastive)" ;;
    *) echo "" ;;
  esac
}

run_models() {  # MODEL...: train, translate and score each
  local name
  for name in "$@"; do
    train_model "$name"
    translate "$name"
    step "score-$name" -d "translate-$name" -o "$SCORES/$name.json" -- score_run "$name" "$METRICS"
  done
}

write_results() {  # TITLE MODEL...: WORK/results.md, each score beside the paper's number
  # (RESULTS_NOTE: what the metrics are, where the recipe's are not bleu and bleu_tok)
  local title=$1; shift
  local runs=() name
  for name in "$@"; do runs+=("$SCORES/$name.json"); done
  docctx-score table "${runs[@]}" --metrics "$METRICS" --paper-scores "$PAPER_SCORES" \
    -o "$WORK/results.table.md" || die "docctx-score table failed"
  {
    echo "# $title"
    echo
    if [[ $SMOKE == 1 ]]; then
      echo "**SMOKE run** (SMOKE=1): tiny models trained for $MAX_UPDATE updates on a slice of the bundled data;"
      echo "the scores only show that the chain runs and are not comparable with the papers'."
    else
      echo "Mode: ${DATA_MODE:-full}. ${DATA_NOTE:-}"
    fi
    echo
    echo "Device: $DEVICE_NOTE. Settings: \`settings.txt\`; models: \`checkpoints/*/\`;"
    echo "test translations: \`generate/*/generate-test.txt\`; scores: \`scores/*.json\`."
    echo "$(average_note)"
    local note
    for note in "${RECIPE_NOTES[@]}"; do echo "${note^}."; done
    if [[ " $* " =~ \ han[a-z-]*\  ]]; then han_note; fi
    segment_note "$@"
    if [[ -n ${RESULTS_NOTE:-} ]]; then
      echo "$RESULTS_NOTE"
    else
      echo "Columns (how each was scored):"
      local m label
      for m in ${METRICS//,/ }; do
        label=$(metric_label "$m")
        if [[ -n $label ]]; then echo "- \`$m\`: $label"; fi
      done
    fi
    echo
    cat "$WORK/results.table.md"
  } > "$WORK/results.md"
  say "results: $WORK/results.md"
  cat "$WORK/results.md"
}
