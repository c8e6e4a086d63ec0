"""What `dtrun.heartbeat()` and `with dtrun.section()` cost a Python worker, per call.

    dtrun --standalone /usr/bin/python3 bench/heartbeat_bench.py    (under dtrun: real reports)
    PYTHONPATH=build/lib/dtrun/python python3 bench/heartbeat_bench.py   (no agent: no-ops)
"""
import os
import time

import dtrun

N = int(os.environ.get("N", "200000"))


def per_call(f):
    start = time.perf_counter()
    for i in range(N):
        f(i)
    return (time.perf_counter() - start) / N * 1e9


def in_section(i):
    with dtrun.section("step"):
        pass


beat = per_call(lambda i: dtrun.heartbeat(i, samples=i * 256))
section = per_call(in_section)
print("under dtrun: %s; heartbeat %.0f ns/call; with section(): %.0f ns/step" % (dtrun.enabled(), beat, section))
