#!/usr/bin/env python3
"""A real script preempted and run again: pytorch/examples' DDP tutorial (multigpu_torchrun.py).

The tutorial runs on the CPU as in bench/tutorial_recovery.py, 4 workers, and keeps its own
snapshot file (torch.save every --save-every epochs, which its next run loads). At a random epoch
the launcher gets SIGTERM, as Slurm and Kubernetes send it before they take the node back; then
the same command runs again. Two modes:
  torchrun + torch.save            ../shared/tools/torchrun (--monitor_interval 0.1); the next run
                                   resumes from the tutorial's file
  dtrun --snapshot-dir             the tutorial with the lines docs/MIGRATING.md adds
                                   (dtrun.restore at start, dtrun.snapshot after each epoch), the
                                   file kept too; dtrun keeps the snapshots in a directory on its
                                   way out and the next run restores them
Reported: epochs lost (the newest epoch begun before the SIGTERM minus the epoch the next run
starts at), the first run's exit after the SIGTERM, and the next run's start -> its first epoch.

Usage: bench/preemption.py BUILD_DIR TUTORIAL_DIR [--trials 5] [--save-every 50]
  TUTORIAL_DIR holds multigpu_torchrun.py and datautils.py (distributed/ddp-tutorial-series).
"""
import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tutorial_recovery import TORCHRUN, on_cpu, with_dtrun_snapshots  # noqa: E402

EPOCH = re.compile(r"\[GPU\d\] Epoch (\d+) \|")
RESUMED = re.compile(r"Resuming training from \w+ at Epoch (\d+)")
EPOCHS = 100000  # more than a run reaches: every run ends by the bench's SIGTERM


def command(build, mode, tmp, save_every):
    args = ["train.py", str(EPOCHS), str(save_every)]
    if mode.startswith("torchrun"):
        return ["/usr/bin/python3", TORCHRUN, "--standalone", "--nproc_per_node", "4", "--monitor_interval", "0.1"] + args
    return [os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "4", "--snapshot-dir",
            os.path.join(tmp, "kept")] + args


def start(cmd, tmp):
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHON_EXEC="/usr/bin/python3", PYTHONUNBUFFERED="1",
                                     OMP_NUM_THREADS="1"))


def stop(p):
    """SIGTERM to the launcher; seconds until it exited."""
    sent = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.stdout.read()
    p.wait(timeout=120)
    return time.monotonic() - sent


def one_preemption(build, tutorial, mode, at_epoch, save_every):
    with tempfile.TemporaryDirectory() as tmp:
        src = on_cpu(open(os.path.join(tutorial, "multigpu_torchrun.py")).read())
        if mode.startswith("dtrun"):
            src = with_dtrun_snapshots(src)
        open(os.path.join(tmp, "train.py"), "w").write(src)
        shutil.copy(os.path.join(tutorial, "datautils.py"), tmp)
        cmd = command(build, mode, tmp, save_every)
        first = start(cmd, tmp)
        newest = -1
        for line in first.stdout:
            m = EPOCH.search(line)
            if m:
                newest = max(newest, int(m.group(1)))
                if newest >= at_epoch:
                    break
        exit_s = stop(first)
        began = time.monotonic()
        again = start(cmd, tmp)
        resumed_at = 0  # no "Resuming" line: the script started over
        for line in again.stdout:
            m = RESUMED.search(line)
            if m:
                resumed_at = int(m.group(1))
            if EPOCH.search(line):
                break
        first_epoch_s = time.monotonic() - began
        stop(again)
        return {"lost": newest - resumed_at, "exit_s": exit_s, "first_epoch_s": first_epoch_s}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("tutorial_dir")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--save-every", type=int, default=50)
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; 4 workers, SIGTERM at a random epoch in 60..140, "
          f"torch.save every {args.save_every} epochs")
    rng = random.Random(1)
    epochs = [rng.randint(60, 140) for _ in range(args.trials)]
    for mode in ["torchrun + torch.save", "dtrun --snapshot-dir"]:
        rows = [one_preemption(args.build_dir, args.tutorial_dir, mode, e, args.save_every) for e in epochs]
        r = {k: [row[k] for row in rows] for k in rows[0]}
        print(f"{mode}: epochs lost {r['lost']} (median {statistics.median(r['lost'])}); SIGTERM -> exit median "
              f"{statistics.median(r['exit_s']):.2f} s (max {max(r['exit_s']):.2f}); next run -> first epoch median "
              f"{statistics.median(r['first_epoch_s']):.2f} s")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
