#!/usr/bin/env bash
# The README's main-job command: install dependencies, build, make a small embedded JPEG dataset
# (10 classes of coloured shapes), and train ResNet-18 on it with 2 DDP processes under dtrun.
# Validation top-1 rises from chance (10%) to well above it within a few minutes on 2 CPU cores;
# then dtplot draws the learning curves and the I/O chart next to the metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
data=${DTRUN_DEMO_DATA:-build/demo-data}
[ -d "$data/train" ] || build/bin/dtdata make-demo "$data"
rm -rf build/runs/main-job
build/bin/dtrun --standalone --nproc-per-node 2 \
  build/bin/train_imagenet "$data" --arch resnet18 --epochs 8 -b 32 --lr 0.02 --warmup-epochs 1 \
  --lr-schedule cosine --image-size 112 -j 1 --print-freq 10 --output-dir build/runs/main-job
echo "metrics: build/runs/main-job/metrics.jsonl; checkpoints: build/runs/main-job/checkpoints/"
# The pictures: learning curves, throughput, data wait vs compute (dtplot prints their paths).
build/bin/dtplot build/runs/main-job
