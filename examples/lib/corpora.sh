# Corpus converters of the recipes that read released corpora in their own layout (sourced
# after recipe.sh; documented in docs/recipes.md). Each writes files docctx-prepare reads; a bad
# input line is an error naming the file and line; each returns 1 on failure (for `step`).
#
#   opus_docs IDS SRC_FILE TGT_FILE OUT TRAIN_CAP DEV_LIST TEST_LIST   OPUS Moses files -> docids format
#   pick_episodes IDS OUT N_DEV N_TEST MIN MAX SEED                    random whole documents
#   voita_docs SRC DST OUT_PREFIX [MAX_LINES]                          Voita et al. (2019)'s groups -> documents
#   wmt_es_en_sets DIR OUT HOWTO                                       WMT news test sets 2008-2013 -> OUT/newstestYYYY.{es,en}.sgm

opus_docs() {  # IDS SRC_FILE TGT_FILE OUT TRAIN_CAP DEV_LIST TEST_LIST: an OPUS Moses corpus ->
  # OUT/{train,dev,test}.{SRC_EXT,TGT_EXT,docids} (the extensions of SRC_FILE and TGT_FILE)
  # (docctx-prepare's docids format): the first column of the .ids file names each line's
  # document; whole documents go to dev (DEV_LIST), test (TEST_LIST) or train, train stopping
  # at the first document boundary after TRAIN_CAP pairs (0: all); pairs with an empty side
  # are dropped and counted in the log
  local ids=$1 sf=$2 tf=$3 out=$4 cap=$5 devl=$6 testl=$7 sx=${2##*.} tx=${3##*.}
  local a b c
  a=$(wc -l < "$ids") b=$(wc -l < "$sf") c=$(wc -l < "$tf")
  [[ $a == "$b" && $b == "$c" ]] || { echo "$ids, $sf, $tf: line counts differ ($a/$b/$c)" >&2; return 1; }
  mkdir -p "$out"
  paste -d '\t' <(cut -f1 "$ids") <(tr '\t' ' ' < "$sf") <(tr '\t' ' ' < "$tf") | awk -F '\t' \
    -v out="$out" -v sx="$sx" -v tx="$tx" -v cap="$cap" -v devl="$devl" -v testl="$testl" -v ids="$ids" '
    BEGIN {
      while ((getline d < devl) > 0) split_of[d] = "dev"
      while ((getline d < testl) > 0) split_of[d] = "test"
    }
    NF != 3 { printf "%s, line %d: expected a document, a source and a target field (as many lines in the three files)\n", ids, NR > "/dev/stderr"; exit 2 }
    {
      s = ($1 in split_of) ? split_of[$1] : "train"
      if (s == "train" && $1 != cur) { cur = $1; if (cap > 0 && n["train"] >= cap) full = 1 }
      if (s == "train" && full) { skipped++; next }
      if ($2 ~ /^[ \t]*$/ || $3 ~ /^[ \t]*$/) { empty[s]++; next }
      print $1 > (out "/" s ".docids"); print $2 > (out "/" s "." sx); print $3 > (out "/" s "." tx); n[s]++
    }
    END {
      for (s in n) printf "%s: %d sentence pairs (%d dropped: an empty side)\n", s, n[s], empty[s] + 0
      printf "past the training cap of %d pairs: %d pairs not used\n", cap, skipped + 0
    }' || return 1
  local s
  for s in train $([[ -s $devl ]] && echo dev) $([[ -s $testl ]] && echo test); do
    [[ -s $out/$s.$sx ]] || { echo "$ids: no $s sentence pairs" >&2; return 1; }
  done
}

pick_episodes() {  # IDS OUT_DIR N_DEV N_TEST MIN MAX SEED: N_DEV + N_TEST random documents of
  # MIN..MAX lines (drawn with SEED) -> OUT/dev.list, OUT/test.list (one document id a line)
  local ids=$1 out=$2 ndev=$3 ntest=$4 lo=$5 hi=$6 seed=$7 n=$(( $3 + $4 ))
  mkdir -p "$out"
  cut -f1 "$ids" | uniq -c | awk -v lo="$lo" -v hi="$hi" '$1 >= lo && $1 <= hi { print $2 }' \
    | shuf -n "$n" --random-source=<(yes "$seed") > "$out/episodes.list" || return 1
  (( $(wc -l < "$out/episodes.list") == n )) || { echo "$ids: fewer than $n documents of $lo-$hi lines" >&2; return 1; }
  head -n "$ndev" "$out/episodes.list" > "$out/dev.list"
  tail -n +"$(( ndev + 1 ))" "$out/episodes.list" > "$out/test.list"
}

voita_docs() {  # SRC DST OUT_PREFIX [MAX_LINES]: Voita et al. (2019)'s groups (each line
  # consecutive sentences joined by " _eos ", the last the current sentence, the others its
  # context) -> documents in the marker format (OUT_PREFIX.{en,ru}) and OUT_PREFIX.current (a
  # line per sentence: 1 for the current sentence of a group, 0 for context only). A line
  # whose sentences but the last are the last ones of the line before continues its document
  # with its current sentence (a file of overlapping groups in document order holds each
  # sentence once); any other line starts a document of its sentences (empty leading context:
  # the start of the original document). MAX_LINES > 0: the first MAX_LINES lines only.
  paste -d '\t' <(tr '\t' ' ' < "$1") <(tr '\t' ' ' < "$2") | awk -F '\t' -v out="$3" -v f="$1" -v max="${4:-0}" '
    function parts(text, arr,   n, i) {
      n = split(" " text " ", arr, / _eos /)
      for (i = 1; i <= n; i++) { gsub(/^[ ]+|[ ]+$/, "", arr[i]) }
      return n
    }
    max > 0 && NR > max { NR--; exit }
    {
      n = parts($1, s); m = parts($2, t)
      if (n != m) { printf "%s, line %d: %d source but %d target sentences (joined by _eos)\n", f, NR, n, m > "/dev/stderr"; err = 1; exit 2 }
      first = 1
      while (first < n && s[first] == "" && t[first] == "") first++   # empty context: document start
      for (i = first; i <= n; i++) if (s[i] == "" || t[i] == "") {
        printf "%s, line %d: sentence %d is empty on one side\n", f, NR, i > "/dev/stderr"; err = 1; exit 2 }
      cont = (NR > 1 && n >= 2 && n - 1 <= pn && first == 1)
      for (i = 1; cont && i < n; i++) if (s[i] != ps[pn - n + 1 + i] || t[i] != pt[pn - n + 1 + i]) cont = 0
      if (cont) { print s[n] > (out ".en"); print t[n] > (out ".ru"); print 1 > (out ".current"); continued++ }
      else {
        print "<d>" > (out ".en"); print "<d>" > (out ".ru"); docs++
        for (i = first; i <= n; i++) { print s[i] > (out ".en"); print t[i] > (out ".ru"); print (i == n) > (out ".current") }
      }
      pn = n; for (i = 1; i <= n; i++) { ps[i] = s[i]; pt[i] = t[i] }
    }
    END {
      if (err) exit 2
      if (docs == 0) { printf "%s: no lines\n", f > "/dev/stderr"; err = 1; exit 2 }
      printf "%s: %d lines -> %d documents (%d lines continued the line before)\n", f, NR, docs, continued
    }'
}

wmt_es_en_sets() {  # DIR OUT HOWTO: WMT's Es-En news test sets 2008-2013 as WMT distributes
  # them (dev.tgz): the 2008 set is news-test2008-{src,ref}.{es,en}.sgm (hyphenated), the
  # others newstestYYYY-{src,ref}.{es,en}.sgm; links OUT/newstestYYYY.{es,en}.sgm (Spanish
  # source, English reference: one {lang} pattern for docctx-prepare); a missing file is an
  # error naming it (HOWTO: where to get it)
  local dir=$1 out=$2 howto=$3 y name
  mkdir -p "$out"
  dir=$(cd "$dir" 2>/dev/null && pwd) || die "missing folder $1: $howto"
  for y in 2008 2009 2010 2011 2012 2013; do
    name=newstest$y
    [[ $y == 2008 ]] && name=news-test2008
    need_file "$dir/$name-src.es.sgm" "$howto"
    need_file "$dir/$name-ref.en.sgm" "$howto"
    ln -sf "$dir/$name-src.es.sgm" "$out/newstest$y.es.sgm"
    ln -sf "$dir/$name-ref.en.sgm" "$out/newstest$y.en.sgm"
  done
}
