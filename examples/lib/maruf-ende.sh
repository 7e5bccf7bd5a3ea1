# Maruf, Martins & Haffari (2019)'s document-level En-De corpora (TED = IWSLT2017, News
# Commentary = NC-2016, Europarl7), the data of the QCN (Yang et al. 2019, §4.1) and MHT
# (Zhang et al. 2021, §4.1) papers, for the recipes ted-ende, nc-ende and europarl-ende
# (maruf_ende_data: the files and the recipe's SentencePiece data folder) and pretrained
# (maruf_ende_files: the files only) (sourced after recipe.sh; documented in docs/recipes.md).
#
# Files: CORPUS/concatenated_en2de_{train,dev,test}_{en,de}.txt, a line "<d>" before each
# document. Dev and test are in the authors' repository: missing ones are downloaded (pinned
# commit, sha256 in maruf-ende.sha256). So is the TED (IWSLT2017) training side: missing, it is
# downloaded from the same commit and checked by its git blob id (maruf-ende.blobs: the ids
# the repository's tree records, which pin files not downloaded when this was written). The
# NC-2016 and Europarl7 training sides are not in the repository (Europarl's is over 500 MB):
# the authors' data/readme.txt (repository HEAD) links them; put them in DATA/CORPUS.
#
# Settings: DATA [the bundled data ../shared/data/maruf-ende, or a folder of the user's with
#   the corpus sub-folders] SPM_VOCAB [30000: the papers' 30K BPE merges; 300 in SMOKE]
#   MAX_LEN [250] MAX_LEN_RATIO [3] (training pairs longer are dropped, docctx-prepare reports
#   how many) SMOKE_TRAIN_DOCS, SMOKE_VALID_DOCS, SMOKE_TEST_DOCS (SMOKE: train on the first
#   dev documents, validate on the next ones, test on the first test documents)
#   DIVIDE_AND_RULE [none | middle | aligned: Lupo et al. (2022)'s pre-training of the HAN models
#   on the training pairs split in two (step prepare-split, data-bin-split-MODE; models.sh,
#   _divide_and_rule)] DR_MIN_LEN [7: pairs of fewer source words stay whole] DR_FINETUNE_LR [2e-4]

MARUF_URL=https://raw.githubusercontent.com/sameenmaruf/selective-attn/1cb44c5ddd2cdf4f32ea74768a3389b52fc4db27/data
MARUF_README=https://github.com/sameenmaruf/selective-attn/blob/master/data/readme.txt

maruf_ende_files() {  # CORPUS_NAME (IWSLT2017 | NC-2016 | Europarl7): MARUF_FILES (docctx-prepare's
  # --trainpref, --validpref and --testpref of the split, raw text in the marker format),
  # REF_TEST, DATA_MODE; missing dev and test files (and the TED training side) downloaded
  local corpus=$1 split lang f sum
  setting DATA ../shared/data/maruf-ende
  local dir=$DATA/$corpus got=$DOWNLOADS/$corpus
  for split in dev test; do
    for lang in en de; do
      f=concatenated_en2de_${split}_${lang}.txt
      if [[ ! -f $dir/$f ]]; then
        sum=$(awk -v p="$corpus/$f" '$2 == p {print $1}' "$RECIPE_LIB/maruf-ende.sha256")
        fetch "$MARUF_URL/$corpus/$f" "$sum" "$got/$f" \
          "no network? put Maruf et al.'s $corpus folder in DATA (now $DATA)"
      fi
    done
  done
  _maruf() { if [[ -f $dir/${1//\{lang\}/en} ]]; then echo "$dir/$1"; else echo "$got/$1"; fi; }
  if [[ $SMOKE == 1 ]]; then
    mkdir -p "$WORK/smoke-data"
    for lang in en de; do
      slice_marker "$(_maruf concatenated_en2de_dev_$lang.txt)" 0 "$SMOKE_TRAIN_DOCS" "$WORK/smoke-data/train.$lang"
      slice_marker "$(_maruf concatenated_en2de_dev_$lang.txt)" "$SMOKE_TRAIN_DOCS" "$SMOKE_VALID_DOCS" "$WORK/smoke-data/valid.$lang"
      slice_marker "$(_maruf concatenated_en2de_test_$lang.txt)" 0 "$SMOKE_TEST_DOCS" "$WORK/smoke-data/test.$lang"
    done
    MARUF_FILES=(--trainpref "$WORK/smoke-data/train" --validpref "$WORK/smoke-data/valid" --testpref "$WORK/smoke-data/test")
    REF_TEST=$WORK/smoke-data/test.de
    DATA_MODE=smoke
  else
    # the training side: both files in DATA/CORPUS, else downloaded where the repository has them
    local blob trainpref=$dir/'concatenated_en2de_train_{lang}.txt'
    if [[ ! -f $dir/concatenated_en2de_train_en.txt || ! -f $dir/concatenated_en2de_train_de.txt ]]; then
      trainpref=$got/'concatenated_en2de_train_{lang}.txt'
      for lang in en de; do
        f=concatenated_en2de_train_$lang.txt
        blob=$(awk -v p="$corpus/$f" '$2 == p {print $1}' "$RECIPE_LIB/maruf-ende.blobs")
        if [[ -n $blob ]]; then
          fetch_blob "$MARUF_URL/$corpus/$f" "$blob" "$got/$f" \
            "missing $dir/$f and no download: put Maruf et al.'s $f there (or set DATA to a folder holding $corpus/ with all six files); SMOKE=1 runs the recipe on the bundled dev and test files"
        else
          need_file "$dir/$f" "the training side of Maruf et al.'s $corpus corpus is not in their repository; their data/readme.txt ($MARUF_README) links it: put concatenated_en2de_train_{en,de}.txt in $dir, or set DATA to a folder holding $corpus/ with all six files; SMOKE=1 runs the recipe on the bundled dev and test files"
        fi
      done
    fi
    MARUF_FILES=(--trainpref "$trainpref"
      --validpref "$(_maruf 'concatenated_en2de_dev_{lang}.txt')"
      --testpref "$(_maruf 'concatenated_en2de_test_{lang}.txt')")
    REF_TEST=$(_maruf concatenated_en2de_test_de.txt)
    DATA_MODE="Maruf et al. (2019)'s $corpus split: train, dev (validation, checkpoint selection), test"
  fi
}

maruf_ende_data() {  # CORPUS_NAME (IWSLT2017 | NC-2016 | Europarl7): sets BIN, REF_TEST; step "prepare"
  setting SPM_VOCAB 30000 300
  setting MAX_LEN 250
  setting MAX_LEN_RATIO 3
  maruf_ende_files "$1"
  local prep=(-s en -t de --input-format marker --joined-dictionary --workers "$(nproc)"
    --spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO"
    "${MARUF_FILES[@]}")
  BIN=$WORK/data-bin
  step prepare -o "$BIN/docctx.json" -- docctx-prepare "${prep[@]}" --destdir "$BIN"
  if [[ ${DIVIDE_AND_RULE:-none} != none ]]; then
    # divide and rule (Lupo et al. 2022): the training pairs cut in two, with the SentencePiece
    # model and the dictionary of BIN (the models move from one to the other); validation as is
    local files=() k
    for (( k = 0; k < ${#MARUF_FILES[@]}; k += 2 )); do
      [[ ${MARUF_FILES[k]} == --testpref ]] || files+=("${MARUF_FILES[k]}" "${MARUF_FILES[k + 1]}")
    done
    BIN_SPLIT=$WORK/data-bin-split-$DIVIDE_AND_RULE
    step prepare-split -d prepare -o "$BIN_SPLIT/docctx.json" -- docctx-prepare -s en -t de --input-format marker \
      --joined-dictionary --workers "$(nproc)" --spm-model "$BIN/spm.model" --srcdict "$BIN/dict.en.txt" \
      --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" "${files[@]}" \
      --split-sentences "$DIVIDE_AND_RULE" --split-min-len "$DR_MIN_LEN" --destdir "$BIN_SPLIT"
  fi
}

meteor15_setup() {  # METEOR 1.5 (METRICS meteor-1.5*): a Java runtime (Debian's) and pycocoevalcap's jar
  local py
  py=$(dirname "$(command -v docctx-score)")/python
  if ! command -v java >/dev/null; then
    say "METEOR 1.5: installing a Java runtime (apt-get install -y default-jre-headless)"
    local sudo=(); [[ $(id -u) == 0 ]] || sudo=(sudo)
    { "${sudo[@]}" apt-get update -qq && "${sudo[@]}" apt-get install -y -qq default-jre-headless; } ||
      die "METEOR 1.5 needs Java: install a Java runtime (apt-get install default-jre-headless), or leave meteor-1.5* out of METRICS"
  fi
  if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("pycocoevalcap") is None)'; then
    say "METEOR 1.5: installing pycocoevalcap==1.2 (meteor-1.5.jar; a 104 MB wheel)"
    "$py" -m pip install -q pycocoevalcap==1.2 pycocotools==2.0.11 ||
      die "METEOR 1.5 needs pycocoevalcap==1.2 (make meteor), or leave meteor-1.5* out of METRICS"
  fi
}

maruf_ende_recipe() {  # RECIPE CORPUS TITLE MODELS SMOKE_TRAIN_DOCS SMOKE_VALID_DOCS SMOKE_TEST_DOCS QCN_MAX_TOKENS
  recipe_init "$1"
  setting MODELS "$4"
  # meteor: nltk's; meteor-1.5-exact-stem: METEOR 1.5 without German paraphrases (Java, pycocoevalcap:
  # meteor15_setup), in full runs; neither is comparable with the paper's Meteor (paper-scores.tsv);
  # bleu and d-bleu: Bao et al. (2021)'s s-BLEU and d-BLEU (sacreBLEU on detokenized text; d-BLEU
  # over whole documents)
  setting METRICS bleu,d-bleu,bleu_tok,meteor,meteor-1.5-exact-stem bleu,d-bleu,bleu_tok,meteor
  setting BLEU_PRETOKENIZE moses   # Maruf et al.'s files are detokenized: Moses-tokenize, as the papers
  setting SMOKE_TRAIN_DOCS "$5"
  setting SMOKE_VALID_DOCS "$6"
  setting SMOKE_TEST_DOCS "$7"
  setting QCN_MAX_TOKENS "$8" 1000   # Yang et al. 2019, §4.1: batches of 1500 tokens on TED, 900 on News and Europarl
  # divide and rule (Lupo et al. 2022): the HAN models pre-trained on the training pairs split in two
  setting DIVIDE_AND_RULE none
  [[ $DIVIDE_AND_RULE == none || $DIVIDE_AND_RULE == middle || $DIVIDE_AND_RULE == aligned ]] ||
    die "DIVIDE_AND_RULE=$DIVIDE_AND_RULE: none, middle or aligned"
  if [[ $DIVIDE_AND_RULE != none ]]; then
    [[ ,$MODELS, == *,han* ]] || die "DIVIDE_AND_RULE=$DIVIDE_AND_RULE pre-trains the context weights of the HAN models (the multi-encoder model of Lupo et al. 2022), and MODELS ($MODELS) has none"
    [[ ,$MODELS, == *,transformer,* ]] || die "DIVIDE_AND_RULE=$DIVIDE_AND_RULE starts the HAN models from the sentence transformer (K0): put transformer in MODELS"
    setting DR_MIN_LEN 7
    setting DR_FINETUNE_LR 2e-4
  fi
  model_settings
  recipe_settings
  SRC=en TGT=de
  PAPER_SCORES=$REPO/examples/$1/paper-scores.tsv
  [[ ,$METRICS, == *,meteor-1.5* ]] && meteor15_setup
  maruf_ende_data "$2"
  run_models ${MODELS//,/ }
  write_results "$3" ${MODELS//,/ }
}
