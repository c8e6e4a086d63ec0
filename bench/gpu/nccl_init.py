#!/usr/bin/env python3
"""A Python worker for dtrun on GPUs: init_process_group("nccl") from the launcher's environment,
one all_reduce on the local rank's GPU, barrier. Prints "NCCL_OK rank=R world=W init_s=T"."""
import os
import time

import torch
import torch.distributed as dist

start = time.perf_counter()
local_rank = int(os.environ["LOCAL_RANK"])
device = torch.device("cuda", local_rank % torch.cuda.device_count())
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
t = torch.full((4,), float(dist.get_rank() + 1), device=device)
dist.all_reduce(t)
dist.barrier()
world = dist.get_world_size()
ok = t[0].item() == world * (world + 1) / 2
print(f"NCCL_{'OK' if ok else 'BAD'} rank={dist.get_rank()} world={world} init_s={time.perf_counter() - start:.3f}",
      flush=True)
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
