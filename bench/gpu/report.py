#!/usr/bin/env python3
"""Turns scripts/gpu-check.sh's step records into report.json and report.txt (markdown tables
ready for docs/BENCHMARKS.md).  report.py RESULTS_JSONL WORK_DIR OUT_DIR BATCH"""
import json
import os
import re
import sys

results_path, work, out, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
steps = [json.loads(line) for line in open(results_path) if line.strip()]
by_name = {s["step"]: s for s in steps}


def text(name):
    path = os.path.join(work, name)
    return open(path).read() if os.path.exists(path) else ""


def ips(name):
    s = by_name.get(name)
    return s["result"].get("images_per_s") if s and s["rc"] == 0 else None


def wait_ms(name):
    s = by_name.get(name)
    w = s["result"].get("data_wait_s_per_step") if s and s["rc"] == 0 else None
    return None if w is None else w * 1000


def fmt(v, spec=".0f"):
    return "—" if v is None else format(v, spec)


def ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}x"


env = text("env.txt").strip().splitlines()
launch = [json.loads(l[7:]) for l in text("launch.txt").splitlines() if l.startswith("LAUNCH ")]
decode = re.search(r"images_per_s=([0-9.]+) per_thread=([0-9.]+)", text("decode.txt"))
decode1 = re.search(r"images_per_s=([0-9.]+)", text("decode1.txt"))
# A loader thread's own time per image (dtdata bench since b288bdd): what one core delivers.
loader_ms = re.search(r"loader_ms_per_image=([0-9.]+)", text("decode1.txt"))
restart = re.findall(r"(dtrun|torchrun)\s+nproc=\d+ restarts=\d+: rank0 replaced median\s+([0-9.]+) ms; "
                     r"whole group restarted median\s+([0-9.]+) ms", text("restart.txt"))
report = {"machine": env, "batch": batch, "steps": steps, "launch": launch,
          "decode_16_threads_images_per_s": float(decode.group(1)) if decode else None,
          "decode_1_thread_images_per_s": float(decode1.group(1)) if decode1 else None,
          "loader_ms_per_image": float(loader_ms.group(1)) if loader_ms else None,
          "restart": {k: {"rank0_ms": float(a), "group_ms": float(b)} for k, a, b in restart}}
json.dump(report, open(os.path.join(out, "report.json"), "w"), indent=1)

L = [f"# gpu-check report", "", "Machine: " + " | ".join(env), ""]
L += ["## Steps", "", "| step | result | seconds |", "|---|---|---|"]
for s in steps:
    rc = s["rc"]
    L.append(f"| {s['step']} | {'ok' if rc == 0 else rc if rc == 'skipped' else f'FAILED (rc {rc})'} | {s['seconds']} |")
L += ["", f"## ResNet-50 training, 224 px, channels-last, batch {batch}, one GPU (images/s after warm-up)", "",
      "| input | AMP | train_imagenet (C++) | Python reference | ratio | loader wait/step ours / ref (ms) |",
      "|---|---|---|---|---|---|"]
for amp in ("fp16", "bf16"):
    b = ips(f"ref_synthetic_{amp}")
    for suffix, label in (("", "captured step (CUDA graph)"), ("_nograph", "kernel by kernel (--no-cuda-graphs)"),
                          ("_cudnnbn", "captured, cuDNN's fused BN+add+ReLU (--cudnn-bn-relu)")):
        a = ips(f"ours_synthetic_{amp}{suffix}")
        if a is None and suffix == "_cudnnbn":
            continue
        L.append(f"| synthetic, ours {label} | {amp} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | "
                 f"{fmt(wait_ms(f'ours_synthetic_{amp}{suffix}'), '.1f')} / {fmt(wait_ms(f'ref_synthetic_{amp}'), '.1f')} |")
a, b = ips("ours_jpeg_fp16_j16"), ips("ref_jpeg_fp16_w16")
L.append(f"| JPEG 500x375, 16 loader threads / workers | fp16 | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | "
         f"{fmt(wait_ms('ours_jpeg_fp16_j16'), '.1f')} / {fmt(wait_ms('ref_jpeg_fp16_w16'), '.1f')} |")
c = ips("ref_compiled_synthetic_fp16")
if c is not None:
    L.append(f"| synthetic, torch.compile'd Python | fp16 | {fmt(ips('ours_synthetic_fp16'))} | {fmt(c)} | "
             f"{ratio(ips('ours_synthetic_fp16'), c)} | |")
def result(name, key):
    st = by_name.get(name)
    return st["result"].get(key) if st and st["rc"] == 0 else None


jpeg_rows = [("ref_jpeg_fp16_w16", "Python reference, DataLoader, 16 workers")]
jpeg_rows += [(f"ours_jpeg_fp16_j{j}", f"ours, decoded by {j} loader threads") for j in (16, 8, 6)]
jpeg_rows += [(f"ours_jpeg_fp16_j{j}_gpudec", f"ours, nvJPEG on the GPU (--gpu-decode), {j} loader threads")
              for j in (6, 4, 2)]
if any(ips(n) is not None for n, _ in jpeg_rows):
    ref = ips("ref_jpeg_fp16_w16")
    L += ["", "## Feeding it: real JPEGs (500x375), fp16, ResNet-50", "",
          "| input pipeline | images/s | vs reference | CPU cores busy | loader wait/step (ms) | JPEGs on GPU / host "
          "(GPU's share at the end) | decode ms/image: GPU stream, one loader thread |",
          "|---|---|---|---|---|---|---|"]
    for name, label in jpeg_rows:
        if name not in by_name:
            continue
        gpu, host = result(name, "gpu_decoded_jpegs"), result(name, "host_decoded_jpegs")
        share = result(name, "gpu_decode_share")
        split = f"{gpu} / {host} ({100 * share:.0f}%)" if gpu else ""
        gpu_ms, loader_ms = result(name, "gpu_decode_ms_per_image"), result(name, "loader_decode_ms_per_image")
        per_image = f"{fmt(gpu_ms, '.3f')}, {fmt(loader_ms, '.2f')}" if gpu_ms else ""
        L.append(f"| {label} | {fmt(ips(name))} | {ratio(ips(name), ref)} | {fmt(result(name, 'cpu_cores_busy'), '.1f')} | "
                 f"{fmt(wait_ms(name), '.1f')} | {split} | {per_image} |")


def first_step(name):
    st = by_name.get(name)
    return st["result"].get("first_step_s") if st and st["rc"] == 0 else None


for amp in ("fp16", "bf16"):
    a, b = first_step(f"ours_synthetic_{amp}"), first_step(f"ref_synthetic_{amp}")
    if a is not None or b is not None:
        L += ["", f"Time to the first step done (cold start, synthetic {amp}; from the program's start, Python from "
                  f"before `import torch`): ours {fmt(a, '.2f')} s, reference {fmt(b, '.2f')} s."]
if decode:
    L += ["", f"Loader capacity (dtdata bench, decode + RandomResizedCrop to 224, 16 threads): "
              f"{float(decode.group(1)):.0f} images/s ({float(decode.group(2)):.0f} per thread)" +
              (f"; one thread alone: {float(decode1.group(1)):.0f} images/s." if decode1 else ".")]
if loader_ms and float(loader_ms.group(1)) > 0:
    per_core = 1000 / float(loader_ms.group(1))
    synthetic = ips("ours_synthetic_fp16")
    L += ["", f"A loader thread's own time: {float(loader_ms.group(1)):.2f} ms an image, {per_core:.0f} images/s "
              "on a core of its own" + (f"; the captured fp16 step's {synthetic:.0f} images/s need "
                                        f"{synthetic / per_core:.1f} such cores." if synthetic else ".")]
bw = by_name.get("allreduce_bw")
if bw:
    r = bw["result"]
    L += ["", f"NCCL all_reduce of {r['mb']} MiB: {r['ms']} ms, algorithm bandwidth {r['algbw_gbps']} GB/s."]
if launch:
    L += ["", "## Launch to exit (median)", "", "| workload | nproc | dtrun (ms) | torchrun (ms) | torchrun / dtrun |",
          "|---|---|---|---|---|"]
    for r in launch:
        L.append(f"| {r['workload']} | {r['nproc']} | {r['dtrun_ms']:.0f} | {r['torchrun_ms']:.0f} | "
                 f"{r['torchrun_ms'] / r['dtrun_ms']:.1f}x |")
if restart:
    L += ["", "## Restart (4 workers, 10 restarts, median ms from the failing exit)", "",
          "| launcher | rank 0 replaced | whole group restarted |", "|---|---|---|"]
    for k, a, b in restart:
        L.append(f"| {k} | {a} | {b} |")
profile = os.path.join(out, "profile.txt")
if os.path.exists(profile):
    L += ["", "## Where a step's time goes (bench/gpu/trace_summary.py, 10 traced steps, fp16)", "", "```"]
    L += open(profile).read().rstrip().splitlines() + ["```"]
open(os.path.join(out, "report.txt"), "w").write("\n".join(L) + "\n")
