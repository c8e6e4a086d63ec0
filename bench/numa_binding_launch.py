#!/usr/bin/env python3
"""What --numa-binding adds to a launch: dtrun with 2 no-op workers, without the flag and with
`node` and `exclusive`, alternated in each of 40 rounds; prints the median and p10/p90 in ms.
Run from the repository root after scripts/build.sh (docs/BENCHMARKS.md, "--numa-binding")."""
import os
import statistics
import subprocess
import time

DTRUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "dtrun")
BASE = [DTRUN, "--standalone", "--nproc-per-node", "2"]
MODES = {"none": [], "node": ["--numa-binding", "node"], "exclusive": ["--numa-binding", "exclusive"]}
ROUNDS = 40


def main():
    times = {mode: [] for mode in MODES}
    for _ in range(ROUNDS):
        for mode, extra in MODES.items():
            start = time.perf_counter()
            subprocess.run(BASE + extra + ["/bin/true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=True)
            times[mode].append((time.perf_counter() - start) * 1000)
    for mode, ms in times.items():
        ms.sort()
        print(f"{mode:10s} median {statistics.median(ms):.2f} ms  p10 {ms[ROUNDS // 10]:.2f}  "
              f"p90 {ms[ROUNDS * 9 // 10]:.2f}")


if __name__ == "__main__":
    main()
