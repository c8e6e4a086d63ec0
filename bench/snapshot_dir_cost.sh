#!/bin/bash
# What --snapshot-dir-every's copies cost training: train_imagenet --synthetic, 2 ranks, 2 epochs,
# alternating no --snapshot-dir and copies every 5 s, twice; prints epoch 1's mean images/s on rank 0.
#   bench/snapshot_dir_cost.sh [BUILD_DIR]
B=${1:-build}/bin
for round in 1 2; do
  for mode in off every5; do
    rm -rf /var/tmp/cc /tmp/cco
    if [ $mode = off ]; then extra=""; else extra="--snapshot-dir /var/tmp/cc --snapshot-dir-every 5"; fi
    $B/dtrun --standalone --nproc-per-node 2 $extra $B/train_imagenet --synthetic --output-dir /tmp/cco --epochs 2 -p 1 > /tmp/cc_${mode}_${round}.log 2>&1
    ips=$(grep "^\[default0\]:Epoch: \[1\]" /tmp/cc_${mode}_${round}.log | sed 's/.*img\/s \([0-9.]*\).*/\1/' | awk '{s+=$1;n++} END {printf "%.1f", s/n}')
    echo "round $round $mode: epoch 1 mean img/s $ips"
  done
done
