#!/usr/bin/env python3
"""Where a training step's time goes on the GPU, from PyTorch profiler (Kineto) Chrome traces:
train_imagenet --profile-steps and bench/gpu/train_ref_gpu.py --profile-steps write them.

  trace_summary.py --steps N NAME=TRACE.json[.gz] ... [--json OUT]

Per trace and per step: the GPU's busy time (the union of its kernels and copies) against the
span from the first to the last of them, so the rest is idle GPU (launch gaps, host syncs, a
starved input); kernel and copy counts; the CUDA runtime calls that launch work or wait for the
GPU; the kernels that take the time, grouped by kind and by name. One table side by side last.
"""
import argparse
import collections
import gzip
import json
import re
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
            "cudaMemcpyAsync", "cudaMemsetAsync")
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
# Allocations that bypass the caching allocators (a library's own, nvJPEG's by default): cudaFree
# and cudaFreeHost wait for the whole device.
ALLOCS = ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaMallocHost", "cudaFreeHost")
KINDS = [  # (kind, pattern on the kernel's name), first match wins
    ("optimizer/scaler", r"multi_tensor|fused_sgd|foreach|_amp_|amp_update|non_finite"),
    ("batch norm", r"batch_?norm|bn_fw|bn_bw|welford|BatchNorm"),
    ("convolution", r"conv|cudnn|xmma|implicit_gemm|fprop|dgrad|wgrad|nhwc|cutlass|sm\d\d_"),
    ("matmul", r"gemm|gemv|cublas|Gemm"),
    ("reduction", r"reduce|Reduce|softmax|nll|cross_entropy|argmax|topk"),
    ("elementwise", r"elementwise|vectorized|unrolled|Elementwise|copy|fill"),
]


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def short(name):
    name = re.sub(r"^void ", "", name)
    for cut in ("(", "<"):
        i = name.find(cut)
        if i > 0:
            name = name[:i]
    return name[:70]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return "other"


def summarize(events, steps):
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS and "dur" in e]
    runtime = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    if not gpu:
        return {"error": "no GPU activity in the trace"}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e) for e in gpu)
    start, end = spans[0][0], max(s[1] for s in spans)
    busy, cur_s, cur_e, gaps = 0.0, spans[0][0], spans[0][1], []
    for s, e, ev in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            gaps.append(s - cur_e)
            cur_s = s
        cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = end - start
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    by_name = collections.defaultdict(lambda: [0, 0.0])
    by_kind = collections.defaultdict(float)
    for e in kernels:
        by_name[short(e["name"])][0] += 1
        by_name[short(e["name"])][1] += float(e["dur"])
        by_kind[kind_of(e["name"])] += float(e["dur"])
    copies = collections.defaultdict(lambda: [0, 0.0])
    for e in gpu:
        if e["cat"] != "kernel":
            copies[e["name"][:40]][0] += 1
            copies[e["name"][:40]][1] += float(e["dur"])
    calls = collections.Counter(e["name"] for e in runtime)
    wait_us = sum(float(e["dur"]) for e in runtime if e["name"] in WAITS)
    kernel_us = sum(float(e["dur"]) for e in kernels)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:12]
    per = float(steps)
    return {
        "steps": steps,
        "span_ms_per_step": span / per / 1e3,
        "gpu_busy_ms_per_step": busy / per / 1e3,
        "gpu_idle_ms_per_step": (span - busy) / per / 1e3,
        "gpu_busy_share": busy / span if span else 0,
        "kernels_per_step": len(kernels) / per,
        "kernel_ms_per_step": kernel_us / per / 1e3,
        "gaps_over_10us_per_step": sum(1 for g in gaps if g > 10) / per,
        "largest_gaps_ms": [round(g / 1e3, 3) for g in sorted(gaps, reverse=True)[:5]],
        "launch_calls_per_step": {k: calls[k] / per for k in LAUNCHES if calls[k]},
        "wait_calls_per_step": {k: calls[k] / per for k in WAITS if calls[k]},
        "alloc_calls_per_step": {k: calls[k] / per for k in ALLOCS if calls[k]},
        "host_wait_ms_per_step": wait_us / per / 1e3,
        "aten_ops_per_step": len(ops) / per,
        "copies_per_step": {k: {"count": v[0] / per, "ms": v[1] / per / 1e3} for k, v in copies.items()},
        "kernel_ms_per_step_by_kind": {k: v / per / 1e3 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": n, "per_step": c / per, "ms_per_step": us / per / 1e3,
                         "share": us / kernel_us if kernel_us else 0} for n, (c, us) in top],
    }


def print_one(name, s):
    print(f"== {name}")
    if "error" in s:
        print("   " + s["error"])
        return
    print(f"   per step: span {s['span_ms_per_step']:.2f} ms, GPU busy {s['gpu_busy_ms_per_step']:.2f} ms "
          f"({100 * s['gpu_busy_share']:.1f}%), idle {s['gpu_idle_ms_per_step']:.2f} ms in "
          f"{s['gaps_over_10us_per_step']:.1f} gaps > 10 us (largest {s['largest_gaps_ms']} ms)")
    print(f"   kernels {s['kernels_per_step']:.0f}/step ({s['kernel_ms_per_step']:.2f} ms); ATen ops "
          f"{s['aten_ops_per_step']:.0f}/step; launches {s['launch_calls_per_step']}")
    print(f"   host waits {s['wait_calls_per_step']} = {s['host_wait_ms_per_step']:.2f} ms/step; "
          f"raw allocations {s['alloc_calls_per_step']}; copies "
          + ", ".join(f"{k} x{v['count']:.1f} {v['ms']:.3f} ms" for k, v in s["copies_per_step"].items()))
    print("   by kind (ms/step): " + ", ".join(f"{k} {v:.2f}" for k, v in s["kernel_ms_per_step_by_kind"].items()))
    for k in s["top_kernels"]:
        print(f"     {k['ms_per_step']:7.2f} ms {100 * k['share']:5.1f}%  x{k['per_step']:<5.0f} {k['name']}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True, help="steps in each trace")
    p.add_argument("--json", default="")
    p.add_argument("traces", nargs="+", help="NAME=PATH")
    args = p.parse_args()
    out = {}
    for spec in args.traces:
        name, _, path = spec.partition("=")
        try:
            out[name] = summarize(load(path), args.steps)
        except (OSError, ValueError, KeyError) as e:
            out[name] = {"error": f"{path}: {e}"}
        print_one(name, out[name])
    rows = [("span ms/step", "span_ms_per_step"), ("GPU busy ms/step", "gpu_busy_ms_per_step"),
            ("GPU idle ms/step", "gpu_idle_ms_per_step"), ("kernels/step", "kernels_per_step"),
            ("host wait ms/step", "host_wait_ms_per_step"), ("ATen ops/step", "aten_ops_per_step")]
    names = [n for n in out if "error" not in out[n]]
    if names:
        print("\n| per step | " + " | ".join(names) + " |")
        print("|---|" + "---|" * len(names))
        for label, key in rows:
            print(f"| {label} | " + " | ".join(f"{out[n][key]:.2f}" for n in names) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if names else 1


if __name__ == "__main__":
    sys.exit(main())
