#!/usr/bin/env bash
# Training throughput: train_imagenet (C++) vs the Python reference (pytorch/examples main.py
# semantics, ../shared/reference/train_imagenet_ref.py) on the same JPEGs, model (ResNet-18),
# image size (224), batch (32 per process), precision and CPU budget, then ablations of ours.
#   bench/train_bench.sh [BUILD] [ITERS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-$here/../build}")
iters=${2:-8}
ref=$here/../../shared/reference/train_imagenet_ref.py
torchrun="/usr/bin/python3 $here/../../shared/tools/torchrun"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
"$build/bin/dtdata" make-demo "$data" --size 256 --train-per-class 64 --val-per-class 4 >/dev/null
common="-b 32 --warmup-iters 3 --timed-iters $iters"
ips_ours() { grep -o '[0-9.]* images/s' | head -1 | cut -d' ' -f1; }
ips_ref() { grep BENCH | sed 's/.*"img_per_s": \([0-9.]*\).*/\1/' | head -1; }
# ours THREADS [FLAGS...] / theirs THREADS [FLAGS...]: one process.
ours() {
  local t=$1; shift
  OMP_NUM_THREADS=$t "$build/bin/train_imagenet" "$data" $common --output-dir "$(mktemp -d)" --print-freq 1000 \
    --threads "$t" -j "$t" "$@" 2>&1 | ips_ours
}
theirs() {
  local t=$1; shift
  OMP_NUM_THREADS=$t /usr/bin/python3 "$ref" "$data" $common --no-validate --threads "$t" -j "$t" "$@" 2>&1 | ips_ref
}
# Two DDP processes with one compute thread and one loader worker each.
ours_ddp() {
  OMP_NUM_THREADS=1 "$build/bin/dtrun" --standalone --nproc-per-node 2 "$build/bin/train_imagenet" "$data" $common \
    --output-dir "$(mktemp -d)" --print-freq 1000 --threads 1 -j 1 "$@" 2>&1 | ips_ours
}
theirs_ddp() {
  OMP_NUM_THREADS=1 $torchrun --standalone --nproc_per_node 2 --monitor_interval 0.1 "$ref" "$data" $common \
    --no-validate --threads 1 -j 1 "$@" 2>&1 | ips_ref
}
row() { awk -v s="$1" -v a="$2" -v b="$3" 'BEGIN { printf "| %s | %s | %s | %.2fx |\n", s, a, b, a / b }'; }

echo "| setting (same CPU budget) | train_imagenet img/s | reference img/s | ratio |"
echo "|---|---|---|---|"
row "fp32, 1 process, 1 thread, 1 loader worker" "$(ours 1)" "$(theirs 1)"
row "fp32, 1 process, 2 threads, 2 loader workers" "$(ours 2)" "$(theirs 2)"
row "fp32, 2 DDP processes × (1 thread, 1 loader worker)" "$(ours_ddp)" "$(theirs_ddp)"
row "bf16 autocast, 1 process, 1 thread, 1 loader worker" "$(ours 1 --amp bf16)" "$(theirs 1 --amp)"
row "bf16 autocast, 1 process, 2 threads, 2 loader workers" "$(ours 2 --amp bf16)" "$(theirs 2 --amp)"
row "bf16 autocast, 2 DDP processes × (1 thread, 1 loader worker)" "$(ours_ddp --amp bf16)" "$(theirs_ddp --amp)"
echo
echo "Ablations, fp32, 1 process, 1 thread (ours with one feature off; the reference with ours' malloc policy):"
echo "| variant | img/s |"
echo "|---|---|"
echo "| train_imagenet, all on | $(ours 1) |"
echo "| --no-retain-host-memory | $(ours 1 --no-retain-host-memory) |"
echo "| --no-fused-bn | $(ours 1 --no-fused-bn) |"
echo "| --no-channels-last | $(ours 1 --no-channels-last) |"
echo "| reference with MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 | $(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647 theirs 1) |"
echo "| 2 DDP processes, all-reduce overlapped with backward (--overlap on) | $(ours_ddp --overlap on) |"
