#!/usr/bin/env python3
"""A real script's recovery: pytorch/examples' DDP tutorial (multigpu_torchrun.py), one rank killed.

The tutorial is taken as published and moved to the CPU (gloo, no device ids); the memory mode
then adds the few lines a user adds for dtrun.snapshot/restore (see docs/MIGRATING.md). Four
modes, 4 workers each, one rank SIGKILLed at a random epoch:
  dtrun + dtrun.snapshot + await_round
                               also parked after its imports (warm workers): a restart releases
                               processes that have already imported torch
  dtrun + dtrun.snapshot       state kept in the agent's memory after every epoch
  dtrun + torch.save           the tutorial's own snapshot file, every --save-every epochs
  torchrun + torch.save        the same under ../shared/tools/torchrun (--monitor_interval 0.1)
Reported: kill -> the first "Resuming training" line, kill -> every rank printing an epoch again,
and the epochs of work lost (the newest epoch begun before the kill minus the one resumed at);
in the dtrun.snapshot modes also the agent's own count, from its "recovered" line.

Usage: bench/tutorial_recovery.py BUILD_DIR TUTORIAL_DIR [--trials 5] [--epochs 400] [--save-every 50]
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
from recovery import worker_of  # noqa: E402
from effective_time import python_rank1  # noqa: E402

TORCHRUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "tools", "torchrun")


def edit(text, old, new):
    if old not in text:
        raise SystemExit(f"the tutorial changed: {old!r} not found; adapt bench/tutorial_recovery.py")
    return text.replace(old, new)


def on_cpu(src):
    for old, new in [('torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))', "pass"),
                     ('backend="nccl"', 'backend="gloo"'), (".to(self.gpu_id)", ""),
                     ("DDP(self.model, device_ids=[self.gpu_id])", "DDP(self.model)"),
                     ('loc = f"cuda:{self.gpu_id}"', 'loc = "cpu"'), ("pin_memory=True", "pin_memory=False")]:
        src = edit(src, old, new)
    return src


def with_dtrun_snapshots(src):
    """The user's change: restore at start (else their file), snapshot after every epoch."""
    src = "import dtrun\n" + src
    src = edit(src, "        if os.path.exists(snapshot_path):",
               "        restored = dtrun.restore()\n"
               "        if restored:\n"
               "            self.model.load_state_dict(restored.state['MODEL_STATE'])\n"
               "            self.epochs_run = restored.step\n"
               "            print(f'Resuming training from memory at Epoch {self.epochs_run}')\n"
               "        elif os.path.exists(snapshot_path):")
    return edit(src, "            self._run_epoch(epoch)\n",
                "            self._run_epoch(epoch)\n"
                "            dtrun.snapshot({'MODEL_STATE': self.model.module.state_dict()}, epoch + 1)\n")


def parked_until_its_round(src):
    """The user's change for warm workers: wait for the round after the imports."""
    return edit(src, "from torch.distributed import init_process_group, destroy_process_group\nimport os\n",
                "from torch.distributed import init_process_group, destroy_process_group\nimport os\n"
                "dtrun.await_round()\n")


def one_crash(build, tutorial, mode, kill_epoch, epochs, save_every):
    with tempfile.TemporaryDirectory() as tmp:
        src = on_cpu(open(os.path.join(tutorial, "multigpu_torchrun.py")).read())
        if "dtrun.snapshot" in mode:
            src = with_dtrun_snapshots(src)
        if "await_round" in mode:
            src = parked_until_its_round(src)
        open(os.path.join(tmp, "train.py"), "w").write(src)
        shutil.copy(os.path.join(tutorial, "datautils.py"), tmp)
        args = ["train.py", str(epochs), str(save_every if "torch.save" in mode else epochs + 1)]
        if mode.startswith("torchrun"):
            cmd = ["/usr/bin/python3", TORCHRUN, "--standalone", "--nproc_per_node", "4", "--max_restarts", "1",
                   "--monitor_interval", "0.1"] + args
        else:
            cmd = [os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "4", "--max-restarts",
                   "1", "--event-log", os.path.join(tmp, "events.jsonl")] + args
        p = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, PYTHON_EXEC="/usr/bin/python3", PYTHONUNBUFFERED="1",
                                      OMP_NUM_THREADS="1"))
        epoch_re = re.compile(r"\[GPU(\d)\] Epoch (\d+) \|")
        killed = resumed_s = None
        newest = resumed_at = -1
        back = set()
        # The agent's own count, from the step dtrun.snapshot() reports (no heartbeat in the tutorial).
        reported = "dtrun.snapshot" in mode
        agent_re = re.compile(r"recovered: .*; (\d+) step\(s\) of work lost")
        agent_lost = None
        for line in p.stdout:
            m = epoch_re.search(line)
            if killed is None and m:
                newest = max(newest, int(m.group(2)))
                if newest >= kill_epoch:
                    victim = python_rank1("train.py") if mode.startswith("torchrun") else \
                        worker_of(os.path.join(tmp, "events.jsonl"), 1)
                    os.kill(victim, signal.SIGKILL)
                    killed = time.monotonic()
            elif killed is not None and "Resuming training" in line and resumed_s is None:
                resumed_s = time.monotonic() - killed
                resumed_at = int(re.search(r"Epoch (\d+)", line).group(1))
            elif killed is not None and m and resumed_s is not None and len(back) < 4:
                back.add(m.group(1))
                if len(back) == 4:
                    stepping_s = time.monotonic() - killed
            said = agent_re.search(line)
            if said and killed is not None:
                agent_lost = int(said.group(1))
            if len(back) == 4 and (not reported or agent_lost is not None):
                break
        p.send_signal(signal.SIGTERM)
        p.stdout.close()
        p.wait(timeout=120)
        if resumed_s is None or len(back) < 4:
            raise SystemExit(f"{mode}: the job did not resume (killed at epoch {newest})")
        if reported and agent_lost is None:
            raise SystemExit(f"{mode}: the agent said no 'recovered' line")
        row = {"resumed_s": resumed_s, "stepping_s": stepping_s, "lost": newest - resumed_at}
        if reported:
            row["agent_lost"] = agent_lost
        return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("tutorial_dir")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=400)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--modes", default="", help="comma-separated subset of the modes (default: all)")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)  # the jobs run in their own directories
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; 4 workers, kill at a random epoch in 60..140, "
          f"torch.save every {args.save_every} epochs")
    rng = random.Random(1)
    kills = [rng.randint(60, 140) for _ in range(args.trials)]
    modes = ["dtrun + dtrun.snapshot + await_round", "dtrun + dtrun.snapshot", "dtrun + torch.save",
             "torchrun + torch.save"]
    for mode in args.modes.split(",") if args.modes else modes:
        rows = [one_crash(args.build_dir, args.tutorial_dir, mode, k, args.epochs, args.save_every) for k in kills]
        r = {k: [row[k] for row in rows] for k in rows[0]}
        print(f"{mode}: kill -> 'Resuming training' median {statistics.median(r['resumed_s']):.2f} s "
              f"(max {max(r['resumed_s']):.2f}); kill -> every rank training median "
              f"{statistics.median(r['stepping_s']):.2f} s; epochs lost median {statistics.median(r['lost'])}, "
              f"max {max(r['lost'])}" +
              (f"; the agent's count of steps lost: {r['agent_lost']}" if "agent_lost" in r else ""))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
