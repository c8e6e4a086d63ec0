# Reports its steps to the dtrun agent through the `dtrun` module, each step a short "step"
# section: argv[1] steps (0: until stopped), printing "LINE <step>" every argv[2] steps (0: never)
# and "STEPPING <rank>" once a few steps are in.
import os
import sys
import time

import dtrun

total = int(sys.argv[1]) if len(sys.argv) > 1 else 0
every = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rank = os.environ.get("RANK", "?")
if total:
    dtrun.total_steps(total)
step = 0
while not total or step < total:
    with dtrun.section("step"):
        time.sleep(0.02)
    dtrun.heartbeat(step, samples=(step + 1) * 8)
    if step == 3:
        print(f"STEPPING {rank}", flush=True)
    if every and step % every == 0:
        print(f"LINE {step}", flush=True)
    step += 1
print(f"DONE {rank}", flush=True)
