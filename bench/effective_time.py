#!/usr/bin/env python3
"""Effective training time with a crash every few minutes, dtrun beside torchrun.

One node, 2 processes, ResNet-18 on 64 px synthetic images, batch 32 per process, OMP_NUM_THREADS=1.
Each mode runs for --window seconds from its first step and loses rank 1's worker to SIGKILL once
in every --crash-every seconds, at a random point of each interval (the same points in every mode);
the launcher restarts it (--max-restarts large). At the window's end the
newest step printed is the work kept. Effective training time = kept steps / the steps the same
trainer takes in the same window with no crash and nothing saved (its own baseline run), so the
C++ and the Python trainer are each compared with themselves.

  dtrun, memory     train_imagenet, the defaults: in-memory snapshots (and snapshots on failure),
                    warm workers
  dtrun, memory, on failure off   the same with DTRUN_SNAPSHOT_ON_FAILURE=off (--modes memory-off)
  dtrun, disk       train_imagenet --snapshot-memory 0 --warm-workers off, a checkpoint every
                    --checkpoint-seconds (its --save-every-minutes)
  torchrun, disk    bench/recovery_reference.py under ../shared/tools/torchrun (--monitor_interval
                    0.1), torch.save every N steps, N = --checkpoint-seconds at its baseline rate
  dtrun, Python, memory           recovery_reference.py --dtrun-snapshot under dtrun: dtrun.snapshot
                    after every step (its adaptive cadence, snapshots on failure) (--modes py-memory)
  dtrun, Python, memory, on failure off   the same with DTRUN_SNAPSHOT_ON_FAILURE=off (py-memory-off)

Per crash: kill -> every rank stepping again and the steps lost, and the seconds of training it
cost (that time plus the lost steps at the baseline rate). The effective time a crash every 5
minutes gives is then (1 - saving cost) x (1 - seconds per crash / 300), with the saving cost measured
inside the trainer: train_imagenet's snapshot line, the reference's torch.save times. A window's
ratio alone is too noisy for that (this VM's speed moves by a few % between runs). The trainer's
figure for snapshots is about half their cost in throughput (bench/snapshot_cost.py): pass that
one as --snapshot-cost PERCENT.

Usage: bench/effective_time.py BUILD_DIR [--window 300] [--crash-every 60] [--checkpoint-seconds 30]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recovery import cost, worker_of  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "shared", "tools", "torchrun")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHON_EXEC="/usr/bin/python3", PYTHONUNBUFFERED="1")


def dtrun_cmd(build, tmp, flags, trainer_flags):
    return ([os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1000",
             "--event-log", os.path.join(tmp, "events.jsonl")] + flags +
            [os.path.join(build, "bin", "train_imagenet"), "--synthetic", "--synthetic-size", "10000000",
             "--image-size", "64", "-b", "32", "-j", "1", "--epochs", "1", "-p", "1",
             "--output-dir", os.path.join(tmp, "run")] + trainer_flags)


def dtrun_python_cmd(build, tmp):
    return [os.path.join(build, "bin", "dtrun"), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1000",
            "--event-log", os.path.join(tmp, "events.jsonl"), os.path.join(HERE, "recovery_reference.py"),
            "--dtrun-snapshot"]


def torchrun_cmd(tmp, checkpoint_every):
    return ["/usr/bin/python3", TORCHRUN, "--standalone", "--nproc_per_node", "2", "--max_restarts", "1000",
            "--monitor_interval", "0.1", os.path.join(HERE, "recovery_reference.py"),
            "--checkpoint-dir", os.path.join(tmp, "ckpt"), "--checkpoint-every", str(checkpoint_every)]


CXX_STEP = re.compile(r"Epoch: \[0\]\[(\d+)/")
_RANK0 = r"^(?:\[default0\]:)?"  # dtrun's console prefix; torchrun prints none
PY_STEP = re.compile(_RANK0 + r"step (\d+) ")
PY_START = re.compile(_RANK0 + r"start at step (\d+)")
PY_SAVED = re.compile(_RANK0 + r"saved step \d+ in ([0-9.]+) s")
PY_SNAPSHOT = re.compile(_RANK0 + r"snapshot step \d+ in ([0-9.]+) s")
PY_ARMED = re.compile(_RANK0 + r"armed \d+ times, ([0-9.]+) ms each")


def python_rank1(script="recovery_reference.py"):
    """Rank 1's trainer under torchrun (its workers carry RANK and TORCHELASTIC_RUN_ID)."""
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"RANK=1" in env and script.encode() in cmd and b"TORCHELASTIC_RUN_ID" in b"".join(env):
            return pid
    return 0


def crash_times(window, crash_every, seed=7):
    """One crash per interval at a random point of it (the same in every mode): crashes at a fixed
    phase would always land at the same distance from the last periodic checkpoint."""
    rng = random.Random(seed)
    n = int(window // crash_every) if crash_every else 0
    return [crash_every * (k + rng.uniform(0.1, 0.9)) for k in range(n)]


def run(cmd, kind, tmp, window, crash_every):
    """Runs one mode; returns the steps kept at the window's end and each crash's kill time, step
    reached before it, and (for torchrun) the restart's first step line."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
                         start_new_session=True)
    t0, last_step, crashes, started, saves, snapshots, arm_ms = None, 0, [], None, [], [], None
    due = crash_times(window, crash_every)
    for line in p.stdout:
        now = time.time()
        m = (CXX_STEP if kind == "cxx" else PY_STEP).search(line)
        if PY_SAVED.search(line):
            saves.append(float(PY_SAVED.search(line).group(1)))
        if PY_SNAPSHOT.search(line) and t0 is not None:
            snapshots.append(float(PY_SNAPSHOT.search(line).group(1)))
        if PY_ARMED.search(line):
            arm_ms = float(PY_ARMED.search(line).group(1))
        if kind == "py" and PY_START.search(line) and crashes:
            started = int(PY_START.search(line).group(1))
            crashes[-1].setdefault("restored_step", started)
        if not m:
            continue
        step = int(m.group(1))
        if t0 is None:
            t0 = now
        if now - t0 >= window:
            break
        last_step = step
        if kind == "py" and crashes and "stepping_s" not in crashes[-1] and started is not None:
            crashes[-1]["stepping_s"] = now - crashes[-1]["killed"]
        if len(crashes) < len(due) and now - t0 >= due[len(crashes)]:
            victim = worker_of(os.path.join(tmp, "events.jsonl"), 1) if kind == "cxx" else python_rank1()
            if victim:
                started = None
                crashes.append({"killed": time.time(), "reached": step})
                os.kill(victim, signal.SIGKILL)
    os.killpg(p.pid, signal.SIGTERM)
    p.stdout.close()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    if kind == "cxx":
        recovered = [json.loads(l) for l in open(os.path.join(tmp, "events.jsonl")) if '"recovered"' in l]
        for c, r in zip(crashes, recovered):
            c["stepping_s"] = r["ts_ms"] / 1000 - c["killed"]
            c["restored_step"] = max(r["restored_step"], 0)
    return {"kept_steps": last_step, "crashes": crashes, "saves_s": saves, "snapshots_s": snapshots, "arm_ms": arm_ms}


def rate(cmd, kind, tmp, window):
    r = run(cmd, kind, tmp, window, 0)
    return r["kept_steps"] / window


def report(name, result, pure_rate, window, crash_every, saving_cost):
    """`saving_cost`: the share of training time that snapshots or checkpoints take (None: unknown)."""
    kept = result["kept_steps"]
    eff = kept / (pure_rate * window)
    cs = [c for c in result["crashes"] if "stepping_s" in c]
    back = [c["stepping_s"] for c in cs]
    lost = [c["reached"] - c.get("restored_step", 0) for c in cs]
    # Each crash costs its time back to stepping plus the steps lost.
    per_crash = [c["stepping_s"] + (c["reached"] - c.get("restored_step", 0)) / pure_rate for c in cs]
    lost_s = statistics.median(per_crash) if per_crash else float("nan")
    at_5min = "?" if saving_cost is None else f"{(1 - saving_cost) * (1 - lost_s / 300) * 100:.1f}%"
    print(f"{name}: effective {eff * 100:.1f}% ({kept} steps kept of {pure_rate * window:.0f}, "
          f"{len(result['crashes'])} crashes); kill -> stepping median {statistics.median(back) if back else float('nan'):.2f} s, "
          f"max {max(back) if back else float('nan'):.2f} s; lost steps median "
          f"{statistics.median(lost) if lost else float('nan')}, max {max(lost) if lost else float('nan')}; "
          f"seconds lost per crash (time back + lost steps) median {lost_s:.2f}; saving cost "
          f"{'?' if saving_cost is None else f'{saving_cost * 100:.1f}%'}; a crash every 5 min: {at_5min}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--window", type=float, default=300)
    ap.add_argument("--crash-every", type=float, default=60)
    ap.add_argument("--checkpoint-seconds", type=float, default=30)
    ap.add_argument("--baseline-window", type=float, default=0, help="default: --window (the same warm-up share)")
    ap.add_argument("--modes", default="memory,disk,torchrun")
    ap.add_argument("--snapshot-cost", type=float, default=None,
                    help="percent; the snapshots' cost in throughput (bench/snapshot_cost.py) instead of the trainer's figure")
    ap.add_argument("--snapshot-cost-off", type=float, default=None,
                    help="percent; the same for the memory-off mode (DTRUN_SNAPSHOT_ON_FAILURE=off)")
    args = ap.parse_args()
    args.baseline_window = args.baseline_window or args.window
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; window {args.window:.0f} s, a crash every {args.crash_every:.0f} s")
    b = args.build_dir
    with tempfile.TemporaryDirectory() as tmp:
        cxx_rate = rate(dtrun_cmd(b, tmp, ["--snapshot-memory", "0", "--warm-workers", "off"],
                                  ["--save-every-minutes", "1000"]), "cxx", tmp, args.baseline_window)
    with tempfile.TemporaryDirectory() as tmp:
        py_rate = rate(torchrun_cmd(tmp, 0), "py", tmp, args.baseline_window)
    print(f"baselines (nothing saved, no crash): train_imagenet {cxx_rate:.3f} steps/s, "
          f"recovery_reference.py {py_rate:.3f} steps/s")
    every = max(1, round(args.checkpoint_seconds * py_rate))
    modes = [("dtrun, memory (defaults)", "cxx", lambda tmp: dtrun_cmd(b, tmp, [], ["--save-every-minutes", "1000"]),
              cxx_rate),
             ("dtrun, memory, on failure off", "cxx",
              lambda tmp: ["env", "DTRUN_SNAPSHOT_ON_FAILURE=off"] + dtrun_cmd(b, tmp, [], ["--save-every-minutes", "1000"]),
              cxx_rate),
             (f"dtrun, disk every {args.checkpoint_seconds:.0f} s", "cxx",
              lambda tmp: dtrun_cmd(b, tmp, ["--snapshot-memory", "0", "--warm-workers", "off"],
                                    ["--save-every-minutes", str(args.checkpoint_seconds / 60)]), cxx_rate),
             (f"torchrun, torch.save every {every} steps", "py", lambda tmp: torchrun_cmd(tmp, every), py_rate),
             ("dtrun, Python, dtrun.snapshot (defaults)", "py", lambda tmp: dtrun_python_cmd(b, tmp), py_rate),
             ("dtrun, Python, dtrun.snapshot, on failure off", "py",
              lambda tmp: ["env", "DTRUN_SNAPSHOT_ON_FAILURE=off"] + dtrun_python_cmd(b, tmp), py_rate)]
    wanted = args.modes.split(",")
    snapshot_costs = {}
    for key, env, given in [("memory", {}, args.snapshot_cost),
                            ("memory-off", {"DTRUN_SNAPSHOT_ON_FAILURE": "off"}, args.snapshot_cost_off)]:
        if key not in wanted:
            continue
        if given is not None:
            snapshot_costs[key] = given / 100
            continue
        line = cost(b, [], env)
        print(f"train_imagenet's snapshot cost ({key}), uninterrupted 128 steps:", line)
        # The time in the step, the copy's CPU time alongside the next step, and the arming.
        shares = re.findall(r"\(([0-9.]+)%(?: of the step time)?\)", line)
        snapshot_costs[key] = sum(float(x) for x in shares) / 100 if shares else None
    keys = ["memory", "memory-off", "disk", "torchrun", "py-memory", "py-memory-off"]
    keyed = [(m, key) for m, key in zip(modes, keys) if key in wanted]
    for (name, kind, cmd, pure), key in keyed:
        with tempfile.TemporaryDirectory() as tmp:
            result = run(cmd(tmp), kind, tmp, args.window, args.crash_every)
            saving = snapshot_costs.get(key)
            if result["saves_s"]:  # the reference's torch.save, every `every` steps
                saving = statistics.median(result["saves_s"]) / (every / py_rate)
            if key.startswith("py-"):  # dtrun.snapshot's writes and its arming, timed inside the script
                arming = (result["arm_ms"] or 0) / 1000 * py_rate
                saving = sum(result["snapshots_s"]) / args.window + arming
                each_ms = 1e3 * statistics.median(result["snapshots_s"]) if result["snapshots_s"] else float("nan")
                print(f"{name}: {len(result['snapshots_s'])} snapshots in the window, {each_ms:.1f} ms each "
                      f"(median); arming {result['arm_ms']} ms a step ({100 * arming:.2f}%)")
            report(name, result, pure, args.window, args.crash_every, saving)


if __name__ == "__main__":
    main()
