"""Runs out of memory the way training does: rank 1 (WHO=worker), or a child it forks as a
DataLoader worker would be (WHO=child), writes 16 MiB at a time until the kernel's out-of-memory
killer ends it. The other ranks wait for dtrun to stop them. Attempts from ATTEMPTS on exit 0.
argv: WHO ATTEMPTS. Needs no torch."""
import os
import signal
import sys
import time

who, attempts = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])


def grow_until_killed():
    held = []
    while True:
        held.append(b"x" * (16 << 20))  # written, so resident and charged to the cgroup


if int(os.environ["TORCHELASTIC_RESTART_COUNT"]) >= attempts:
    sys.exit(0)
if rank != 1:
    time.sleep(120)  # dtrun stops this rank once rank 1 has died
    sys.exit(3)
if who == "worker":
    grow_until_killed()
pid = os.fork()
if pid == 0:
    grow_until_killed()
_, status = os.waitpid(pid, 0)
raise RuntimeError("DataLoader worker (pid %d) is killed by signal: %s" % (pid, signal.strsignal(os.WTERMSIG(status))))
