"""A torch.distributed.launch-era script, unchanged: it takes --local_rank from the launcher
    python -m torch.distributed.launch --nproc_per_node=2 train.py
and runs under dtrun with --append-local-rank --local-rank-flag=--local_rank."""
import argparse

import torch.distributed as dist

import toy_training

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
p.add_argument("--epochs", default=3, type=int)
args = p.parse_args()
dist.init_process_group(backend="gloo", init_method="env://")
print(f"local_rank argument {args.local_rank}", flush=True)
toy_training.train(epochs=args.epochs)
dist.destroy_process_group()
