#!/usr/bin/env python3
"""Restart latency: failing worker exit -> replacement workers started, dtrun vs torchrun.

Runs `restart_probe` (bench/restart_probe.cc) under each launcher with N restarts and reports, per
restart, the time from rank 0's exit to (a) rank 0's replacement start and (b) the last worker of
the new group started. Usage: bench/restart_latency.py BUILD_DIR [--nproc 4 --restarts 20]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "shared", "tools", "torchrun")


def measure(cmd, restarts, env_extra):
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.txt")
        env = dict(os.environ, PROBE_FILE=probe, PROBE_RESTARTS=str(restarts), **env_extra)
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        starts, exits = {}, {}
        for line in open(probe):
            attempt, rank, what, ns = line.split()
            attempt, rank, ns = int(attempt), int(rank), int(ns)
            if what == "exit":
                exits[attempt] = ns
            else:
                starts.setdefault(attempt, {})[rank] = ns
        first, last = [], []
        for a in range(restarts):
            first.append((starts[a + 1][0] - exits[a]) / 1e6)
            last.append((max(starts[a + 1].values()) - exits[a]) / 1e6)
        return first, last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--restarts", type=int, default=20)
    ap.add_argument("--torchrun", default=f"/usr/bin/python3 {TORCHRUN}",
                    help="torchrun command (default: the shim beside this checkout; a pip PyTorch: "
                         "'python3 -m torch.distributed.run')")
    args = ap.parse_args()
    probe = os.path.join(args.build_dir, "bin", "restart_probe")
    dtrun = os.path.join(args.build_dir, "bin", "dtrun")
    n, r = str(args.nproc), str(args.restarts)
    runs = {
        "dtrun": [dtrun, "--standalone", "--nproc-per-node", n, "--max-restarts", r, probe],
        "torchrun": args.torchrun.split() + ["--standalone", "--nproc_per_node", n,
                     "--max_restarts", r, "--monitor_interval", "0.1", "--no_python", probe],
    }
    results = {}
    for name, cmd in runs.items():
        first, last = measure(cmd, args.restarts, {"OMP_NUM_THREADS": "1"})
        results[name] = (statistics.median(first), statistics.median(last), max(last))
        print(f"{name:9s} nproc={n} restarts={r}: rank0 replaced median {results[name][0]:7.2f} ms; "
              f"whole group restarted median {results[name][1]:7.2f} ms, max {results[name][2]:7.2f} ms")
    ratio = results["torchrun"][1] / results["dtrun"][1]
    print(f"whole-group restart: dtrun is {ratio:.0f}x faster than torchrun")


if __name__ == "__main__":
    sys.exit(main())
