#!/usr/bin/env bash
# The end-to-end demo (`make demo`): raw TED documents -> SentencePiece + fairseq data with a
# document index -> a small document-level model (concat_transformer, 1 previous source
# sentence as context) trained for a fixed wall-clock budget on CPU -> beam search on the
# IWSLT17 test talks -> detokenized sacreBLEU against the original reference text.
#
# Data: ../shared/data/maruf-ende/IWSLT2017 (Maruf et al. 2019's TED split, relative to the
# repository root). The ~200K-sentence TED training side is not part of that folder, so the
# demo trains on the 93 dev talks (8,967 sentences) and tests on the 23 test talks (2,271
# sentences). There is no validation set: the only other in-domain documents are the test
# talks, which must not be used to pick a model, so training runs with --disable-validation
# for a fixed time and the last checkpoint is translated.
#
# Everything is written to demo-work/ (git-ignored). A re-run reuses the steps that finished
# with the same settings (data, model, translations) and redoes the rest; FRESH=1 (or
# `rm -rf demo-work`) starts over. About 10 minutes on 2 CPU cores: 8 minutes of training, then
# about 1-3 minutes of beam search. A model trained for 8 CPU minutes on 9K sentences is
# weak: expect a BLEU of about 1-3, clearly above 0, nowhere near a real system. The model is
# deliberately tiny (2+2 layers, dim 128): in a few CPU minutes it learns more than a bigger one.
#
# Settings (environment variables, defaults in brackets): TRAIN_MINUTES [8], SPM_VOCAB [4000],
# CONTEXT_SIZE [1], LAYERS [2], DIM [128], FFN [512], LR [0.004], BEAM [4],
# DATA [../shared/data/maruf-ende], WORK [demo-work], FRESH [0].
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DATA:-../shared/data/maruf-ende}
WORK=${WORK:-demo-work}
TRAIN_MINUTES=${TRAIN_MINUTES:-8}
SPM_VOCAB=${SPM_VOCAB:-4000}
CONTEXT_SIZE=${CONTEXT_SIZE:-1}
BEAM=${BEAM:-4}
LAYERS=${LAYERS:-2}
DIM=${DIM:-128}
FFN=${FFN:-512}
LR=${LR:-0.004}
FRESH=${FRESH:-0}
SRC=en
TGT=de
TED=$DATA/IWSLT2017
TRAIN_PREFIX="$TED/concatenated_en2de_dev_{lang}.txt"
TEST_PREFIX="$TED/concatenated_en2de_test_{lang}.txt"

T0=$(date +%s)
say() { printf '[demo %s +%ds] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "demo: error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- checks
missing=()
for split in dev test; do
  for lang in $SRC $TGT; do
    f=$TED/concatenated_en2de_${split}_${lang}.txt
    [[ -f $f ]] || missing+=("$f")
  done
done
if (( ${#missing[@]} )); then
  cat >&2 <<EOF
demo: the demo needs Maruf et al. (2019)'s document-level En-De TED data, which is not there:
$(printf '  missing: %s\n' "${missing[@]}")
Put the folder maruf-ende/ (Maruf et al. 2019's document-level En-De splits: IWSLT2017, NC-2016,
Europarl7, as distributed with their code and in the project's shared data) at
  ${DATA}/   (relative to the repository root $(pwd))
so that these four files exist:
  ${TED}/concatenated_en2de_dev_en.txt    ${TED}/concatenated_en2de_dev_de.txt
  ${TED}/concatenated_en2de_test_en.txt   ${TED}/concatenated_en2de_test_de.txt
(one sentence per line, a line "<d>" before each document), or set DATA=/path/to/maruf-ende.
EOF
  exit 1
fi
for cmd in docctx-prepare fairseq-train fairseq-generate sacrebleu; do
  command -v $cmd >/dev/null || die "$cmd is not on PATH: run 'make demo' (it creates .venv/), or activate .venv first"
done
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
# torch's OpenMP threads sleep instead of spinning while they wait: on a 2-core machine with
# anything else running, spinning threads make training and beam search several times slower.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

BIN=$WORK/data-bin
CKPT=$WORK/checkpoints
RES=$WORK/results
if [[ $FRESH == 1 ]]; then
  say "FRESH=1: removing the demo's earlier results from $WORK/"
  rm -rf "$BIN" "$CKPT" "$RES" "$WORK"/*.done "$WORK"/*.log
fi
mkdir -p "$WORK"

# A step is reused when its stamp file holds the same settings as now.
stamp_ok() { [[ -f $1 && "$(cat "$1")" == "$2" ]]; }

say "data: $TED (train = dev talks, test = test talks); work dir: $WORK/"
say "settings: SentencePiece $SPM_VOCAB, concat_transformer with $CONTEXT_SIZE previous source sentence(s), $TRAIN_MINUTES min of training, beam $BEAM"

# ---------------------------------------------------------------- (a) prepare
PREP_ARGS=(-s $SRC -t $TGT --input-format marker --joined-dictionary --workers 2
  --trainpref "$TRAIN_PREFIX" --testpref "$TEST_PREFIX" --spm-vocab-size "$SPM_VOCAB")
PREP_KEY="${PREP_ARGS[*]}"
if stamp_ok "$WORK/prepare.done" "$PREP_KEY" && [[ -f $BIN/docctx.json ]]; then
  say "(a) reusing the prepared data in $BIN/"
else
  say "(a) docctx-prepare: raw documents -> joint SentencePiece ($SPM_VOCAB pieces) -> $BIN/"
  rm -rf "$BIN" "$WORK/prepare.done" "$WORK/train.done" "$WORK/generate.done"
  docctx-prepare "${PREP_ARGS[@]}" --destdir "$BIN"
  echo "$PREP_KEY" > "$WORK/prepare.done"
fi

# ---------------------------------------------------------------- (b) train
TASK_ARGS=(--user-dir fairseq_docctx --task document_translation
  --source-lang $SRC --target-lang $TGT
  --context-size "$CONTEXT_SIZE" --context-sides source)
TRAIN_ARGS=(--arch concat_transformer
  --encoder-layers "$LAYERS" --decoder-layers "$LAYERS"
  --encoder-embed-dim "$DIM" --decoder-embed-dim "$DIM"
  --encoder-ffn-embed-dim "$FFN" --decoder-ffn-embed-dim "$FFN"
  --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings
  --encoder-normalize-before --decoder-normalize-before
  --dropout 0.0
  --optimizer adam --adam-betas '(0.9, 0.98)' --clip-norm 1.0
  --lr "$LR" --lr-scheduler inverse_sqrt --warmup-updates 200 --warmup-init-lr 1e-07
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --max-tokens 4096 --seed 1 --cpu
  --stop-time-hours "$(awk "BEGIN{print $TRAIN_MINUTES/60}")" --max-epoch 1000
  --disable-validation --no-epoch-checkpoints
  --log-format simple --log-interval 50)
TRAIN_KEY="$PREP_KEY | ${TASK_ARGS[*]} ${TRAIN_ARGS[*]}"
if stamp_ok "$WORK/train.done" "$TRAIN_KEY" && [[ -f $CKPT/checkpoint_last.pt ]]; then
  say "(b) reusing the model trained by an earlier run: $CKPT/checkpoint_last.pt (FRESH=1 retrains)"
else
  say "(b) fairseq-train: concat_transformer ($LAYERS+$LAYERS layers, dim $DIM), $TRAIN_MINUTES minutes of training on CPU;"
  say "    progress every 50 updates (full log: $WORK/train.log)"
  rm -rf "$CKPT" "$WORK/train.done" "$WORK/generate.done"
  fairseq-train "$BIN" "${TASK_ARGS[@]}" "${TRAIN_ARGS[@]}" --save-dir "$CKPT" 2>&1 \
    | tee "$WORK/train.log" \
    | grep --line-buffered -E '\| (train_inner|train) \||Stopping|done training|model concat|num. model params|[Ee]rror|Traceback' \
    | sed -u -E 's/^[0-9-]+ [0-9:]+ \| INFO \| //'
  [[ -f $CKPT/checkpoint_last.pt ]] || die "training wrote no checkpoint (see $WORK/train.log)"
  echo "$TRAIN_KEY" > "$WORK/train.done"
fi

# ---------------------------------------------------------------- (c) translate
GEN_ARGS=(--gen-subset test --beam "$BEAM" --max-len-a 1.2 --max-len-b 10
  --max-tokens 8000 --required-batch-size-multiple 1
  --post-process sentencepiece --scoring sacrebleu --cpu)
GEN_KEY="$TRAIN_KEY | ${GEN_ARGS[*]}"
if stamp_ok "$WORK/generate.done" "$GEN_KEY" && [[ -f $RES/generate-test.txt ]]; then
  say "(c) reusing the translations in $RES/generate-test.txt"
else
  say "(c) fairseq-generate: the $(grep -vc '^<d>' <(tr -d '\r' < "$TED/concatenated_en2de_test_${SRC}.txt")) test sentences, beam $BEAM, with their context -> $RES/"
  rm -rf "$RES" "$WORK/generate.done"
  fairseq-generate "$BIN" "${TASK_ARGS[@]}" --path "$CKPT/checkpoint_last.pt" \
    "${GEN_ARGS[@]}" --results-path "$RES" 2> "$WORK/generate.log" \
    || { tail -20 "$WORK/generate.log" >&2; die "fairseq-generate failed (see $WORK/generate.log)"; }
  echo "$GEN_KEY" > "$WORK/generate.done"
fi

# ---------------------------------------------------------------- (d) score
# hypotheses in corpus order (fairseq prints them in batch order: sort by the H-<id> number)
grep '^H-' "$RES/generate-test.txt" | sed 's/^H-//' | sort -n -k1,1 | cut -f3 > "$RES/test.hyp.$TGT"
# references: the original text of the test set, without the <d> lines, CR and trailing spaces
raw() { tr -d '\r' < "$1" | grep -v -E '^[[:space:]]*<d>[[:space:]]*$' | sed -E 's/[[:space:]]+$//'; }
raw "$TED/concatenated_en2de_test_${TGT}.txt" > "$RES/test.ref.$TGT"
raw "$TED/concatenated_en2de_test_${SRC}.txt" > "$RES/test.src.$SRC"
nh=$(wc -l < "$RES/test.hyp.$TGT"); nr=$(wc -l < "$RES/test.ref.$TGT")
[[ $nh == "$nr" ]] || die "$nh hypotheses for $nr reference sentences"

say "(d) detokenized sacreBLEU of $nh hypotheses ($RES/test.hyp.$TGT) against the original references ($RES/test.ref.$TGT):"
echo
for i in 1 2 3; do
  printf '  SRC: %s\n  REF: %s\n  HYP: %s\n\n' "$(sed -n ${i}p "$RES/test.src.$SRC")" \
    "$(sed -n ${i}p "$RES/test.ref.$TGT")" "$(sed -n ${i}p "$RES/test.hyp.$TGT")"
done
sacrebleu "$RES/test.ref.$TGT" -i "$RES/test.hyp.$TGT" -m bleu -f text | tee "$RES/bleu.txt"
echo
say "done in $(( ($(date +%s) - T0) / 60 )) min $(( ($(date +%s) - T0) % 60 )) s"
