#!/usr/bin/env bash
# Launch-to-exit time and launcher peak RSS, dtrun vs torchrun, side by side in one run.
#   bench/launch_bench.sh [BUILD_DIR]      (needs hyperfine: apt-get install hyperfine)
# Rows: a no-op binary (/bin/true) and a Python gloo init + barrier worker, 1/2/4 processes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-$here/../build}")
dtrun=$build/bin/dtrun
torchrun="/usr/bin/python3 $here/../../shared/tools/torchrun"
py=/usr/bin/python3
gloo=$here/../tests/integration/workers/gloo_allreduce.py
export OMP_NUM_THREADS=1 PYTHON_EXEC=$py
out=$(mktemp -d)

echo "## dtrun --help (hyperfine, mean ± σ): the start-up alone (libraries, static initialisers, parsing)"
hyperfine -N --warmup 5 --runs 100 -n "dtrun --help" "$dtrun --help" 2>/dev/null | grep -E "Time \(mean"

echo "## launch-to-exit (hyperfine, mean ± σ)"
for n in 1 2 4; do
  hyperfine -N --warmup 3 --runs 30 --export-json "$out/noop$n.json" \
    -n "dtrun noop x$n" "$dtrun --standalone --nproc-per-node $n /bin/true" >/dev/null
  hyperfine -N --warmup 1 --runs 5 --export-json "$out/noop_t$n.json" \
    -n "torchrun noop x$n" "$torchrun --standalone --nproc_per_node $n --monitor_interval 0.1 --no_python /bin/true" >/dev/null
  hyperfine -N --warmup 1 --runs 5 --export-json "$out/gloo$n.json" \
    -n "dtrun gloo x$n" "$dtrun --standalone --nproc-per-node $n $gloo" >/dev/null
  hyperfine -N --warmup 1 --runs 5 --export-json "$out/gloo_t$n.json" \
    -n "torchrun gloo x$n" "$torchrun --standalone --nproc_per_node $n --monitor_interval 0.1 $gloo" >/dev/null
done
$py - "$out" <<'PY'
import json, sys, os
d = sys.argv[1]
def m(name):
    r = json.load(open(os.path.join(d, name + ".json")))["results"][0]
    return r["mean"] * 1000, r["stddev"] * 1000
print(f"| workload | nproc | dtrun (ms) | torchrun (ms) | torchrun / dtrun |")
print(f"|---|---|---|---|---|")
for kind, label in (("noop", "no-op binary"), ("gloo", "Python gloo init + all_reduce + barrier")):
    for n in (1, 2, 4):
        a, sa = m(f"{kind}{n}"); b, sb = m(f"{kind}_t{n}")
        print(f"| {label} | {n} | {a:.1f} ± {sa:.1f} | {b:.0f} ± {sb:.0f} | {b / a:.1f}x |")
PY

echo
echo "## launcher peak RSS (VmHWM of the launcher process itself)"
$py "$here/launcher_rss.py" "$build"
rm -rf "$out"
