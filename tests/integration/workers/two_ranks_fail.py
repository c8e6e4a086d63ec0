"""Two ranks fail on their own, as torchrun's "Other failures" lists them: rank 0 raises first;
rank 1 ignores the launcher's stop signal and raises once it has arrived, so its error comes
second. The order is made, not timed: rank 0 raises only after rank 1 has blocked SIGTERM and said
so on the workers' store, and rank 1 waits for the signal itself. Both use @record, so each writes
its error file."""
import datetime
import os
import signal

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank = int(os.environ["RANK"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False,
                          timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        store.wait(["rank1_ready"])
        raise ValueError("rank 0 broke first")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    store.set("rank1_ready", "1")
    if signal.sigtimedwait({signal.SIGTERM}, 60) is None:
        raise TimeoutError("no stop signal from the launcher within 60 s")
    raise RuntimeError("rank 1 broke too")


main()
