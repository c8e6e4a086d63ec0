#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 30) from its seed corpus in fuzz/corpus/<target>/. A finding fails the
# script and leaves the crashing input in build-fuzz/findings/.
#   scripts/fuzz.sh                 all targets
#   FUZZ_SECONDS=600 scripts/fuzz.sh store_core_fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(store_core_fuzz error_file_fuzz rendezvous_fuzz decode_fuzz tar_shards_fuzz progress_fuzz status_json_fuzz hostlist_fuzz ratings_fuzz snapshot_fuzz replica_fuzz)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRUN_WITH_TORCH=OFF \
  -DDTRUN_WITH_TESTS=OFF -DDTRUN_FUZZ=ON -DDTRUN_SANITIZE=address,undefined -DDTRUN_WERROR=ON >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
mkdir -p build-fuzz/findings
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "== $t: ${SECONDS_EACH} s"
  build-fuzz/bin/"$t" -max_total_time="$SECONDS_EACH" -max_len=16384 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/findings/"$t"- "$corpus" 2>&1 | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)" || true
  if ls build-fuzz/findings/"$t"-* >/dev/null 2>&1; then
    echo "$t: finding(s) in build-fuzz/findings/ (reproduce: build-fuzz/bin/$t FILE)" >&2
    exit 1
  fi
done
