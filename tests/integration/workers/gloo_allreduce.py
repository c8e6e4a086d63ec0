"""Real PyTorch worker: env:// init (through dtrun's store), gloo all_reduce, barrier.

Prints 'ALLREDUCE_OK rank=R world=W sum=S' on success; exits 1 on a wrong sum."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
dist.barrier()
ok = abs(t.item() - expected) < 1e-6
print(f"ALLREDUCE_{'OK' if ok else 'BAD'} rank={rank} world={world} sum={t.item():g}", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
