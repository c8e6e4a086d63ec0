#!/usr/bin/env python3
"""Recovery from a worker crash: SIGKILL of one rank -> every rank stepping again, and lost steps.

One node, train_imagenet under dtrun (2 processes, ResNet-18, 64 px synthetic images, batch 32,
--max-restarts), one rank SIGKILLed at a random step; the agent's event log ("recovered") gives
the phases and the restored step. Modes: the default (in-memory snapshots, adaptive cadence) and
--snapshot-memory 0 (disk checkpoints only, the pre-snapshot behaviour). Also reports what the
snapshots cost: the trainer's summary line of an uninterrupted run.

Usage: bench/recovery.py BUILD_DIR [--trials 10] [--save-every-minutes 2] [--modes default,cold,disk]
       [--copy background] [--snapshot-every N]
--copy background copies each snapshot alongside the next step, as a state on the GPU is by default
(DTRUN_SNAPSHOT_COPY); --snapshot-every 1 then has one pending whenever the kill comes.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def worker_of(events, rank):
    """The pid of `rank`'s running worker: the newest worker_start record for it in the event log
    (a warm worker's /proc environment is the one it was parked with, not its round's)."""
    pid = 0
    for line in open(events):
        r = json.loads(line)
        if r.get("event") == "worker_start" and r.get("rank") == rank:
            pid = r["worker_pid"]
    return pid


def trainer(build, out, extra):
    return [os.path.join(build, "bin", "train_imagenet"), "--synthetic", "--synthetic-size", "8192",
            "--image-size", "64", "-b", "32", "-j", "1", "--epochs", "1", "--output-dir", out] + extra


def one_crash(build, flags, kill_at, save_minutes, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.jsonl")
        cmd = [os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
               "--event-log", events] + flags + trainer(build, os.path.join(tmp, "run"),
                                                        ["-p", "1", "--save-every-minutes", str(save_minutes)])
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
        step_re = re.compile(r"Epoch: \[0\]\[(\d+)/")
        killed_ms = None
        reached = 0
        for line in p.stdout:
            m = step_re.search(line)
            if m and killed_ms is None and int(m.group(1)) >= kill_at:
                reached = int(m.group(1))
                victim = worker_of(events, 1)
                killed_ms = time.time() * 1000
                os.kill(victim, signal.SIGKILL)
            if killed_ms is not None and "recovered:" in line:
                break
        p.send_signal(signal.SIGTERM)
        p.stdout.close()
        p.wait(timeout=120)
        rec = [json.loads(l) for l in open(events) if '"recovered"' in l]
        if not rec:
            raise SystemExit("no recovery recorded")
        r = rec[0]
        return {"kill_to_stepping_s": (r["ts_ms"] - killed_ms) / 1000, "source": r["source"],
                "lost_steps": reached - max(r["restored_step"], 0), "restored_ms": r["restored_ms"],
                "started_ms": r["started_ms"], "warm": warm_starts(events)}


def warm_starts(events):
    """How many workers of the rounds after the first were released warm."""
    return sum(1 for r in map(json.loads, open(events)) if r.get("event") == "worker_start" and r.get("warm"))


def cost(build, flags, env=None):
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "2"] + flags +
                             trainer(build, os.path.join(tmp, "run"), ["--print-freq", "1000"]),
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
                             check=True)
        text = out.stdout + out.stderr
        snap = re.search(r"=> (\d+ in-memory snapshots.*)", text)
        return snap.group(1) if snap else "(no snapshots)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--save-every-minutes", type=float, default=2)
    ap.add_argument("--modes", default="default,cold,disk")
    ap.add_argument("--copy", choices=["sync", "background"], default=None, help="DTRUN_SNAPSHOT_COPY")
    ap.add_argument("--snapshot-every", type=int, default=0, help="dtrun --snapshot-every (0: adaptive)")
    args = ap.parse_args()
    env = {"DTRUN_SNAPSHOT_COPY": args.copy} if args.copy else {}
    every = ["--snapshot-every", str(args.snapshot_every)] if args.snapshot_every else []
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores")
    print("snapshot cost, uninterrupted 128 steps:", cost(args.build_dir, every, env))
    rng = random.Random(1)
    modes = [("default", "in-memory snapshots, warm workers (default)", every),
             ("cold", "in-memory snapshots, cold start (--warm-workers off)", every + ["--warm-workers", "off"]),
             ("disk", "disk only, cold start (--snapshot-memory 0 --warm-workers off)",
              ["--snapshot-memory", "0", "--warm-workers", "off"])]
    for key, name, flags in modes:
        if key not in args.modes.split(","):
            continue
        rows = [one_crash(args.build_dir, flags, rng.randint(20, 60), args.save_every_minutes, env)
                for _ in range(args.trials)]
        t = [r["kill_to_stepping_s"] for r in rows]
        lost = [r["lost_steps"] for r in rows]
        print(f"{name}: kill -> every rank stepping median {statistics.median(t):.2f} s, max {max(t):.2f} s; "
              f"lost steps median {statistics.median(lost)}, max {max(lost)} ({lost}); sources "
              f"{sorted(set(r['source'] for r in rows))}; workers started {statistics.median([r['started_ms'] for r in rows]):.0f} ms, "
              f"state restored {statistics.median([r['restored_ms'] for r in rows]):.0f} ms after the failure; "
              f"warm workers per restart {statistics.median([r['warm'] for r in rows])}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
