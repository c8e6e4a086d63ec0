"""Rank 0 dies without a word (SIGKILL: no error file, as the kernel's OOM killer leaves a rank);
rank 1, its peer, then fails on its own with @record, so its error file has the later time. The
order is made, not timed: rank 0 dies only after rank 1 has blocked SIGTERM and said so on the
workers' store, and rank 1 raises once the launcher's stop signal, sent when rank 0 was seen dead,
has arrived."""
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
        os.kill(os.getpid(), signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    store.set("rank1_ready", "1")
    if signal.sigtimedwait({signal.SIGTERM}, 60) is None:
        raise TimeoutError("no stop signal from the launcher within 60 s")
    raise RuntimeError("Connection closed by peer: rank 0 is gone")


main()
