# A gloo job that reports progress with the dtrun module. On the first attempt (or on every one,
# with ALWAYS_HANG=1) local rank HANG_RANK blocks forever inside step HANG_STEP, before its
# all_reduce, so the other ranks wait in the collective. With CHECKPOINT_SECONDS, every rank
# spends that long in a 'checkpoint' section after step 2 (a long section that is not a hang).
import os
import threading
import time

import torch
import torch.distributed as dist

import dtrun

STEPS = int(os.environ.get("STEPS", "8"))
HANG_RANK = int(os.environ.get("HANG_RANK", "-1"))
HANG_STEP = int(os.environ.get("HANG_STEP", "3"))
ALWAYS = os.environ.get("ALWAYS_HANG") == "1"
CHECKPOINT_SECONDS = float(os.environ.get("CHECKPOINT_SECONDS", "0"))


def block_forever():
    threading.Event().wait()


dist.init_process_group("gloo")
rank = dist.get_rank()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
t = torch.ones(1)
dtrun.total_steps(STEPS)
for step in range(STEPS):
    with dtrun.section("step"):
        if rank == HANG_RANK and step == HANG_STEP and (ALWAYS or attempt == 0):
            block_forever()
        dist.all_reduce(t)
    dtrun.heartbeat(step, samples=(step + 1) * 4)
    if step == 2 and CHECKPOINT_SECONDS > 0:
        with dtrun.section("checkpoint"):
            time.sleep(CHECKPOINT_SECONDS)
print("rank %d finished attempt %d" % (rank, attempt), flush=True)
