#!/usr/bin/env bash
# Hang detection latency vs the configured timeout: a 2-rank gloo job whose rank 1 blocks before
# its all_reduce (tests/integration/workers/hang_in_step.py), REPEATS runs per timeout. From each
# run's event log: how far past the timeout the hang was declared (stuck_ms - limit_ms), and the
# time from the hang record (stacks collected, culprit named) to the restarted round's start.
#   bench/hang_latency.sh            (REPEATS=3, TIMEOUTS="1 2 5")
set -euo pipefail
cd "$(dirname "$0")/.."
REPEATS=${REPEATS:-3}
TIMEOUTS=${TIMEOUTS:-"1 2 5"}
PY=${PYTHON_EXEC:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p')"
for t in $TIMEOUTS; do
  for r in $(seq "$REPEATS"); do
    ev=$tmp/ev_${t}_$r.jsonl
    HANG_RANK=1 PYTHON_EXEC=$PY build/bin/dtrun --standalone --nproc-per-node 2 --max-restarts 1 \
      --heartbeat-timeout "$t" --event-log "$ev" tests/integration/workers/hang_in_step.py >/dev/null 2>&1
    "$PY" - "$ev" "$t" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
hang = next(e for e in ev if e["event"] == "hang")
restart = next(e for e in ev if e["event"] == "round_start" and e["round"] == 1)
print("timeout %4s s: declared %4d ms past the timeout; hang record -> restarted round %4d ms; culprit rank %d"
      % (sys.argv[2], hang["stuck_ms"] - hang["limit_ms"], restart["ts_ms"] - hang["ts_ms"], hang["rank"]))
PY
  done
done
