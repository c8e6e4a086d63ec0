#!/usr/bin/env python3
"""The latency of one small all-reduce over Gloo, by its length (docs/DESIGN.md, "Replica checks").

Why the step's vote (worker/step_votes.h) is two doubles: Gloo's ring takes a round per chunk, so
on ranks that share cores a small all-reduce costs more the more elements it has, up to one per
rank. WORLD processes on this machine (torch.multiprocessing, 127.0.0.1), each all-reducing a
float64 tensor of each LENGTH ITERS times with MAX, in ROUNDS interleaved rounds; prints the
milliseconds per all-reduce of rank 0, one column per round.

  /usr/bin/python3 bench/allreduce_latency.py [--world 8] [--lengths 1,2,4,8,16] [--iters 200] [--rounds 3]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    lengths = [int(n) for n in args.lengths.split(",")]
    ms = {n: [] for n in lengths}
    for _ in range(args.rounds):
        for n in lengths:
            t = torch.zeros(n, dtype=torch.float64)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
            ms[n].append(1e3 * (time.perf_counter() - start) / args.iters)
    if rank == 0:
        print(f"{args.world} ranks, {os.cpu_count()} CPUs, {args.iters} all-reduces (MAX) each")
        for n in lengths:
            print(f"{n:4d} doubles: " + "  ".join(f"{x:6.2f} ms" for x in ms[n]))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--lengths", default="1,2,4,8,16")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=29533)
    args = ap.parse_args()
    mp.spawn(run, args=(args,), nprocs=args.world)


if __name__ == "__main__":
    main()
