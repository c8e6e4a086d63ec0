"""BEFORE: the torch.multiprocessing.spawn pattern of the DDP tutorials, started on every node as
    MASTER_ADDR=10.0.0.1 MASTER_PORT=8888 python train.py -n 2 -g 4 -nr 0   (and -nr 1 on the other)
(here with gloo on CPU: -g is the number of processes)."""
import argparse
import os

import torch.distributed as dist
import torch.multiprocessing as mp

import toy_training


def worker(gpu, args):
    rank = args.nr * args.gpus + gpu
    dist.init_process_group(backend="gloo", init_method="env://", world_size=args.world_size, rank=rank)
    toy_training.train(epochs=args.epochs)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", "--nodes", default=1, type=int)
    p.add_argument("-g", "--gpus", default=1, type=int, help="processes per node")
    p.add_argument("-nr", "--nr", default=0, type=int, help="rank of this node")
    p.add_argument("--epochs", default=3, type=int)
    args = p.parse_args()
    args.world_size = args.gpus * args.nodes
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")  # the tutorials hard-code these
    os.environ.setdefault("MASTER_PORT", "8888")
    mp.spawn(worker, nprocs=args.gpus, args=(args,))


if __name__ == "__main__":
    main()
