#!/usr/bin/env bash
# The end-to-end demo (`make demo`), in two parts:
#
# (1) The context probe (about 3 minutes): what document-level translation buys. The synthetic
#     probe (fairseq_docctx/probe.py) has words that cannot be translated from the current
#     sentence alone: "it" -> er/sie after the noun one or two sentences back, and a word
#     that must repeat the form chosen earlier in the document. A sentence-level transformer
#     and a context model (concat_transformer reading the 2 previous sentences, source and
#     target: Tiedemann & Scherrer 2017's concatenation; at test time it reads its own previous
#     translations) are trained on it for 600 updates each, side by side (one thread each), then `docctx-probe evaluate` prints, side by side, their accuracy on those
#     words (document-order translation, greedy), their CXMI (Fernandes et al. 2021: how much
#     the true context raises the reference's log-likelihood; exactly 0 for a model that
#     ignores it), and `docctx-score plot` draws what the context model attends to in one
#     example (a pronoun whose noun is two sentences back) into a PNG.
#
# (2) Real data: raw TED documents -> SentencePiece + fairseq data with a document index -> a
#     small document-level model (concat_transformer, 1 previous source sentence as context)
#     trained for a fixed wall-clock budget on CPU -> beam search on the IWSLT17 test talks ->
#     detokenized sacreBLEU against the original reference text. A model trained for minutes
#     of CPU on 9K sentences is weak: expect a BLEU of about 1-3, clearly above 0 but saying
#     nothing about context -- which is what part (1) is for.
#
# Data of part (2): ../shared/data/maruf-ende/IWSLT2017 (Maruf et al. 2019's TED split,
# relative to the repository root). The ~200K-sentence TED training side is not part of that
# folder, so the demo trains on the 93 dev talks (8,967 sentences) and tests on the 23 test
# talks (2,271 sentences). There is no validation set: the only other in-domain documents are
# the test talks, which must not be used to pick a model, so training runs with
# --disable-validation for a fixed time and the last checkpoint is translated. The model is
# deliberately tiny (2+2 layers, dim 128): in a few CPU minutes it learns more than a bigger one.
# Part (1) generates its own data (seeded): it needs nothing but the code.
#
# Everything is written to demo-work/ (git-ignored). A re-run reuses the steps that finished
# with the same settings (data, models, translations) and redoes the rest; FRESH=1 (or
# `rm -rf demo-work`) starts over. Measured on 2 CPU cores shared with other jobs (the demo got
# 64% of them): 14.6 minutes in all, 5.6 for part (1) (4 CPU minutes: two one-thread trainings
# side by side, then 17 s of evaluation), 9.1 for part (2) (7 minutes of training, then 1.8
# minutes of beam search). Part (2) trains for a fixed time, so on a busy machine it makes
# fewer updates (319 in that run) and scores lower (BLEU 0.4 there).
#
# Settings (environment variables, defaults in brackets): PARTS [probe,ted] (the parts to run),
# PROBE_UPDATES [600], PROBE_TRAIN_DOCS [2000], PROBE_TEST_DOCS [200], TRAIN_MINUTES [7],
# SPM_VOCAB [4000], CONTEXT_SIZE [1], LAYERS [2], DIM [128], FFN [512], LR [0.004], BEAM [4],
# DATA [../shared/data/maruf-ende], WORK [demo-work], FRESH [0].
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${DATA:-../shared/data/maruf-ende}
WORK=${WORK:-demo-work}
TRAIN_MINUTES=${TRAIN_MINUTES:-7}
SPM_VOCAB=${SPM_VOCAB:-4000}
CONTEXT_SIZE=${CONTEXT_SIZE:-1}
BEAM=${BEAM:-4}
LAYERS=${LAYERS:-2}
DIM=${DIM:-128}
FFN=${FFN:-512}
LR=${LR:-0.004}
FRESH=${FRESH:-0}
PARTS=${PARTS:-probe,ted}
PROBE_UPDATES=${PROBE_UPDATES:-600}
PROBE_TRAIN_DOCS=${PROBE_TRAIN_DOCS:-2000}
PROBE_TEST_DOCS=${PROBE_TEST_DOCS:-200}
SRC=en
TGT=de
TED=$DATA/IWSLT2017
TRAIN_PREFIX="$TED/concatenated_en2de_dev_{lang}.txt"
TEST_PREFIX="$TED/concatenated_en2de_test_{lang}.txt"

T0=$(date +%s)
say() { printf '[demo %s +%ds] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - T0 ))" "$*"; }
die() { echo "demo: error: $*" >&2; exit 1; }

# ---------------------------------------------------------------- checks
has_part() { [[ ",$PARTS," == *",$1,"* ]]; }
for part in ${PARTS//,/ }; do
  [[ $part == probe || $part == ted ]] || die "PARTS=$PARTS: the parts are 'probe' and 'ted' (comma-separated)"
done
missing=()
for split in dev test; do
  for lang in $SRC $TGT; do
    f=$TED/concatenated_en2de_${split}_${lang}.txt
    [[ -f $f ]] || missing+=("$f")
  done
done
if has_part ted && (( ${#missing[@]} )); then
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
(PARTS=probe runs only the context probe, which needs no data.)
EOF
  exit 1
fi
for cmd in docctx-prepare docctx-probe docctx-score fairseq-train fairseq-generate sacrebleu; do
  command -v $cmd >/dev/null || die "$cmd is not on PATH: run 'make demo' (it creates .venv/), or activate .venv first"
done
export PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
# torch's OpenMP threads sleep instead of spinning while they wait: on a 2-core machine with
# anything else running, spinning threads make training and beam search several times slower.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

BIN=$WORK/data-bin
CKPT=$WORK/checkpoints
RES=$WORK/results
PROBE=$WORK/probe
if [[ $FRESH == 1 ]]; then
  say "FRESH=1: removing the demo's earlier results from $WORK/"
  rm -rf "$BIN" "$CKPT" "$RES" "$PROBE" "$WORK"/*.done "$WORK"/*.log
fi
mkdir -p "$WORK"

# A step is reused when its stamp file holds the same settings as now.
stamp_ok() { [[ -f $1 && "$(cat "$1")" == "$2" ]]; }

# ================================================================ part (1): the context probe
run_probe() {
  local text=$PROBE/text bin=$PROBE/data-bin out=$PROBE/results
  say "part (1): the context probe -- words that need the previous sentences; work dir: $PROBE/"
  # ------------------------------------------------------------ (p1) generate + prepare
  local gen_args=(--train-docs "$PROBE_TRAIN_DOCS" --valid-docs 0 --test-docs "$PROBE_TEST_DOCS" --seed 1)
  local prep_args=(-s src -t tgt --input-format docids --joined-dictionary
    --trainpref "$text/train" --testpref "$text/test")
  local key="${gen_args[*]} | ${prep_args[*]}"
  if stamp_ok "$PROBE/prepare.done" "$key" && [[ -f $bin/docctx.json ]]; then
    say "(p1) reusing the probe data in $bin/"
  else
    say "(p1) docctx-probe generate: $PROBE_TRAIN_DOCS training and $PROBE_TEST_DOCS test documents -> $text/; docctx-prepare -> $bin/"
    rm -rf "$PROBE"
    mkdir -p "$PROBE"
    docctx-probe generate --outdir "$text" "${gen_args[@]}" | sed -u 's/^/    /'
    docctx-prepare "${prep_args[@]}" --destdir "$bin" > "$PROBE/prepare.log" 2>&1 \
      || { tail -5 "$PROBE/prepare.log" >&2; die "docctx-prepare of the probe failed (see $PROBE/prepare.log)"; }
    echo "$key" > "$PROBE/prepare.done"
  fi
  printf '    the first test document:\n'
  paste "$text/test.docids" "$text/test.src" "$text/test.tgt" \
    | awk -F'\t' 'NR == 1 { d = $1 } $1 == d { printf "      %-40s -> %s\n", $2, $3 }'

  # ------------------------------------------------------------ (p2) train both models, side by side
  # The settings of the probe tests (tests/probe_utils.py): 2+2 layers, dim 64, 600 updates.
  local common=(--user-dir fairseq_docctx --task document_translation --cpu --num-workers 0
    --encoder-layers 2 --decoder-layers 2 --encoder-embed-dim 64 --decoder-embed-dim 64
    --encoder-ffn-embed-dim 128 --decoder-ffn-embed-dim 128
    --encoder-attention-heads 4 --decoder-attention-heads 4 --share-all-embeddings
    --dropout 0.1 --optimizer adam --adam-betas '(0.9, 0.98)' --lr 2e-3
    --lr-scheduler inverse_sqrt --warmup-updates 200
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1
    --max-tokens 2000 --required-batch-size-multiple 1 --max-update "$PROBE_UPDATES" --seed 1
    --disable-validation --no-epoch-checkpoints --log-format simple --log-interval 100)
  local -A model_args=(
    [sentence]="--arch transformer --context-size 0"
    [context]="--arch concat_transformer --context-size 2 --context-sides both")
  local name pids=() names=()
  for name in sentence context; do
    local k2="$key | ${common[*]} ${model_args[$name]}"
    if stamp_ok "$PROBE/train-$name.done" "$k2" && [[ -f $PROBE/$name/checkpoint_last.pt ]]; then
      say "(p2) reusing the $name model: $PROBE/$name/checkpoint_last.pt"
      continue
    fi
    rm -rf "${PROBE:?}/$name" "$PROBE/train-$name.done" "$PROBE/evaluate.done"
    # one thread per training: the two run side by side on two cores
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 fairseq-train "$bin" "${common[@]}" ${model_args[$name]} \
      --save-dir "$PROBE/$name" > "$PROBE/train-$name.log" 2>&1 &
    pids+=($!) names+=("$name")
    echo "$k2" > "$PROBE/train-$name.todo"
  done
  if (( ${#pids[@]} )); then
    say "(p2) fairseq-train, side by side, $PROBE_UPDATES updates each (logs: $PROBE/train-*.log):"
    say "     sentence = transformer (no context); context = concat_transformer (the 2 previous sentences, source and target)"
  fi
  local failed=0 i
  for i in "${!pids[@]}"; do
    name=${names[$i]}
    if wait "${pids[$i]}" && [[ -f $PROBE/$name/checkpoint_last.pt ]]; then
      mv "$PROBE/train-$name.todo" "$PROBE/train-$name.done"
      say "     $name model trained: $(grep -E '\| train \|' "$PROBE/train-$name.log" | tail -1 | grep -oE '\| loss [0-9.]+' | sed 's/| //' || true)"
    else
      tail -5 "$PROBE/train-$name.log" >&2
      echo "demo: error: training the $name model failed (see $PROBE/train-$name.log)" >&2
      failed=1
    fi
  done
  (( failed == 0 )) || exit 1

  # ------------------------------------------------------------ (p3) evaluate side by side + plot
  local k3="$(cat "$PROBE/train-sentence.done") $(cat "$PROBE/train-context.done")"
  if stamp_ok "$PROBE/evaluate.done" "$k3" && [[ -f $out/table.txt ]]; then
    say "(p3) reusing the evaluation in $out/"
  else
    say "(p3) docctx-probe evaluate: both models translate the $(wc -l < "$text/test.src") test sentences in document order and score the references with and without context (CXMI)"
    rm -rf "$out"
    mkdir -p "$out"
    docctx-probe evaluate --data "$bin" --annotations "$text/test.probe.jsonl" \
      --model sentence="$PROBE/sentence/checkpoint_last.pt" \
      --model context="$PROBE/context/checkpoint_last.pt" \
      --hyp-dir "$out" --json "$out/results.json" > "$out/table.txt" 2> "$out/evaluate.log" \
      || { tail -5 "$out/evaluate.log" >&2; die "docctx-probe evaluate failed (see $out/evaluate.log)"; }
    # one example: a pronoun whose noun is 2 sentences back, right in context, wrong without
    docctx-probe example --annotations "$text/test.probe.jsonl" --distance 2 \
      --hyp "$out/context.hyp" --wrong "$out/sentence.hyp" > "$out/example.tsv" \
      || die "docctx-probe example failed"
    local doc sent docid line
    read -r doc sent docid line < "$out/example.tsv"
    docctx-score plot --path "$PROBE/context/checkpoint_last.pt" --data "$bin" --split test \
      --doc "$doc" --sentence "$sent" --outdir "$out/plot" > "$out/plot.log" 2>&1 \
      || { tail -5 "$out/plot.log" >&2; die "docctx-score plot failed (see $out/plot.log)"; }
    local png
    png=$(ls "$out"/plot/*.png 2>/dev/null | head -1)
    [[ -n $png ]] || die "docctx-score plot wrote no PNG (see $out/plot.log)"
    {
      echo "example: test document $docid, sentence $sent (the noun is 2 sentences back):"
      local l
      for (( l = line - sent; l <= line; l++ )); do
        printf '  %s  %s\n' "$([[ $l == "$line" ]] && echo '>' || echo ' ')" "$(sed -n "$((l + 1))p" "$text/test.src")"
      done
      printf '  reference:      %s\n' "$(sed -n "$((line + 1))p" "$text/test.tgt")"
      printf '  sentence model: %s\n' "$(sed -n "$((line + 1))p" "$out/sentence.hyp")"
      printf '  context model:  %s\n' "$(sed -n "$((line + 1))p" "$out/context.hyp")"
      echo "what the context model attends to there (attention mass per sentence, per target word):"
      echo "  $png"
    } > "$out/example.txt"
    echo "$k3" > "$PROBE/evaluate.done"
  fi
  say "(p3) the context probe's test set, side by side (accuracy on the words that need context; chance = 50%):"
  echo
  sed 's/^/  /' "$out/table.txt"
  echo
  cat "$out/example.txt"
  echo
}

# ================================================================ part (2): real TED data
run_ted() {
  say "part (2): real data: $TED (train = dev talks, test = test talks); work dir: $WORK/"
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
}

has_part probe && run_probe
has_part ted && run_ted
if has_part probe && has_part ted; then
  say "summary: the context probe (chance = 50%) and TED (sacreBLEU):"
  echo
  sed 's/^/  /' "$PROBE/results/table.txt"
  echo "  attention plot: $(tail -1 "$PROBE/results/example.txt" | sed 's/^ *//')"
  echo "  TED test, concat_transformer after $TRAIN_MINUTES minutes of CPU training: $(cat "$RES/bleu.txt")"
  echo
fi
say "done in $(( ($(date +%s) - T0) / 60 )) min $(( ($(date +%s) - T0) % 60 )) s"
