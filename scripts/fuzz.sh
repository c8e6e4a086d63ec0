#!/usr/bin/env bash
# Builds the libFuzzer targets in the ASan+UBSan build (build-asan/, shared with
# scripts/sanitizers.sh) and runs each for FUZZ_SECONDS (default 30) from its seed corpus in
# fuzz/corpus/<target>/, as many at once as the machine has cores. A finding fails the script and
# leaves the crashing input in build-asan/findings/.
#   scripts/fuzz.sh                 all targets
#   FUZZ_SECONDS=600 scripts/fuzz.sh store_core_fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(store_core_fuzz error_file_fuzz rendezvous_fuzz decode_fuzz tar_shards_fuzz progress_fuzz status_json_fuzz hostlist_fuzz ratings_fuzz snapshot_fuzz replica_fuzz replica_chunk_fuzz zip_check_fuzz command_line_fuzz)
build=build-asan
scripts/clang-configure.sh asan
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
mkdir -p "$build"/findings "$build"/fuzz-logs

fuzz_one() {
  local t=$1 corpus=$build/corpus/$1
  mkdir -p "$corpus"
  cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  "$build"/bin/"$t" -max_total_time="$SECONDS_EACH" -max_len=16384 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build"/findings/"$t"- "$corpus" >"$build"/fuzz-logs/"$t".log 2>&1 || true
}

# One fuzzer per core: each is a single thread.
cores=$(nproc)
echo "== ${#targets[@]} fuzzers, ${SECONDS_EACH} s each, $cores at a time"
running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$cores" ]; then wait -n; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=0
for t in "${targets[@]}"; do
  echo "== $t"
  grep -E "^(Done [0-9]+ runs|stat::new_units_added|==[0-9]+==ERROR|SUMMARY)" "$build"/fuzz-logs/"$t".log || true
  if ls "$build"/findings/"$t"-* >/dev/null 2>&1; then
    echo "$t: finding(s) in $build/findings/ (reproduce: $build/bin/$t FILE; log: $build/fuzz-logs/$t.log)" >&2
    failed=1
  elif ! grep -qE "^Done [0-9]+ runs" "$build"/fuzz-logs/"$t".log; then
    echo "$t: did not run to its time limit (log: $build/fuzz-logs/$t.log)" >&2
    failed=1
  fi
done
exit "$failed"
