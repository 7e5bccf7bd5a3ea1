"""fairseq-train under torchrun (gloo), saving each rank's final parameters for comparison.

Usage: torchrun --nproc_per_node 2 tests/dist_train.py OUT_DIR DATA [fairseq-train args]
"""
import os
import sys

import torch
from fairseq import trainer as trainer_module
from fairseq_cli import train

trainers = []
_init = trainer_module.Trainer.__init__


def _record(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    trainers.append(self)


trainer_module.Trainer.__init__ = _record

out_dir = sys.argv[1]
sys.argv = ["fairseq-train"] + sys.argv[2:] + [
    "--distributed-world-size", os.environ["WORLD_SIZE"],
    "--distributed-rank", os.environ["RANK"],
    "--distributed-init-method", "env://", "--distributed-no-spawn",
    "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
]
train.cli_main()
state = {k: v.detach().cpu() for k, v in trainers[0].model.state_dict().items()}
torch.save({"state": state, "num_updates": trainers[0].get_num_updates()},
           os.path.join(out_dir, f"rank{os.environ['RANK']}.pt"))
