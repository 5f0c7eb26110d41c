#!/usr/bin/env bash
# hack/demo.sh - `make demo`: Backstop end to end on the local control plane and simulated nodes.
# Brings the control plane up (building it on the first run), creates simulated nodes, runs the
# node simulator, and walks through planning a topology. Stops what it started unless KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export BACKSTOP_CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
export KUBECONFIG=$BACKSTOP_CACHE/run/kubeconfig
TOPOLOGY=${TOPOLOGY:-examples/twitter-sentiment.yaml}
NS=${NS:-backstop-demo}
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

started_cluster=0
if ! hack/local-cluster.sh status | grep -q 'kube-apiserver: running'; then
  step "starting the local control plane (first run builds it: ~4-6 min)"
  hack/local-cluster.sh up
  started_cluster=1
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ $started_cluster == 1 && ${KEEP:-0} != 1 ]]; then
    hack/local-cluster.sh down
  elif [[ ${KEEP:-0} == 1 ]]; then
    echo "cluster left running: export KUBECONFIG=$KUBECONFIG ; stop it with: make cluster-down"
  fi
}
trap cleanup EXIT

step "simulated nodes (stand-ins for kubelets): 4 nodes with 2 CPUs in 2 zones"
for i in 0 1 2 3; do
  kubectl get node demo-$i >/dev/null 2>&1 || backstop nodes create 1 --prefix demo --start $i --cpu 2 --zones zone-a,zone-b
done
backstop nodes run --interval 1 >/tmp/backstop-demo-nodesim.log 2>&1 &
pids+=($!)
for _ in $(seq 30); do
  [[ $(kubectl get nodes -l sim.backstop.dev/simulated=true --no-headers | grep -c ' Ready') -ge 4 ]] && break
  sleep 1
done
kubectl get nodes -L topology.kubernetes.io/zone

step "the topology: $TOPOLOGY"
sed -n '/^spec:/,$p' "$TOPOLOGY" | head -20

step "minimum upstream backups for the bound (FTC)"
backstop backups "$TOPOLOGY"

step "the plan against the live nodes: backups + placement, checked per node failure"
kubectl get nodes -o yaml > /tmp/backstop-demo-nodes.yaml
backstop plan "$TOPOLOGY" --nodes /tmp/backstop-demo-nodes.yaml

step "done"
