#!/usr/bin/env python3
"""Every worker of a job on one TCPStore, ours beside LibTorch's, side by side in one run.

For each N: a fresh `dtrun rdzv-server` (which serves the workers' store on its endpoint) and a
fresh LibTorch TCPStore server (Debian's torch 1.13, `TCPStore(is_master=True)`), each driven by
bench/store_fanin.cc with N clients: the init barrier, then the same N waiting on a key nobody sets
and all disconnecting (a job that dies during init). Prints a markdown table: seconds, and the
server's CPU seconds and peak RSS.

  python3 bench/store_fanin.py BUILD [--clients 2000,8000] [--torch-python /usr/bin/python3]

The open-file limit bounds N: the store takes half of it (agent/tcp_store_server.h), and the
driver needs one descriptor per client.
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import time

TORCH_SERVER = """
import sys, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, True, wait_for_workers=False)
print("ready", flush=True)
sys.stdin.read()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_cpu_and_rss(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss_kib = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss_kib = int(line.split()[1])
    return cpu, rss_kib / 1024


def start_server(kind, build, python, port):
    lift = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    if kind == "dtrun":
        cmd = [os.path.join(build, "bin", "dtrun"), "rdzv-server", "--rdzv-endpoint", f"127.0.0.1:{port}"]
        ready = "serving"
    else:
        cmd = [python, "-c", TORCH_SERVER, str(port)]
        ready = "ready"
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lift)
    line = proc.stdout.readline()  # blocks until the server says it serves, or exits
    if ready not in line:
        proc.kill()
        raise RuntimeError(f"{kind} server did not start: {line.strip()}")
    return proc


def drive(build, port, clients, mode):
    out = subprocess.run([os.path.join(build, "bin", "store_fanin"), "--port", str(port), "--clients", str(clients),
                          "--mode", mode, "--timeout-s", "300"], capture_output=True, text=True, timeout=360)
    if not out.stdout.strip():
        raise RuntimeError(f"store_fanin printed nothing: {out.stderr.strip()}")
    return json.loads(out.stdout)


def run_one(kind, build, python, clients):
    port = free_port()
    proc = start_server(kind, build, python, port)
    try:
        cpu0, _ = server_cpu_and_rss(proc.pid)
        barrier = drive(build, port, clients, "barrier")
        abandon = drive(build, port, clients, "abandon")
        cpu1, rss = server_cpu_and_rss(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    return {"kind": kind, "clients": clients, "barrier": barrier, "abandon": abandon, "server_cpu_s": cpu1 - cpu0,
            "server_rss_mib": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--clients", default="2000,8000")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    args = ap.parse_args()
    print("| store | clients | failed | all connected | barrier done | release | serving again after all left "
          "| server CPU | server peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in [int(x) for x in args.clients.split(",")]:
        for kind in ("dtrun", "torch"):
            r = run_one(kind, args.build, args.torch_python, n)
            b, a = r["barrier"], r["abandon"]
            print(f"| {kind} | {n:,} | {b['failed'] + a['failed']} | {b['connected_s']:.2f} s | {b['done_s']:.2f} s "
                  f"| {b['released_s'] * 1000:.0f} ms | {a['serving_again_s'] * 1000:.0f} ms "
                  f"| {r['server_cpu_s']:.2f} s | {r['server_rss_mib']:.0f} MiB |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
