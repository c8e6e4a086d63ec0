"""AFTER: the same script converted for dtrun, as docs/MIGRATING.md says:
    dtrun --nnodes 2 --nproc-per-node 4 --node-rank 0 --master-addr 10.0.0.1 train.py
mp.spawn, the rank arithmetic and the hand-set MASTER_* go; each process is started by dtrun and
reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from its environment (init_method env://)."""
import argparse

import torch.distributed as dist

import toy_training


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", default=3, type=int)
    args = p.parse_args()
    dist.init_process_group(backend="gloo")
    toy_training.train(epochs=args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
