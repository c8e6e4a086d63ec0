"""Real PyTorch workers that talk only through the workers' TCPStore at MASTER_ADDR:MASTER_PORT
(no Gloo mesh), so a job whose hosts open just one port to each other can run them."""
import datetime
import os

import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timeout=datetime.timedelta(seconds=30))
store.set(f"hello/{rank}", str(rank))
store.wait([f"hello/{r}" for r in range(world)])
print(f"STORE_OK rank={rank} master={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
