# Steps with heartbeats, then a slow exit, as destroying a process group on a busy machine is:
#   slow_teardown.py STEPS TEARDOWN_S announce   announces STEPS as its total; every rank then
#                                                  takes TEARDOWN_S to exit
#   slow_teardown.py STEPS TEARDOWN_S peer       announces nothing; rank 0 exits at once, the
#                                                  others take TEARDOWN_S
import os
import sys
import time

import dtrun

steps, teardown, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rank = int(os.environ["RANK"])
if mode == "announce":
    dtrun.total_steps(steps)
for step in range(steps):
    dtrun.heartbeat(step, samples=(step + 1) * 8)
    time.sleep(0.02)
print(f"LAST STEP {rank}", flush=True)
if mode == "announce" or rank != 0:
    time.sleep(teardown)  # stands for a slow teardown: no heartbeats from here on
print(f"EXITED {rank}", flush=True)
