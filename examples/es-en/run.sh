#!/usr/bin/env bash
# Recipe: the Spanish-English settings of the HAN paper (Miculicich et al. 2018, §3.1, Tables 1
# and 2): TED talks (IWSLT 2014: dev2010 for development, tst2010-2012 for testing), an
# OpenSubtitles2018 subset (two random episodes each for development and testing) and News
# Commentary v11 (WMT newstest2008 for development, newstest2009-2013 for testing). For each
# corpus: trains the sentence baseline and the HAN configurations (two-stage: each starts from
# the baseline, §3.2), translates the test set (in document order where a model reads its own
# previous translations), scores it and writes WORK/CORPUS/results.md with each score beside
# the paper's; WORK/results.md joins the three. README.md beside this script.
#
#   DATA=/path/to/es-en bash examples/es-en/run.sh   # the paper's settings
#   SMOKE=1 bash examples/es-en/run.sh               # generated toy files in the same layout
#
# Data (none of it is bundled, and no file is downloaded: the TED release is handed out through
# a form, and the OPUS and WMT archives' sha256 could not be pinned when this recipe was
# written, so you download them yourself; README.md lists the addresses). DATA holds:
#   ted/        the IWSLT 2014 Es-En release (texts/es/en/es-en.tgz of https://wit3.fbk.eu/2014-01,
#               unpacked): train.tags.es-en.{es,en}, IWSLT14.TED.{dev2010,tst2010,tst2011,
#               tst2012}.es-en.{es,en}.xml
#   subtitles/  OpenSubtitles v2018 Es-En of OPUS in Moses format (en-es.txt.zip, unpacked):
#               OpenSubtitles.en-es.{es,en} and OpenSubtitles.en-es.ids (its first column, the
#               subtitle file of each line, is the document)
#   news/       News Commentary v11 Es-En of OPUS in Moses format: News-Commentary.en-es.{es,en,ids};
#               and the WMT sets of 2008-2013 (dev.tgz of https://www.statmt.org/wmt14/, as
#               named there): news-test2008-{src.es,ref.en}.sgm (hyphenated) and
#               newstestYYYY-src.es.sgm, newstestYYYY-ref.en.sgm for 2009-2013
# SMOKE=1 without DATA writes toy files in this layout (examples/lib/smoke_data.py) to WORK/smoke-raw.
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   CORPORA [ted,subtitles,news]
#   MODELS [transformer,han-encoder,han-decoder,han-decoder-source,han-decoder-alignment,han
#     / transformer,han]  METRICS [bleu,bleu_tok]
#   data: DATA [none / WORK/smoke-raw] SPM_VOCAB [30000: the paper's 30K vocabulary / 300]
#     MAX_LEN [250] MAX_LEN_RATIO [3] SUBS_TRAIN_PAIRS [4000000: the paper's 4.0M / 0: all]
#     SUBS_DEV_DOCS [2] SUBS_TEST_DOCS [2] SUBS_DOC_MIN [300 / 1] SUBS_DOC_MAX [700 / 1000000]
#     (the episodes drawn for development and testing have MIN..MAX sentence pairs; SEED draws them)
#   models (examples/lib/models.sh): LAYERS [6 / 1] DIM [512 / 32] FFN [2048 / 64] HEADS [8 / 2]
#     DROPOUT [0.1] LR [7e-4 / 3e-3] WARMUP [4000 / 5] MAX_TOKENS [4096 / 1000]
#     MAX_UPDATE [100000 / 8] PATIENCE [10] CONTEXT_SIZE [3: k = 3, §3.2] SEED [1] BEAM [4 / 2]
#     LENPEN [1.0] GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20]
#     BATCHES_PER_UPDATE [1] UPDATE_FREQ [auto: per-GPU batch and --update-freq that keep an
#     update at the papers' batch x BATCHES_PER_UPDATE on NGPUS GPUs; printed with the settings]
#     AVERAGE [0: none of the papers averages / N: the mean of the last N epoch checkpoints]
#     HAN_JOINT_FROM [encoder: han from the trained han-encoder / sentence] HAN_STAGE2_EPOCHS [1: as
#     the HAN authors' released commands / 0: until MAX_UPDATE or PATIENCE]
#     BLEU_TOK_LOWERCASE [1: Miculicich et al. (2018) score lowercased text]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/es-en,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
source "$RECIPE_LIB/corpora.sh"
recipe_init es-en
setting CORPORA ted,subtitles,news
setting MODELS transformer,han-encoder,han-decoder,han-decoder-source,han-decoder-alignment,han transformer,han
setting METRICS bleu,bleu_tok
setting DATA "" ""
setting SPM_VOCAB 30000 300
setting MAX_LEN 250
setting MAX_LEN_RATIO 3
setting SUBS_TRAIN_PAIRS 4000000 0
setting SUBS_DEV_DOCS 2
setting SUBS_TEST_DOCS 2
setting SUBS_DOC_MIN 300 1
setting SUBS_DOC_MAX 700 1000000
setting BLEU_TOK_LOWERCASE 1  # Miculicich et al. (2018) score lowercased text (their released outputs and references)
model_settings
recipe_settings
SRC=es TGT=en
ROOT=$WORK

if [[ -z $DATA ]]; then
  [[ $SMOKE == 1 ]] || die "set DATA to your Es-En folder (ted/, subtitles/, news/: see examples/es-en/README.md); SMOKE=1 alone runs on generated toy files"
  DATA=$ROOT/smoke-raw
  step smoke-data -o "$DATA/news/newstest2013-ref.en.sgm" -- python "$RECIPE_LIB/smoke_data.py" es-en "$DATA"
fi

HOWTO_TED="download the IWSLT 2014 Es-En TED data (texts/es/en/es-en.tgz) from https://wit3.fbk.eu/2014-01 (a form; CC BY-NC-ND), unpack it into DATA/ted (see examples/es-en/README.md)"
HOWTO_SUBS="download OpenSubtitles v2018 en-es in Moses format from OPUS (https://opus.nlpl.eu/OpenSubtitles-v2018.php: en-es.txt.zip, with the .ids file) and unpack it into DATA/subtitles"
HOWTO_NC="download News Commentary v11 en-es in Moses format from OPUS (https://opus.nlpl.eu/News-Commentary-v11.php: en-es.txt.zip, with the .ids file) and unpack it into DATA/news"
HOWTO_WMT="download the WMT development sets (https://www.statmt.org/wmt14/dev.tgz) and put news-test2008-src.es.sgm, news-test2008-ref.en.sgm and newstest2009-2013 -src.es.sgm and -ref.en.sgm (dev/ of the archive) into DATA/news"



corpus_ted() {
  local d=$DATA/ted t lang tests=()
  TITLE="TED Es-En (IWSLT 2014; dev2010, test tst2010-2012)"
  for lang in es en; do need_file "$d/train.tags.es-en.$lang" "$HOWTO_TED"; done
  for t in dev2010 tst2010 tst2011 tst2012; do
    for lang in es en; do need_file "$d/IWSLT14.TED.$t.es-en.$lang.xml" "$HOWTO_TED"; done
  done
  for t in tst2010 tst2011 tst2012; do tests+=("$d/IWSLT14.TED.$t.es-en.{lang}.xml"); done
  REF_TEST=$WORK/test-ref.en.xml
  for t in tst2010 tst2011 tst2012; do cat "$d/IWSLT14.TED.$t.es-en.en.xml"; done > "$REF_TEST"
  PREP=(--trainpref "$d/train.tags.es-en.{lang}" --validpref "$d/IWSLT14.TED.dev2010.es-en.{lang}.xml"
    --testpref "$(IFS=,; echo "${tests[*]}")")
}

corpus_subtitles() {
  local d=$DATA/subtitles lang
  TITLE="OpenSubtitles2018 Es-En (two random episodes for development, two for testing)"
  for lang in es en ids; do need_file "$d/OpenSubtitles.en-es.$lang" "$HOWTO_SUBS"; done
  local split=$WORK/split
  step episodes -o "$split/test.list" -- pick_episodes "$d/OpenSubtitles.en-es.ids" "$split" "$SUBS_DEV_DOCS" \
    "$SUBS_TEST_DOCS" "$SUBS_DOC_MIN" "$SUBS_DOC_MAX" "$SEED"
  step split -d episodes -o "$split/test.en" -- opus_docs "$d/OpenSubtitles.en-es.ids" "$d/OpenSubtitles.en-es.es" \
    "$d/OpenSubtitles.en-es.en" "$split" "$SUBS_TRAIN_PAIRS" "$split/dev.list" "$split/test.list"
  PREP_DEPS=(-d split)
  REF_TEST=$split/test.en
  PREP=(--trainpref "$split/train" --validpref "$split/dev" --testpref "$split/test")
}

corpus_news() {
  local d=$DATA/news lang y tests=()
  TITLE="News Commentary v11 Es-En (newstest2008 for development, newstest2009-2013 for testing)"
  for lang in es en ids; do need_file "$d/News-Commentary.en-es.$lang" "$HOWTO_NC"; done
  # the sgm files under one {lang} pattern (links into WORK/wmt)
  wmt_es_en_sets "$d" "$WORK/wmt" "$HOWTO_WMT"
  local split=$WORK/split
  : > "$WORK/none.list"
  step split -o "$split/train.en" -- opus_docs "$d/News-Commentary.en-es.ids" "$d/News-Commentary.en-es.es" \
    "$d/News-Commentary.en-es.en" "$split" 0 "$WORK/none.list" "$WORK/none.list"
  PREP_DEPS=(-d split)
  for y in 2009 2010 2011 2012 2013; do tests+=("$WORK/wmt/newstest$y.{lang}.sgm"); done
  REF_TEST=$WORK/test-ref.en.sgm
  for y in 2009 2010 2011 2012 2013; do cat "$WORK/wmt/newstest$y.en.sgm"; done > "$REF_TEST"
  PREP=(--trainpref "$split/train" --validpref "$WORK/wmt/newstest2008.{lang}.sgm" --testpref "$(IFS=,; echo "${tests[*]}")")
}

results=()
for corpus in ${CORPORA//,/ }; do
  [[ $corpus =~ ^(ted|subtitles|news)$ ]] || die "CORPORA: no corpus '$corpus' (ted, subtitles, news)"
  # each corpus in its own folder: its steps, data, models and results
  WORK=$ROOT/$corpus STAMPS=$ROOT/$corpus/stamps LOGS=$ROOT/$corpus/logs
  CKPT=$WORK/checkpoints GEN=$WORK/generate SCORES=$WORK/scores BIN=$WORK/data-bin
  mkdir -p "$STAMPS" "$LOGS" "$SCORES"
  PREP_DEPS=()
  "corpus_$corpus"
  PAPER_SCORES=$HERE/paper-scores-$corpus.tsv
  DATA_MODE=$TITLE
  step prepare "${PREP_DEPS[@]}" -o "$BIN/docctx.json" -- docctx-prepare -s es -t en --joined-dictionary \
    --workers "$(nproc)" "${PREP[@]}" --spm-vocab-size "$SPM_VOCAB" --spm-model-type bpe \
    --max-len "$MAX_LEN" --max-len-ratio "$MAX_LEN_RATIO" --destdir "$BIN"
  run_models ${MODELS//,/ }
  write_results "$TITLE" ${MODELS//,/ }
  results+=("$WORK/results.md")
done
WORK=$ROOT
for r in "${results[@]}"; do cat "$r"; echo; done > "$ROOT/results.md"
say "results of every corpus: $ROOT/results.md"
