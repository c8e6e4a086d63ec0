"""Rank 1 raises once the process group is up; rank 0 waits in an all_reduce, which then fails.
Under PyTorch 2, c10d's excepthook prefixes each line of the tracebacks with "[rankN]: ". The
store is made by hand: Debian trixie's torch 2.6 has no libuv, which its agent-store path asks
for (as store_ops_2x.py)."""
import datetime
import os

import torch
import torch.distributed as dist

store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                      timeout=datetime.timedelta(seconds=60), use_libuv=False)
dist.init_process_group("gloo", store=dist.PrefixStore("/raise_after_init", store), rank=int(os.environ["RANK"]),
                        world_size=int(os.environ["WORLD_SIZE"]))
if dist.get_rank() == 1:
    raise ValueError("bad batch 7")
dist.all_reduce(torch.ones(1))
