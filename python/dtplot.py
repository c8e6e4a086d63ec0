#!/usr/bin/python3
"""dtplot: pictures from training runs' metrics.

  dtplot RUN_DIR [RUN_DIR ...] [-o OUT] [--x epoch|time|step] [--labels a,b]
  dtplot --scaling STUDY.json [-o OUT]

A run directory is a trainer's --output-dir: its metrics.jsonl (train_imagenet, train_recsys) or,
failing that, its TensorBoard event files (tb/ or the directory itself, e.g. a PyTorch script's
SummaryWriter). Writes, into OUT (default: the first run directory):
  learning_curves.png  accuracy / RMSE / HR@10, loss and learning rate; several runs overlaid
  throughput.png       samples per second over wall-clock time
  io.png               per step: time waiting for data vs computing
  scaling.png          (--scaling) throughput, scaling efficiency and time to accuracy vs workers
and prints each path. --data-json FILE also writes every plotted series as numbers (for tests and
for anyone who wants the data behind a picture).

matplotlib (Debian's python3-matplotlib) draws: it lays out titles, axis labels and legends
without overlaps (constrained layout) and writes PNGs without a display.
"""
import argparse
import json
import math
import os
import struct
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_VERSION = "0.1.0"  # the project's version: CMake stops when the two differ

MAX_LINE_BYTES = 1 << 16  # a metrics line is a few hundred bytes; longer ones are not ours
MAX_RECORD_BYTES = 1 << 20  # TensorBoard records holding scalars are small


class DtplotError(Exception):
    """Input dtplot cannot draw from; main() prints it in one line and exits 2."""


def fail(message):
    raise DtplotError(message)


# ---------------------------------------------------------------------------------------------
# Reading runs


def read_metrics(path):
    """The JSON objects of a metrics.jsonl; bad lines are counted, never fatal."""
    records, bad = [], 0
    with open(path, "rb") as f:
        for raw in f:
            if len(raw) > MAX_LINE_BYTES:
                bad += 1
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            if isinstance(rec, dict):
                records.append(rec)
            else:
                bad += 1
    if bad:
        print(f"dtplot: {path}: {bad} unreadable line(s) skipped", file=sys.stderr)
    return records


def _varint(buf, pos):
    value, shift = 0, 0
    while pos < len(buf) and shift < 64:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise ValueError("bad varint")


def _fields(buf):
    """(field number, wire type, value) of a protobuf message; raises ValueError on bad input."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ValueError("truncated")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("truncated")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type")
        yield field, wire, value


def read_tensorboard(directory):
    """Scalars of every event file in `directory`: {tag: [(step, wall_time, value)]}."""
    scalars = {}
    for name in sorted(os.listdir(directory)):
        if "tfevents" not in name:
            continue
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            if length > MAX_RECORD_BYTES or pos + 12 + length + 4 > len(data):
                break  # truncated (a run still writing) or not an event file
            event = data[pos + 12:pos + 12 + length]
            pos += 12 + length + 4
            try:
                wall, step, values = 0.0, 0, []
                for field, wire, value in _fields(event):
                    if field == 1 and wire == 1:
                        (wall,) = struct.unpack("<d", value)
                    elif field == 2 and wire == 0:
                        step = value
                    elif field == 5 and wire == 2:
                        for f2, w2, v2 in _fields(value):
                            if f2 == 1 and w2 == 2:
                                tag, simple = None, None
                                for f3, w3, v3 in _fields(v2):
                                    if f3 == 1 and w3 == 2:
                                        tag = v3.decode("utf-8", "replace")
                                    elif f3 == 2 and w3 == 5:
                                        (simple,) = struct.unpack("<f", v3)
                                if tag is not None and simple is not None:
                                    values.append((tag, simple))
                for tag, simple in values:
                    scalars.setdefault(tag, []).append((step, wall, simple))
            except ValueError:
                continue
    return scalars


class Run:
    def __init__(self, directory, label):
        self.directory = directory
        self.label = label
        self.train, self.val, self.scalars, self.starts = [], [], {}, []
        metrics = os.path.join(directory, "metrics.jsonl")
        if os.path.isfile(metrics):
            for rec in read_metrics(metrics):
                kind = rec.get("kind")
                if kind == "train":
                    self.train.append(rec)
                elif kind == "val":
                    self.val.append(rec)
                elif kind == "start":
                    self.starts.append(rec)
        else:
            for d in (os.path.join(directory, "tb"), directory):
                if os.path.isdir(d):
                    self.scalars = read_tensorboard(d)
                    if self.scalars:
                        break
        if not self.train and not self.val and not self.scalars:
            fail(f"{directory}: no metrics.jsonl and no TensorBoard scalars; give a trainer's --output-dir")
        # The wall-clock axis starts when training started (the trainer's "start" record), else
        # at the first record.
        times = [r["time"] for r in self.starts + self.train + self.val if _number(r.get("time"))]
        times += [w for series in self.scalars.values() for _, w, _ in series if w > 0]
        self.t0 = min(times) if times else None


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def x_of(run, rec, axis, end_of_epoch=False):
    """The x value of a record: epochs (fractional), minutes since the run's first record, or steps."""
    if axis == "time":
        return (rec["time"] - run.t0) / 60 if _number(rec.get("time")) and run.t0 is not None else None
    if axis == "step":
        return rec.get("global_step") if _number(rec.get("global_step")) else None
    epoch = rec.get("epoch")
    if not _number(epoch):
        return None
    if end_of_epoch:
        return epoch + 1
    step, per = rec.get("step"), rec.get("steps_per_epoch")
    if _number(step) and _number(per) and per > 0:
        return epoch + step / per
    return epoch + 1


def series(run, kind, key, axis):
    """Sorted (x, y) points; a resumed run's repeated x keeps its latest value."""
    records = run.train if kind == "train" else run.val
    points = {}
    for rec in records:
        x, y = x_of(run, rec, axis, end_of_epoch=kind == "val"), rec.get(key)
        if x is not None and _number(y):
            points[x] = y
    return sorted(points.items())


X_LABELS = {"epoch": "epoch", "time": "wall-clock time (minutes)", "step": "optimizer step"}

# The names dtplot reads beyond PANELS' (train records). worker/metrics_schema.json lists what the
# trainers write; tests/python/dtplot_test.py checks that every name read here is listed there.
POSITION_FIELDS = ("epoch", "step", "steps_per_epoch", "global_step")
RATE_FIELDS = {"img_per_s": "images/s", "samples_per_s": "samples/s"}
IO_FIELDS = ("data_s", "compute_s")

# (title, y label, [(kind, key, series name, line style)]): a panel is drawn when any run has data.
PANELS = [
    ("Top-1 accuracy", "top-1 (%)", [("train", "top1", "train", "--"), ("val", "top1", "val", "-")]),
    ("Top-5 accuracy", "top-5 (%)", [("val", "top5", "val", "-")]),
    ("Test RMSE", "RMSE (stars)", [("train", "rmse", "train", "--"), ("val", "rmse", "test", "-"),
                                   ("val", "constant_rmse", "constant predictor", ":")]),
    ("Ranking: held-out item among sampled ones", "%", [("val", "hr10", "HR@10", "-"),
                                                         ("val", "ndcg10", "NDCG@10", "-."),
                                                         ("val", "random_hr10", "HR@10 at random", ":")]),
    ("Loss", "loss", [("train", "loss", "train", "--"), ("val", "loss", "val", "-")]),
    ("Learning rate", "learning rate", [("train", "lr", "lr", "-")]),
]


def colors(n):
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return [cycle[i % len(cycle)] for i in range(n)]


def legend(ax, entries):
    """Inside the axes when short; beside them when long enough to cover the lines."""
    if entries > 3:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize="small")


def grid(panels):
    cols = 2 if panels > 1 else 1
    rows = (panels + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 4.0 * rows), layout="constrained", squeeze=False)
    flat = [a for row in axes for a in row]
    for extra in flat[panels:]:
        extra.set_visible(False)
    return fig, flat


def learning_curves(runs, axis, out, data):
    plan = []
    for title, ylabel, specs in PANELS:
        lines = []
        for run, color in zip(runs, colors(len(runs))):
            for kind, key, name, style in specs:
                pts = series(run, kind, key, axis)
                if pts:
                    label = name if len(runs) == 1 else f"{run.label} {name}"
                    lines.append((label, color, style, pts, kind == "val"))
        if lines:
            plan.append((title, ylabel, lines))
    # TensorBoard-only runs: every scalar tag is a panel, against the step.
    tags = sorted({t for run in runs for t in run.scalars})
    for tag in tags:
        lines = []
        for run, color in zip(runs, colors(len(runs))):
            pts = sorted({s: v for s, _, v in run.scalars.get(tag, [])}.items())
            if pts:
                lines.append((run.label, color, "-", pts, len(pts) < 30))
        plan.append((tag, tag.split("/")[-1], lines))
    if not plan:
        return None
    fig, axes = grid(len(plan))
    fig.suptitle("Learning curves: " + ", ".join(r.label for r in runs))
    figure_data = data.setdefault("learning_curves", {})
    for ax, (title, ylabel, lines) in zip(axes, plan):
        panel = figure_data.setdefault(title, {})
        for label, color, style, pts, markers in lines:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, style, color=color, label=label, marker="o" if markers else None, markersize=3)
            panel[label] = [list(p) for p in pts]
        ax.set_title(title)
        ax.set_xlabel(X_LABELS[axis] if title in {p[0] for p in PANELS} else "step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        legend(ax, len(lines))
    path = os.path.join(out, "learning_curves.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def rate_key(run):
    images, samples = RATE_FIELDS
    return images if any(images in r for r in run.train) else samples


def throughput(runs, out, data):
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    figure_data = data.setdefault("throughput", {})
    units = set()
    for run, color in zip(runs, colors(len(runs))):
        key = rate_key(run)
        pts = series(run, "train", key, "time")
        if not pts:
            continue
        units.add(RATE_FIELDS[key])
        xs, ys = zip(*pts)
        ax.plot(xs, ys, "-", color=color, label=run.label, marker="o", markersize=2)
        figure_data[run.label] = [list(p) for p in pts]
    if not figure_data:
        plt.close(fig)
        return None
    unit = " or ".join(sorted(units))
    ax.set_title(f"Training throughput (all processes, {unit})")
    ax.set_xlabel(X_LABELS["time"])
    ax.set_ylabel(unit)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    path = os.path.join(out, "throughput.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def io_chart(runs, out, data):
    """Per logging window: seconds per step waiting for the loader vs computing, stacked."""
    per_run = []
    for run in runs:
        prev, pts = None, []
        for rec in sorted(run.train, key=lambda r: r.get("global_step", 0)):
            gs = rec.get("global_step")
            data_s, compute_s = (rec.get(name) for name in IO_FIELDS)
            if not (_number(gs) and _number(data_s) and _number(compute_s)):
                continue
            steps = gs - prev if prev is not None and gs > prev else rec.get("step", gs) or 1
            prev = gs
            if steps <= 0:
                continue
            pts.append((gs, 1000 * data_s / steps, 1000 * compute_s / steps))
        if pts:
            per_run.append((run, pts))
    if not per_run:
        return None
    fig, axes = plt.subplots(len(per_run), 1, figsize=(8, 3.2 * len(per_run)), layout="constrained", squeeze=False)
    figure_data = data.setdefault("io", {})
    for ax, (run, pts) in zip([a[0] for a in axes], per_run):
        xs = [p[0] for p in pts]
        data_ms = [p[1] for p in pts]
        compute_ms = [p[2] for p in pts]
        ax.stackplot(xs, compute_ms, data_ms, labels=["compute", "waiting for data"], colors=["#4c72b0", "#dd8452"],
                     alpha=0.85)
        share = 100 * sum(data_ms) / max(1e-9, sum(data_ms) + sum(compute_ms))
        ax.set_title(f"{run.label}: time per step (data wait {share:.1f}% of the total)")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("milliseconds per step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper right")
        figure_data[run.label] = {"step": xs, "data_ms": data_ms, "compute_ms": compute_ms}
    path = os.path.join(out, "io.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def scaling_chart(study_path, out, data):
    with open(study_path) as f:
        study = json.load(f)
    points = [p for p in study.get("runs", []) if _number(p.get("workers")) and _number(p.get("images_per_s"))]
    if not points:
        fail(f"{study_path}: no runs with workers and images_per_s; give a scaling study's results (bench/scaling_study.py)")
    base = min(points, key=lambda p: p["workers"])
    per_worker = base["images_per_s"] / base["workers"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    figure_data = data.setdefault("scaling", {})
    groups = {}
    for p in points:
        groups.setdefault(p.get("layout", "one node"), []).append(p)
    for (layout, pts), color in zip(sorted(groups.items()), colors(len(groups))):
        pts.sort(key=lambda p: p["workers"])
        w = [p["workers"] for p in pts]
        ips = [p["images_per_s"] for p in pts]
        eff = [100 * p["images_per_s"] / (p["workers"] * per_worker) for p in pts]
        axes[0].plot(w, ips, "-o", color=color, label=layout)
        axes[1].plot(w, eff, "-o", color=color, label=layout)
        tta = [(p["workers"], p["time_to_target_s"]) for p in pts if _number(p.get("time_to_target_s"))]
        if tta:
            axes[2].plot([t[0] for t in tta], [t[1] for t in tta], "-o", color=color, label=layout)
        figure_data[layout] = {"workers": w, "images_per_s": ips, "efficiency_pct": eff,
                               "time_to_target_s": [t[1] for t in tta]}
    most = max(p["workers"] for p in points)
    axes[0].plot([1, most], [per_worker, per_worker * most], ":", color="gray", label="linear (from 1 worker)")
    axes[0].set_title("Training throughput")
    axes[0].set_ylabel("images/s (all workers)")
    axes[1].axhline(100, linestyle=":", color="gray")
    axes[1].set_title("Scaling efficiency")
    axes[1].set_ylabel("% of linear")
    axes[1].set_ylim(0, 110)
    target = study.get("target_top1")
    axes[2].set_title(f"Time to {target}% val top-1" if target else "Time to target accuracy")
    axes[2].set_ylabel("seconds")
    for ax in axes:
        ax.set_xlabel("workers (processes)")
        ax.set_xticks(sorted({p["workers"] for p in points}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        ax.set_ylim(bottom=0)
    if study.get("title"):
        fig.suptitle(study["title"])
    path = os.path.join(out, "scaling.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    try:
        return _main(argv)
    except DtplotError as e:
        print(f"dtplot: error: {e}", file=sys.stderr)
        return 2


def _main(argv):
    parser = argparse.ArgumentParser(prog="dtplot", description="PNG charts from training runs' metrics")
    parser.add_argument("--version", action="version", version="dtplot " + _VERSION)
    parser.add_argument("runs", nargs="*", help="run directories (a trainer's --output-dir)")
    parser.add_argument("-o", "--out", help="where the PNGs go (default: the first run directory)")
    parser.add_argument("--x", choices=["epoch", "time", "step"], default="epoch", help="x axis of learning curves")
    parser.add_argument("--labels", help="comma-separated names for the runs (default: directory names)")
    parser.add_argument("--scaling", help="a scaling study's results JSON (bench/scaling_study.py)")
    parser.add_argument("--data-json", help="also write the plotted series here")
    args = parser.parse_args(argv)
    if not args.runs and not args.scaling:
        parser.error("give run directories and/or --scaling STUDY.json")
    labels = args.labels.split(",") if args.labels else []
    if labels and len(labels) != len(args.runs):
        parser.error(f"--labels has {len(labels)} names for {len(args.runs)} runs")
    for d in args.runs:
        if not os.path.isdir(d):
            fail(f"{d}: not a directory; give a trainer's --output-dir")
    runs = [Run(d, labels[i] if labels else os.path.basename(os.path.normpath(d)) or d)
            for i, d in enumerate(args.runs)]
    out = args.out or (args.runs[0] if args.runs else os.path.dirname(os.path.abspath(args.scaling)))
    os.makedirs(out, exist_ok=True)
    data = {}
    written = []
    if runs:
        written += [learning_curves(runs, args.x, out, data), throughput(runs, out, data), io_chart(runs, out, data)]
    if args.scaling:
        written.append(scaling_chart(args.scaling, out, data))
    for path in written:
        if path:
            print(path)
    if args.data_json:
        with open(args.data_json, "w") as f:
            json.dump(data, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
