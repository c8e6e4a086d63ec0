"""Waits on the workers' store for a key the test sets, after the test has attacked the store."""
import datetime
import os

import torch.distributed as dist

store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                      timeout=datetime.timedelta(seconds=60))
print(f"PORT={os.environ['MASTER_PORT']};", flush=True)
store.wait(["go"])
print("STORE_SURVIVED", flush=True)
