#!/usr/bin/env bash
# Distributed fairseq-train on CPU (gloo), one process per rank, launched by torchrun:
#   torchrun --nproc_per_node 2 --master_port 29511 --no-python \
#       examples/fairseq-train-gloo.sh DATA --user-dir fairseq_docctx --task document_translation --cpu ...
# torchrun sets WORLD_SIZE and RANK; fairseq's own launcher counts GPUs, so it is bypassed.
exec fairseq-train "$@" --distributed-world-size "$WORLD_SIZE" --distributed-rank "$RANK" \
  --distributed-init-method env:// --distributed-no-spawn --distributed-backend gloo \
  --ddp-backend legacy_ddp
