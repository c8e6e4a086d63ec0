#!/usr/bin/python3
"""Scaling study: train_imagenet under dtrun at 1, 2, ... workers on one node and, as root, on 2 and
3 network-namespace "nodes" (one worker each, veth pairs on a bridge, TCP between them), with the
same data and settings. Records, per configuration, training images/s (timed steps between
barriers, on a 2,000-image set of the same kind so that every configuration times 15 steps inside
one epoch), scaling efficiency against 1 worker, and wall time from launch to a target validation
top-1; then draws scaling.png with dtplot.

  bench/scaling_study.py BUILD_DIR DATA OUT [--workers 1,2] [--nodes 2,3] [--target 60] [--epochs 10]

Every worker computes with one thread (OMP_NUM_THREADS=1, dtrun's default), so N workers use N
cores; the per-process batch is fixed (weak scaling) and the learning rate scales with the global
batch (--lr-scale-with-batch). OUT gets study.json, scaling.png and each run's log and metrics.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

SUBNET = "198.18.77."


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def train_args(build, data, out_dir, extra):
    return [os.path.join(build, "bin", "train_imagenet"), data, "--arch", "resnet18", "-b", "32", "--lr", "0.08",
            "--lr-scale-with-batch", "--warmup-epochs", "1", "--lr-schedule", "cosine", "--image-size", "112",
            "-j", "1", "--print-freq", "1000", "--output-dir", out_dir] + extra


class Namespaces:
    """N hosts on a bridge in its own namespace; removed on exit."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.names = ["dtscale-sw"] + [f"dtscale-h{i}" for i in range(hosts)]

    def ip(self, *args):
        subprocess.run(["ip", *args], check=True)

    def __enter__(self):
        self.__exit__()
        self.ip("netns", "add", "dtscale-sw")
        self.ip("-n", "dtscale-sw", "link", "add", "br0", "type", "bridge")
        self.ip("-n", "dtscale-sw", "link", "set", "br0", "up")
        for i in range(self.hosts):
            ns, a, b = f"dtscale-h{i}", f"dtsc{i}a", f"dtsc{i}b"
            self.ip("netns", "add", ns)
            self.ip("link", "add", a, "type", "veth", "peer", "name", b)
            self.ip("link", "set", a, "netns", ns, "name", "eth0")
            self.ip("link", "set", b, "netns", "dtscale-sw")
            self.ip("-n", "dtscale-sw", "link", "set", b, "master", "br0", "up")
            self.ip("-n", ns, "addr", "add", f"{SUBNET}{10 + i}/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")
            self.ip("-n", ns, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for ns in self.names:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def command(self, host, nnodes, build, port):
        return ["ip", "netns", "exec", f"dtscale-h{host}", os.path.join(build, "bin", "dtrun"), "--nnodes",
                str(nnodes), "--node-rank", str(host), "--nproc-per-node", "1", "--master-addr", f"{SUBNET}10",
                "--master-port", str(port), "--local-addr", f"{SUBNET}{10 + host}", "--rdzv-id", "scale"]


def launch(commands, log_path, reach_marker=None, timeout=1200):
    """Runs the node commands together; returns (seconds to the marker or None, total seconds)."""
    start = time.monotonic()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0") if len(commands) > 1 else dict(os.environ)
    with open(log_path, "w") as log:
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE if i == 0 else log, stderr=subprocess.STDOUT, text=True,
                                  env=env) for i, c in enumerate(commands)]
        reached = None
        for line in procs[0].stdout:
            log.write(line)
            if reached is None and reach_marker and reach_marker in line:
                reached = time.monotonic() - start
        for p in procs:
            p.wait(timeout=timeout)
        if any(p.returncode != 0 for p in procs):
            sys.exit(f"scaling_study: a run failed; see {log_path}")
    return reached, time.monotonic() - start


def configuration(args, layout, workers, nodes, port, ns=None):
    """Throughput on the larger set (every configuration times whole steps inside one epoch), then
    time to the target accuracy on DATA."""
    name = f"{layout.replace(' ', '-')}-{workers}"
    run_dir = os.path.join(args.out, "runs", name)
    os.makedirs(run_dir, exist_ok=True)
    bench_json = os.path.join(run_dir, "bench.json")
    result = {"layout": layout, "workers": workers, "nodes": nodes}
    for phase, data, extra, marker in (
            ("throughput", args.throughput_data, ["--epochs", "1", "--warmup-iters", "3", "--timed-iters", str(args.timed_iters),
                            "--bench-json", bench_json], None),
            ("accuracy", args.data, ["--epochs", str(args.epochs), "--desired-acc", str(args.target)],
             "reached the desired accuracy")):
        out_dir = os.path.join(run_dir, phase)
        subprocess.run(["rm", "-rf", out_dir])
        trainer = train_args(args.build, data, out_dir, extra)
        if nodes == 1:
            commands = [[os.path.join(args.build, "bin", "dtrun"), "--standalone", "--nproc-per-node", str(workers)]
                        + trainer]
        else:
            commands = [ns.command(h, nodes, args.build, port) + trainer for h in range(nodes)]
        reached, total = launch(commands, os.path.join(run_dir, phase + ".log"), marker)
        if phase == "throughput":
            result["images_per_s"] = json.load(open(bench_json))["images_per_s"]
        else:
            result["time_to_target_s"] = reached
            result["accuracy_run_s"] = total
            vals = [json.loads(l) for l in open(os.path.join(out_dir, "metrics.jsonl")) if '"val"' in l]
            result["best_top1"] = max(v["top1"] for v in vals)
            result["epochs_run"] = len(vals)
    print(json.dumps(result), flush=True)
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("data")
    p.add_argument("out")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--nodes", default="2,3", help="network-namespace node counts (root only); empty: none")
    p.add_argument("--target", type=float, default=60)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--timed-iters", type=int, default=15)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # 2,000 images of the same kind: 20 steps per epoch even at 3 workers.
    args.throughput_data = os.path.join(args.out, "throughput-data")
    if not os.path.isdir(os.path.join(args.throughput_data, "train")):
        subprocess.run([os.path.join(args.build, "bin", "dtdata"), "make-demo", args.throughput_data,
                        "--train-per-class", "200", "--val-per-class", "2"], check=True, stdout=subprocess.DEVNULL)
    runs = []
    for w in [int(x) for x in args.workers.split(",") if x]:
        runs.append(configuration(args, "one node", w, 1, 0))
    node_counts = [int(x) for x in args.nodes.split(",") if x]
    if node_counts and os.geteuid() != 0:
        print("scaling_study: not root: the network-namespace nodes are left out", file=sys.stderr)
        node_counts = []
    for n in node_counts:
        with Namespaces(n) as ns:
            runs.append(configuration(args, "netns nodes", n, n, 29600 + n, ns))
    study = {"title": f"ResNet-18, 112 px, batch 32 per worker, 1 thread per worker; netns nodes: 1 worker each, "
                      f"TCP over veth; {cpu_model()}, "
                      f"{os.cpu_count()} cores",
             "target_top1": args.target, "cpu": cpu_model(), "cores": os.cpu_count(), "runs": runs}
    path = os.path.join(args.out, "study.json")
    with open(path, "w") as f:
        json.dump(study, f, indent=1)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([sys.executable, os.path.join(here, "..", "python", "dtplot.py"), "--scaling", path, "-o", args.out],
                   check=True)
    curves = [os.path.join(args.out, "runs", f"{r['layout'].replace(' ', '-')}-{r['workers']}", "accuracy")
              for r in runs]
    labels = [f"{r['workers']} {'worker' if r['nodes'] == 1 else 'node'}{'s' if r['workers'] > 1 else ''}"
              for r in runs]
    subprocess.run([sys.executable, os.path.join(here, "..", "python", "dtplot.py"), *curves, "--labels",
                    ",".join(labels), "--x", "time", "-o", os.path.join(args.out, "curves")], check=True)


if __name__ == "__main__":
    main()
