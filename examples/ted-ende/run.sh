#!/usr/bin/env bash
# Recipe: TED En-De, Maruf et al. (2019)'s split of IWSLT17 (train: the IWSLT17 training talks;
# dev: dev2010 + tst2010-2015, 93 talks; test: tst2016-2017, 23 talks), the data of the QCN
# (Yang et al. 2019, Table 2) and MHT (Zhang et al. 2021, Table 1) papers. Trains the sentence
# baseline and every model those papers report here, translates the test talks, scores them
# and writes WORK/results.md with each score beside the paper's. README.md beside this script.
#
#   bash examples/ted-ende/run.sh               # the papers' setting (downloads the training side)
#   SMOKE=1 bash examples/ted-ende/run.sh       # the whole chain on a slice of the bundled files
#
# Settings (environment variables, defaults in brackets; [full / SMOKE] where they differ):
#   MODELS [transformer,concat,qcn,han,mht,
#     doc2doc,g-transformer,g-transformer-fnd (Sun et al. 2022; Bao et al. 2021: on segments);
#     also qcn-transformer, qcn-regularizer-only,
#     qcn-no-regularizer: Yang et al. 2019, Table 2]  METRICS [bleu,d-bleu,bleu_tok,meteor
#     (+ meteor-1.5-exact-stem in full runs)]
#   DIVIDE_AND_RULE [none | middle | aligned: the HAN models pre-trained on the training pairs
#     split in two, then fine-tuned on the talks (Lupo et al. 2022)] DR_MIN_LEN [7] DR_FINETUNE_LR [2e-4]
#   data: DATA [../shared/data/maruf-ende] SPM_VOCAB [30000 / 300] MAX_LEN [250]
#     MAX_LEN_RATIO [3] SMOKE_TRAIN_DOCS [6] SMOKE_VALID_DOCS [1] SMOKE_TEST_DOCS [2]
#   models (examples/lib/models.sh): LAYERS [6 / 1] DIM [512 / 32] FFN [2048 / 64] HEADS [8 / 2]
#     DROPOUT [0.1] LR [7e-4 / 3e-3] WARMUP [4000 / 5] MAX_TOKENS [4096 / 1000] QCN_LAYERS [4 / 1]
#     QCN_DROPOUT [0.2] QCN_AGNOSTIC_DROPOUT [0.1] QCN_LR [1e-4 / 3e-3] QCN_MAX_TOKENS [1500 / 1000] PCC_WEIGHT [1]
#     MAX_UPDATE [100000 / 8] PATIENCE [10] CONTEXT_SIZE [3] CONCAT_CONTEXT_SIZE [1] SEED [1]
#     BEAM [4 / 2] LENPEN [1.0] GEN_MAX_TOKENS [8000] GEN_MAX_LEN_A [1.2 / 0] GEN_MAX_LEN_B [10 / 20]
#     BATCHES_PER_UPDATE [1] UPDATE_FREQ [auto: per-GPU batch and --update-freq that keep an
#     update at the papers' batch x BATCHES_PER_UPDATE on NGPUS GPUs; printed with the settings]
#     SEG_TOKENS [512] GT_DROPOUT [0.3] GT_CTXLAYERS [2 / 1] GT_LR [5e-4 / 3e-3] GT_WARMUP [4000 / 5]
#     GT_MAX_TOKENS [4096 / 1000] GT_NOISE_MASK [0.3] GT_NOISE_EPOCHS [30] GT_FND_NOISE_MASK [0.1]
#     GT_FND_NOISE_EPOCHS [40] (doc2doc and G-Transformer: the G-Transformer authors' run settings)
#     AVERAGE [0: none of the papers averages / N: the mean of the last N epoch checkpoints]
#     HAN_JOINT_FROM [encoder: han from the trained han-encoder / sentence] HAN_STAGE2_EPOCHS [1: as
#     the HAN authors' released commands / 0: until MAX_UPDATE or PATIENCE]
#   common (examples/lib/recipe.sh): SMOKE [0] FRESH [0] WORK [demo-work/recipes/ted-ende,
#     -smoke with SMOKE=1] DOWNLOADS [WORK/downloads] DEVICE [auto] NGPUS [1] PRECISION [fp16 on
#     a GPU] GEN_PROCESSES [auto: NGPUS on GPUs, 1 on the CPU]
#     EXTRA_TRAIN_ARGS EXTRA_GEN_ARGS NUM_WORKERS [1: fairseq's]
# A finished step is skipped on a re-run with the same settings; FRESH=1 redoes every step.
set -euo pipefail
source "$(dirname "$0")/../lib/recipe.sh"
source "$RECIPE_LIB/models.sh"
source "$RECIPE_LIB/maruf-ende.sh"
maruf_ende_recipe ted-ende IWSLT2017 "TED En-De (IWSLT17, Maruf et al. 2019 split)" transformer,concat,qcn,han,mht,doc2doc,g-transformer,g-transformer-fnd 6 1 2 1500
