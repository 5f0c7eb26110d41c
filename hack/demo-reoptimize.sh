#!/usr/bin/env bash
# hack/demo-reoptimize.sh - one re-optimization, end to end, in Spark local mode (no cluster).
# Generates a week of synthetic metrics for the example topology (the tasks really recover in
# about half the spec's reprocessingLatency), runs the Spark job, and prints the new estimates,
# the current vs recommended plan, the Monte Carlo failure simulation and the trade-off curve.
# Called by hack/demo.sh; also runs on its own. Env: TOPOLOGY, ROWS, OUT, MASTER.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
PATH="$PWD/$BIN:$PATH"
TOPOLOGY=${TOPOLOGY:-examples/twitter-sentiment.yaml}
ROWS=${ROWS:-100000}
MASTER=${MASTER:-local[*]}
OUT=${OUT:-$(mktemp -d /tmp/backstop-reopt-demo.XXXXXX)}
export PYTHONWARNINGS=ignore::FutureWarning
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "synthetic task and node metrics for $TOPOLOGY ($ROWS rows, Parquet)"
python -m backstop_testkit metrics generate --topology "$TOPOLOGY" --rows "$ROWS" --out "$OUT/metrics"
python - "$OUT/metrics/tasks.parquet" <<'PY'
import sys
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
print(t.slice(0, 3).to_pandas().to_string(index=False))
PY

step "the Spark job ($MASTER): estimates -> re-plan -> Monte Carlo -> trade-off"
COLUMNS=${COLUMNS:-120} backstop reoptimize "$TOPOLOGY" --metrics "$OUT/metrics" --node-cpu 4 \
  --master "$MASTER" --time-limit 1 --out "$OUT/result"

step "the recommendation as the operator stores it ($OUT/result/recommendations.jsonl)"
python - "$OUT/result/recommendations.jsonl" <<'PY'
import json, sys
rec = json.loads(open(sys.argv[1]).readline())
plan = rec["plan"]
print(json.dumps({k: plan[k] for k in ("nodesUsed", "backupCount", "backups",
                  "worstRecoveryLatency", "bound", "boundSatisfied", "moved")}, indent=2))
print("assignment:", ", ".join(f"{t}->{n}" for t, n in plan["assignment"].items()))
PY
echo "(outputs kept in $OUT)"
