#!/usr/bin/env python3
"""Peak RSS (VmHWM) of the launcher process itself, not of its workers, dtrun vs torchrun.

Runs 4 workers that do a gloo init + all_reduce, then stay up for a moment; once all 4 report, it
reads VmHWM from /proc/<launcher pid>/status (the peak so far: spawn, store, relay all done).
GNU time cannot be used for this: its max RSS includes reaped children. Usage:
  bench/launcher_rss.py BUILD_DIR
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "shared", "tools", "torchrun")
GLOO = os.path.join(HERE, "..", "tests", "integration", "workers", "gloo_allreduce.py")
WORKER = ["/bin/sh", "-c", f"/usr/bin/python3 -u {GLOO} && exec sleep 2"]


def vm_hwm_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def peak(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    seen = 0
    for line in p.stdout:
        seen += "ALLREDUCE_OK" in line
        if seen == 4:
            break
    kib = vm_hwm_kib(p.pid)
    p.stdout.read()
    p.wait(timeout=60)
    return kib


def main():
    dtrun = os.path.join(sys.argv[1], "bin", "dtrun")
    d = peak([dtrun, "--standalone", "--nproc-per-node", "4", "--no-python"] + WORKER)
    t = peak(["/usr/bin/python3", TORCHRUN, "--standalone", "--nproc_per_node", "4",
              "--monitor_interval", "0.1", "--tee", "3", "--no_python"] + WORKER)
    print(f"launcher peak RSS with 4 gloo workers: dtrun {d / 1024:.1f} MiB, torchrun {t / 1024:.1f} MiB "
          f"({t / d:.0f}x)")


if __name__ == "__main__":
    sys.exit(main())
