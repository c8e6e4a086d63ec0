#!/usr/bin/env bash
# The README's main-job command: install what it needs, build what it runs, make a small embedded
# JPEG dataset (10 classes of coloured shapes), and train ResNet-18 on it with 2 DDP processes
# under dtrun. Validation top-1 rises from chance (10%) to well above it within a few minutes on 2
# CPU cores; then dtplot draws the learning curves and the I/O chart next to the metrics, and the
# time each phase took is printed. (The test command, scripts/test.sh, installs and builds the rest.)
set -euo pipefail
cd "$(dirname "$0")/.."
phases=()
last=$(date +%s%3N)  # milliseconds
seconds() { printf '%d.%d s' $(($1 / 1000)) $(($1 % 1000 / 100)); }
phase() {  # records the time since the last phase ended under the name $1
  local now; now=$(date +%s%3N)
  phases+=("$(printf '%-40s %s' "$1" "$(seconds $((now - last)))")")
  last=$now
}
start=$last
scripts/install-deps.sh main
phase "dependencies (apt)"
# dtrun's gRPC module comes with it (multi-node jobs load it); the tests, benchmarks, fuzzers and
# train_recsys are left to the test command.
scripts/build.sh dtrun dtdata train_imagenet dtplot
phase "build (dtrun, dtdata, train_imagenet)"
data=${DTRUN_DEMO_DATA:-build/demo-data}
[ -d "$data/train" ] || build/bin/dtdata make-demo "$data"
phase "dataset"
rm -rf build/runs/main-job
build/bin/dtrun --standalone --nproc-per-node 2 \
  build/bin/train_imagenet "$data" --arch resnet18 --epochs 8 -b 32 --lr 0.02 --warmup-epochs 1 \
  --lr-schedule cosine --image-size 96 -j 1 --print-freq 10 --output-dir build/runs/main-job
phase "training (2 DDP processes, 8 epochs)"
echo "metrics: build/runs/main-job/metrics.jsonl; checkpoints: build/runs/main-job/checkpoints/"
# The pictures: learning curves, throughput, data wait vs compute (dtplot prints their paths).
build/bin/dtplot build/runs/main-job
phase "pictures (dtplot)"
echo
echo "main job: the time of each phase"
printf '  %s\n' "${phases[@]}"
printf '  %-40s %s\n' "total" "$(seconds $((last - start)))"
