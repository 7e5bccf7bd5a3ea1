#!/usr/bin/env bash
# Maruf et al. (2019)'s three En-De corpora now have one recipe each (docs/recipes.md):
#
#   DATASET=IWSLT2017 -> examples/ted-ende/run.sh       (transformer, concat, qcn, han, mht, doc2doc, g-transformer, g-transformer-fnd)
#   DATASET=NC-2016   -> examples/nc-ende/run.sh        (transformer, concat, qcn, doc2doc, g-transformer, g-transformer-fnd)
#   DATASET=Europarl7 -> examples/europarl-ende/run.sh  (transformer, qcn, mht, doc2doc, g-transformer, g-transformer-fnd)
#
# This script runs the one DATASET names [IWSLT2017] with every other setting passed on (see
# the recipe's header; MODELS=transformer,concat trains only the two baselines).
set -euo pipefail
DATASET=${DATASET:-IWSLT2017}
case $DATASET in
  IWSLT2017) recipe=ted-ende ;;
  NC-2016) recipe=nc-ende ;;
  Europarl7) recipe=europarl-ende ;;
  *) echo "maruf-ende: DATASET must be IWSLT2017, NC-2016 or Europarl7 (got '$DATASET')" >&2; exit 2 ;;
esac
echo "maruf-ende: running examples/$recipe/run.sh (docs/recipes.md)"
exec bash "$(dirname "$0")/$recipe/run.sh"
