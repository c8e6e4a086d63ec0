#!/usr/bin/env python3
"""What in-memory snapshots cost a training step, measured as throughput, not inside the trainer.

train_imagenet under dtrun (2 processes, ResNet-18, 64 px synthetic images, batch 32, one epoch
of 128 steps), uninterrupted, in rounds that interleave the modes so that a drift of the machine
falls on all of them alike:
  none                 --snapshot-memory 0
  default              the adaptive cadence with snapshots on failure armed after every step
                       (a 0.25% budget for the periodic ones)
  on failure off       DTRUN_SNAPSHOT_ON_FAILURE=off: the adaptive cadence alone (a 2% budget),
                       the default before snapshots on failure
  and with --modes all:
  every step           --snapshot-every 1, the whole copy between steps
  background ...       parameters and optimizer state copied during the next step
                       (DTRUN_SNAPSHOT_COPY=background)
Throughput is the images/s of the trainer's progress lines after the first (which holds the
start-up). Cost = 1 - mode / none.

Usage: bench/snapshot_cost.py BUILD_DIR [--rounds 3] [--steps 128] [--modes all]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

MODES = [
    ("none", ["--snapshot-memory", "0"], {}),
    ("default (adaptive, on failure)", [], {}),
    ("adaptive, on failure off", [], {"DTRUN_SNAPSHOT_ON_FAILURE": "off"}),
]
MORE_MODES = [
    ("sync, every step", ["--snapshot-every", "1"], {}),
    ("background, every step", ["--snapshot-every", "1"], {"DTRUN_SNAPSHOT_COPY": "background"}),
    ("background, adaptive", [], {"DTRUN_SNAPSHOT_COPY": "background"}),
]


def run(build, flags, env, steps):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "2"] + flags + [
            os.path.join(build, "bin", "train_imagenet"), "--synthetic", "--synthetic-size", str(64 * steps),
            "--image-size", "64", "-b", "32", "-j", "1", "--epochs", "1", "--print-freq", "16",
            "--output-dir", os.path.join(tmp, "run")]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1", **env))
        text = out.stdout + out.stderr
        rates = [float(m) for m in re.findall(r"Epoch: \[0\]\[\d+/\d+\].*? img/s ([\d.]+)", text)]
        summary = re.search(r"=> (\d+ in-memory snapshots[^\n]*)", text)
        return statistics.mean(rates[1:]), summary.group(1) if summary else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="", help="all: also every step, and the background copies")
    ap.add_argument("--steps", type=int, default=128, help="steps of the epoch (a longer one shows the cadence settled)")
    args = ap.parse_args()
    modes = MODES + (MORE_MODES if args.modes == "all" else [])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {args.rounds} rounds of {len(modes)} runs of {args.steps} steps")
    rates = {name: [] for name, _, _ in modes}
    summaries = {}
    for _ in range(args.rounds):
        for name, flags, env in modes:
            rate, summary = run(args.build_dir, flags, env, args.steps)
            rates[name].append(rate)
            summaries[name] = summary
    base = statistics.mean(rates["none"])
    for name, _, _ in modes:
        r = statistics.mean(rates[name])
        print(f"{name}: {r:.1f} img/s ({', '.join(f'{x:.1f}' for x in rates[name])}), "
              f"cost {100 * (1 - r / base):.1f}%; {summaries[name] or 'no snapshots'}")


if __name__ == "__main__":
    main()
