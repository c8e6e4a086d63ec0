"""Rank 1 ends as a script without torchelastic's @record does: MODE raise, an uncaught exception
chained to another; MODE rich, the same drawn by rich's traceback handler; MODE segfault, a segmentation fault in native code (faulthandler, which dtrun
turns on, reports it). Rank 0 waits for dtrun to stop it. Needs no torch. argv: MODE."""
import ctypes
import os
import sys
import time


def load_batch(i):
    try:
        return {}[i]
    except KeyError as e:
        raise ValueError("bad batch %d" % i) from e


if os.environ["RANK"] != "1":
    time.sleep(120)  # dtrun stops this rank once rank 1 has failed
    sys.exit(3)
print("step 1 done", file=sys.stderr, flush=True)
if sys.argv[1] == "segfault":
    ctypes.string_at(0)
if sys.argv[1] == "rich":
    import rich.traceback
    rich.traceback.install()
load_batch(7)
