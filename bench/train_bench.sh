#!/usr/bin/env bash
# Training throughput: train_imagenet (C++) vs the Python reference (pytorch/examples main.py
# semantics, ../shared/reference/train_imagenet_ref.py) on the same JPEGs, model (ResNet-18),
# image size (224), batch (32 per process) and CPU budget.   bench/train_bench.sh [BUILD] [ITERS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-$here/../build}")
iters=${2:-8}
ref=$here/../../shared/reference/train_imagenet_ref.py
torchrun="/usr/bin/python3 $here/../../shared/tools/torchrun"
data=$(mktemp -d)
"$build/bin/dtdata" make-demo "$data" --size 256 --train-per-class 64 --val-per-class 4 >/dev/null
common="-b 32 --warmup-iters 3 --timed-iters $iters"
ours() { "$build/bin/train_imagenet" "$data" $common --output-dir "$(mktemp -d)" --print-freq 1000 "$@" 2>&1 | grep benchmark; }
theirs() { /usr/bin/python3 "$ref" "$data" $common --no-validate "$@" 2>&1 | grep BENCH | sed 's/.*"img_per_s": \([0-9.]*\).*/reference: \1 images\/s (global)/'; }
echo "1 process, 1 compute thread, 1 loader worker:"
OMP_NUM_THREADS=1 ours --threads 1 -j 1
OMP_NUM_THREADS=1 theirs --threads 1 -j 1
echo "1 process, 2 compute threads, 2 loader workers:"
OMP_NUM_THREADS=2 ours --threads 2 -j 2
OMP_NUM_THREADS=2 theirs --threads 2 -j 2
echo "2 DDP processes x 1 compute thread, 1 loader worker each:"
OMP_NUM_THREADS=1 "$build/bin/dtrun" --standalone --nproc-per-node 2 "$build/bin/train_imagenet" "$data" $common \
  --output-dir "$(mktemp -d)" --print-freq 1000 --threads 1 -j 1 2>&1 | grep benchmark
OMP_NUM_THREADS=1 $torchrun --standalone --nproc_per_node 2 --monitor_interval 0.1 "$ref" "$data" $common \
  --no-validate --threads 1 -j 1 2>&1 | grep BENCH | sed 's/.*"img_per_s": \([0-9.]*\).*/reference: \1 images\/s (global)/'
echo "1 process, 2 compute threads, NCHW (no channels-last), 2 loader workers:"
OMP_NUM_THREADS=2 ours --threads 2 -j 2 --no-channels-last
echo "2 DDP processes, all-reduce overlapped with backward (--overlap on):"
OMP_NUM_THREADS=1 "$build/bin/dtrun" --standalone --nproc-per-node 2 "$build/bin/train_imagenet" "$data" $common \
  --output-dir "$(mktemp -d)" --print-freq 1000 --threads 1 -j 1 --overlap on 2>&1 | grep benchmark
rm -rf "$data"
