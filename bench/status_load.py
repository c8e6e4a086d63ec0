#!/usr/bin/env python3
"""The rendezvous service under `dtrun status` load: N simulated agents of 8 workers each push their
status rows with their keep-alives every 2 s (the agents' push pace; bench/rdzv_load --status-rows),
one client asks for the whole job once a second; the service's CPU and memory are sampled from
/proc once a second.
The same run with keep-alives at the same pace but no rows is the baseline.

  bench/status_load.py BUILD_DIR [--nodes 1000] [--seconds 40]
"""
import argparse
import os
import signal
import subprocess
import time

TICKS = os.sysconf("SC_CLK_TCK")


def proc_sample(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = int(fields[11]) + int(fields[12])
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return time.monotonic(), cpu, rss


def run(build, nodes, seconds, with_rows, port):
    srv = subprocess.Popen([os.path.join(build, "bin", "dtrun"), "rdzv-server", "--rdzv-endpoint",
                            f"127.0.0.1:{port}", "--nnodes", str(nodes), "--max-restarts", "10", "--rdzv-id", "load", "--rdzv-token", "t",
                            "--rdzv-conf", "keep_alive_interval=5,keep_alive_max_attempt=6"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()  # "serving ..."
    cmd = [os.path.join(build, "bin", "rdzv_load"), "--endpoint", f"127.0.0.1:{port}", "--nodes", str(nodes),
           "--steady-seconds", str(seconds), "--keep-alive-ms", "2000"]
    load = subprocess.Popen(cmd + (["--status-rows"] if with_rows else []), stdout=subprocess.PIPE, text=True)
    samples = []
    while load.poll() is None:
        samples.append(proc_sample(srv.pid))
        time.sleep(1)
    out = load.stdout.read()
    srv.send_signal(signal.SIGTERM)
    srv.wait()
    # The steady state: from 8 s in (every node joined and pushing) to 2 s before the end.
    steady = [s for s in samples if samples[0][0] + 8 <= s[0] <= samples[-1][0] - 2]
    cpu = (steady[-1][1] - steady[0][1]) / TICKS / (steady[-1][0] - steady[0][0])
    rss = max(s[2] for s in samples)
    return cpu, rss, out.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=40)
    args = ap.parse_args()
    b = os.path.abspath(args.build_dir)
    for with_rows, port in ((False, 29721), (True, 29722)):
        cpu, rss, out = run(b, args.nodes, args.seconds, with_rows, port)
        what = "status rows (8 workers each)" if with_rows else "keep-alives only (baseline)"
        print(f"{args.nodes} nodes, a push every 2 s, {what}: service CPU {cpu * 100:.1f}% of a core, "
              f"peak RSS {rss / 2**20:.0f} MiB")
        print("   ", out.replace("\n", "\n    "))


if __name__ == "__main__":
    main()
