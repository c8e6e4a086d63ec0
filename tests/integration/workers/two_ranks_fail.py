"""Two ranks fail on their own, as torchrun's "Other failures" lists them: rank 0 raises at once;
rank 1 ignores the launcher's stop signal and raises a moment later. Both use @record, so each
writes its error file."""
import os
import signal
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == 0:
        raise ValueError("rank 0 broke first")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(0.3)
    raise RuntimeError("rank 1 broke too")


main()
