"""A plain PyTorch DDP loop (gloo, CPU) with dtrun.watch_ddp: one rank sleeps in every step
before its backward, as a throttled GPU or a noisy neighbour would make it.

    ddp_straggler.py --steps N --slow-rank R --slow-ms MS
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import dtrun

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=0)
parser.add_argument("--no-watch", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)))
if not args.no_watch:
    model = dtrun.watch_ddp(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
for step in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    if rank == args.slow_rank:
        time.sleep(args.slow_ms / 1000)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    dtrun.heartbeat(step + 1)
print("DONE rank=%d loss=%.4f" % (rank, loss.item()), flush=True)
dist.destroy_process_group()
# PyTorch 1.13 aborts now and then at interpreter teardown when a DDP model has a Python comm hook
# ("terminate called without an active exception"; 1 run in 10 with its own
# default_hooks.allreduce_hook too): nothing is left to do, so leave without the teardown.
os._exit(0)
