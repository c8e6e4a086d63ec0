#!/usr/bin/env python3
"""Launch-to-exit times on this machine, dtrun vs torchrun side by side: a no-op binary and a
Python NCCL worker (bench/gpu/nccl_init.py, init_process_group("nccl") + all_reduce + barrier).
Median of --runs runs each. Prints one "LAUNCH {json}" line per row.
  launch_times.py BUILD_DIR [--nproc N] [--runs 5] [--torchrun "python3 -m torch.distributed.run"]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def median_seconds(cmd, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode()[-2000:]}")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun", default=f"{sys.executable} -m torch.distributed.run")
    args = ap.parse_args()
    dtrun = [os.path.join(args.build_dir, "bin", "dtrun"), "--standalone", "--nproc-per-node", str(args.nproc)]
    torchrun = args.torchrun.split() + ["--standalone", "--nproc_per_node", str(args.nproc), "--monitor_interval",
                                        "0.1"]
    nccl = [os.path.join(HERE, "nccl_init.py")]
    rows = [("no-op binary", dtrun + ["--no-python", "/bin/true"], torchrun + ["--no_python", "/bin/true"]),
            ("Python NCCL init + all_reduce + barrier", dtrun + nccl, torchrun + nccl)]
    os.environ["PYTHON_EXEC"] = sys.executable  # dtrun runs .py workers with it
    for label, ours, theirs in rows:
        a, b = median_seconds(ours, args.runs), median_seconds(theirs, args.runs)
        print("LAUNCH " + json.dumps({"workload": label, "nproc": args.nproc, "runs": args.runs,
                                      "dtrun_ms": a * 1000, "torchrun_ms": b * 1000}), flush=True)


if __name__ == "__main__":
    main()
