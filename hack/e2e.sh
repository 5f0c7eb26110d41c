#!/usr/bin/env bash
# hack/e2e.sh - Backstop end to end on REAL nodes, the operator installed by Helm (`make e2e`).
#
#   images     hack/images.sh: base (debootstrap), operator and task-runtime images, built here
#   cluster    its own control plane (hack/local-cluster.sh, own ports and run dir) with
#              $E2E_NODES real nodes (kubelet + containerd each, hack/real-node.sh) and kube-proxy
#   install    helm install charts/backstop: the operator Deployment runs on a real node, on the
#              chart's ServiceAccount and RBAC, watching only the e2e namespace
#   admission  kubectl apply of a bad manifest (an unknown input) is refused by the operator's
#              validating webhook, served in-cluster behind the chart's Service, in one line
#   apply      kubectl apply -f examples/twitter-sentiment.yaml with spec.replication ($E2E_SPARE_CPU
#              of active replicas): every task pod and every replica's pod Running in a real
#              container (a containerd container ID) on a real node; no operator on the host.
#              Its store is the cluster's object store (SeaweedFS beside the nodes, S3 API, the
#              Secret backstop-object-store); the example's tweet generator writes the source
#              log into its bucket while the run lasts, and no task pod mounts a host directory
#   logs       kubectl logs of a task pod on every real node that runs tasks
#   upgrade    with the topology running: an older CRD (a printer column removed), helm upgrade
#              with a changed pod template: the pre-upgrade Job applies the image's CRDs (helm
#              never upgrades crds/), the column is back, the hook is gone; the operator's
#              replicas are replaced, a new one leads, the topology stays Ready and no task pod
#              is restarted or replaced (same uids, same restart counts)
#   kill       `python -m backstop_testkit nodes kill` (the test kit's CLI) of a real node with a
#              replicated primary (not the leading operator's): its kubelet and containers get
#              SIGKILL; each lost replicated primary's replica is promoted in place (named in
#              status.plan.promoted, the same pod uid, labelled primary: the chart's RBAC lets the
#              operator patch it), a RecoveryPlan is issued and every lost task is Running again
#              on the other real nodes. The leader's /metrics (curl of its pod IP, metrics.enabled) before and
#              after: recovery steps, node loss -> first RecoveryPlan observations and seconds
#              move, and the line prints both values
#   uninstall  topology deleted (its /metrics series go), helm uninstall: no pod, ServiceAccount, Role(Binding),
#              ClusterRole(Binding) or Secret (the webhook's certificate) of the release is left (CRDs stay,
#              as helm never deletes them)
#   teardown   real nodes, kube-proxy and control plane stopped; no bridge, iptables rule or mount
#              of theirs is left on the host
# One line per phase with its duration. Needs root (kubelets, containerd, bridges) and apt.
# Env: E2E_NODES (3), E2E_RUN_DIR ($BACKSTOP_CACHE/e2e), E2E_API_PORT (36443), KEEP=1 (leave the
#      cluster running), E2E_EXAMPLE (examples/twitter-sentiment.yaml; its metadata.name is used),
#      E2E_SPARE_CPU (250m, 2 replicas of the example on 3 nodes of a 2-core host: more slow it
#      down; spec.replication.spareCpu, unless the example sets spec.replication).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export BACKSTOP_CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
export K8S_RUN_DIR=${E2E_RUN_DIR:-$BACKSTOP_CACHE/e2e}
export API_PORT=${E2E_API_PORT:-36443} ETCD_PORT=${E2E_ETCD_PORT:-32379}
export KUBECONFIG=$K8S_RUN_DIR/kubeconfig
NODES=${E2E_NODES:-3}
NS=backstop-e2e
RELEASE=backstop
RELEASE_NS=backstop-system
EXAMPLE=${E2E_EXAMPLE:-examples/twitter-sentiment.yaml}
SPARE_CPU=${E2E_SPARE_CPU:-250m}
TOPO=$(sed -n 's/^  name: *//p' "$EXAMPLE" | head -1)
GROUP=streams.backstop.dev
PATH=$ROOT/.tools/bin:$ROOT/.venv/bin:$PATH
T_ALL=$SECONDS
[[ $(id -u) == 0 ]] || { echo "error: make e2e needs root (kubelets, containerd, bridges, iptables)" >&2; exit 1; }
command -v helm >/dev/null && command -v kubectl >/dev/null || { echo "error: helm/kubectl missing: run make tools" >&2; exit 1; }
command -v backstop >/dev/null || { echo "error: the backstop CLI is missing: run make install" >&2; exit 1; }

phase_t=0; phase_name=""
phase() { phase_name=$1; phase_t=$SECONDS; echo "--- $1: $2" >&2; }
done_phase() { printf 'e2e phase %-10s %4ds  %s\n' "$phase_name" $((SECONDS - phase_t)) "$1"; }
fail() {
  echo "e2e FAILED in phase $phase_name: $*" >&2
  kubectl get nodes,pods -A -o wide >&2 2>/dev/null || true
  kubectl -n $RELEASE_NS logs deploy/$RELEASE --tail=40 >&2 2>/dev/null || true
  exit 1
}
wait_until() { # timeout what cmd...
  local t=$1 what=$2; shift 2
  local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do ((SECONDS < end)) || fail "timed out after ${t}s waiting for $what"; sleep 1; done
}
# The example's store: the cluster's object store (hack/local-cluster.sh starts it beside the
# nodes, its data under $K8S_RUN_DIR/objectstore, removed with it), and the tweet log its sources
# replay, written into the bucket by the example's generator on the host.
tweets_pid=""
tweets_up() { # the example's source path, s3://...
  # shellcheck disable=SC2046  # the store's settings: export A=1 B=2
  export $(hack/local-cluster.sh object-store env | sed 's/^export //')
  setsid python -m backstop_runtime.examples.tweets "$1" --follow --seconds 1800 \
    > $K8S_RUN_DIR.tweets.log 2>&1 < /dev/null &
  tweets_pid=$!
}
tweets_down() {
  [[ -n $tweets_pid ]] && { kill "$tweets_pid" 2>/dev/null; wait "$tweets_pid" 2>/dev/null || true; }
  tweets_pid=""
}
# the sink's committed output lines in the bucket (what a user reads), at least $1 of them
sink_output() {
  local n
  n=$(python -m backstop_runtime.output cat "${source_path%/input}/output" 2>/dev/null | wc -l)
  ((n >= $1))
}
teardown() {
  if [[ ${KEEP:-0} == 1 ]]; then echo "left running: export KUBECONFIG=$KUBECONFIG" >&2; return; fi
  tweets_down
  hack/local-cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$K8S_RUN_DIR/objectstore"
}
trap teardown EXIT
trap 'exit 130' INT TERM   # so that teardown runs on Ctrl-C or kill too

pods_json() { kubectl get pods -n $NS -l $GROUP/topology=$TOPO -o json; }
# every task has a pod Running in a containerd container on a Ready real node (and, with a
# second argument, that many pods do: the tasks' and their replicas')
tasks_running_on_real_nodes() {
  pods_json | python3 -c '
import json, subprocess, sys
want = int(sys.argv[1])
want_pods = int(sys.argv[2]) if len(sys.argv) > 2 else None
pods = [p for p in json.load(sys.stdin)["items"] if not p["metadata"].get("deletionTimestamp")]
nodes = {n["metadata"]["name"]: n for n in json.loads(subprocess.check_output(
    ["kubectl", "get", "nodes", "-o", "json"]))["items"]}
def ok(p):
    st = p.get("status", {})
    cs = st.get("containerStatuses") or []
    node = nodes.get(p["spec"].get("nodeName") or "")
    ready = node and any(c["type"] == "Ready" and c["status"] == "True"
                         for c in node["status"].get("conditions", []))
    return (st.get("phase") == "Running" and cs and all("running" in c["state"] and
            c.get("containerID", "").startswith("containerd://") for c in cs) and ready and
            node["metadata"]["labels"].get("backstop.dev/node-kind") == "real")
running = [p for p in pods if ok(p)]
tasks = {p["metadata"]["labels"].get("streams.backstop.dev/task") for p in running}
sys.exit(0 if len(tasks) == want and want_pods in (None, len(running)) else 1)' "$@"
}
# every pod of the namespace (the task pods) mounts no host directory: the state is in the bucket
no_host_directories() {
  local found
  found=$(kubectl get pods -n $NS -o json | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    for v in p["spec"].get("volumes") or []:
        if "hostPath" in v:
            print(p["metadata"]["name"], v["name"], v["hostPath"].get("path"))')
  [[ -z $found ]] || fail "task pods mount host directories: $found"
}

# The operator's /metrics (metrics.enabled, port $METRICS_PORT) straight from a pod's IP: every
# real node's pods are on a bridge of this host.
METRICS_PORT=9090
scrape() { # pod -> the Prometheus text of its /metrics
  local ip
  ip=$(kubectl get pod -n $RELEASE_NS "$1" -o jsonpath='{.status.podIP}') && [[ -n $ip ]] || return 1
  curl -sf --max-time 5 "http://$ip:$METRICS_PORT/metrics"
}
# metric POD NAME [LABEL=VALUE...]: the sum of NAME's samples with those labels (0 if none)
metric() {
  local pod=$1; shift
  scrape "$pod" | python3 -c '
import sys
from prometheus_client.parser import text_string_to_metric_families
name, want = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
total = sum(s.value for f in text_string_to_metric_families(sys.stdin.read())
            for s in f.samples if s.name == name and want.items() <= s.labels.items())
print(f"{total:.6g}")' "$@"
}
leader_pod() { # the operator pod whose /metrics says backstop_leader 1
  local p
  for p in $(kubectl get pods -n $RELEASE_NS -l app.kubernetes.io/name=backstop -o name); do
    [[ $(metric "${p#pod/}" backstop_leader 2>/dev/null) == 1 ]] && { echo "${p#pod/}"; return 0; }
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
phase images "hack/images.sh"
mkdir -p $BACKSTOP_CACHE/images
hack/images.sh > $BACKSTOP_CACHE/images/e2e-build.log 2>&1 || { tail -20 $BACKSTOP_CACHE/images/e2e-build.log >&2; fail "image build"; }
sed 's/^/    /' $BACKSTOP_CACHE/images/e2e-build.log >&2
done_phase "$(grep ' MB$' $BACKSTOP_CACHE/images/e2e-build.log | tr -s ' ' | paste -sd ';' -)"

phase cluster "control plane (API :$API_PORT) + $NODES real nodes + kube-proxy"
if hack/local-cluster.sh status | grep -q "kube-apiserver: running"; then hack/local-cluster.sh down >/dev/null; fi
rm -rf "$K8S_RUN_DIR/objectstore"   # an empty bucket: the tweet log of an earlier run differs
REAL_NODES=$NODES REAL_NODE_PREFIX=e2e hack/local-cluster.sh up > $K8S_RUN_DIR.up.log 2>&1 \
  || { sed 's/^/    /' $K8S_RUN_DIR.up.log >&2; fail "cluster start"; }
sed 's/^/    /' $K8S_RUN_DIR.up.log >&2
read -r _ _ BRIDGE < <(hack/real-node.sh net-info)   # this cluster's bridge prefix
kubectl apply -f crds/ >/dev/null
kubectl create namespace $NS >/dev/null
hack/local-cluster.sh store-secret $NS 2>/dev/null || fail "the object store's Secret"
# pods are refused until the namespace's default ServiceAccount has its token (admission)
wait_until 30 "the default ServiceAccount of $NS and its token" \
  bash -c "kubectl get sa default -n $NS -o jsonpath='{.secrets[0].name}' | grep -q ."
done_phase "$(kubectl get nodes -l backstop.dev/node-kind=real --no-headers | wc -l) real nodes Ready"

phase install "helm install $RELEASE charts/backstop"
# image.registry=backstop: the images hack/images.sh built and loaded into the nodes, never pulled
helm install $RELEASE charts/backstop --namespace $RELEASE_NS --create-namespace \
  --set image.registry=backstop --set "watchNamespaces={$NS}" --set recovery.gracePeriodSeconds=5 --set logFormat=plain \
  --set metrics.enabled=true --set metrics.port=$METRICS_PORT \
  --wait --timeout 5m >/dev/null || fail "helm install"
# the replica holding the Lease (the other is a standby): the one whose /metrics says so
wait_until 60 "an operator replica leading (backstop_leader 1 on /metrics)" leader_pod
op_pod=$(leader_pod)
op_node=$(kubectl get pod -n $RELEASE_NS "$op_pod" -o jsonpath='{.spec.nodeName}')
op_cid=$(kubectl get pod -n $RELEASE_NS "$op_pod" -o jsonpath='{.status.containerStatuses[0].containerID}')
op_sa=$(kubectl get pod -n $RELEASE_NS "$op_pod" -o jsonpath='{.spec.serviceAccountName}')
[[ $(kubectl get node "$op_node" -o jsonpath='{.metadata.labels.backstop\.dev/node-kind}') == real ]] || fail "operator on $op_node, not a real node"
[[ $op_cid == containerd://* ]] || fail "operator container id '$op_cid'"
# the only operator of this cluster is that pod: no host process (outside a container) runs one
for pid in $(pgrep -f "backstop operator" || true); do
  [[ $(readlink /proc/$pid/ns/pid) == "$(readlink /proc/self/ns/pid)" ]] || continue   # in a container
  tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "KUBECONFIG=$KUBECONFIG" \
    && fail "an operator process on the host (pid $pid) watches this cluster"
done
done_phase "operator $op_pod (leader) on real node $op_node (SA $op_sa, ${op_cid:0:25}…)"

phase admission "kubectl apply of a bad manifest: refused by the in-cluster webhook"
# an operator reading from one that does not exist: the operator's webhook (behind the chart's
# Service, reached by the API server through kube-proxy) refuses it in one line naming the field
BAD=$(cat <<YAML
apiVersion: $GROUP/v1alpha1
kind: StreamTopology
metadata: {name: e2e-bad}
spec:
  image: none
  recoveryLatencyBound: 5
  operators:
  - {name: src, reprocessingLatency: 1}
  - {name: sink, reprocessingLatency: 1, inputs: [{operator: nowhere}]}
YAML
)
refused_by_webhook() { ! kubectl apply -n $NS --dry-run=server -f - <<<"$BAD" 2>&1 | grep -q "created"; }
wait_until 60 "the webhook to answer" refused_by_webhook
if out=$(kubectl apply -n $NS -f - <<<"$BAD" 2>&1); then fail "admitted: $out"; fi
grep -q 'denied the request: spec.operators\[1\].inputs\[0\].operator: .*unknown operator' <<<"$out" \
  || fail "refused, but not by the webhook naming the field: $out"
[[ $(wc -l <<<"$out") == 1 ]] || fail "the refusal is not one line: $out"
done_phase "refused: ${out##*denied the request: }"

phase apply "kubectl apply -f $EXAMPLE"
source_path=$(python3 -c 'import sys, yaml
ops = yaml.safe_load(open(sys.argv[1]))["spec"]["operators"]
print(next(o["config"]["path"] for o in ops if o["name"] == "source"))' "$EXAMPLE")
if [[ $source_path == s3://*/twitter/input ]]; then tweets_up "$source_path"; fi
# replicated (spec.replication), so that the kill phase sees a replica promoted
python3 -c 'import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["spec"].setdefault("replication", {"spareCpu": sys.argv[2]})
print(yaml.safe_dump(doc))' "$EXAMPLE" "$SPARE_CPU" | kubectl apply -n $NS -f - >/dev/null
wait_until 180 "$TOPO Ready" kubectl wait -n $NS --for=condition=Ready st/$TOPO --timeout=5s
read -r ntasks nreplicas < <(kubectl get st -n $NS $TOPO -o json | python3 -c 'import json,sys
plan = json.load(sys.stdin)["status"]["plan"]
print(len(plan["assignment"]), sum(len(n) for n in (plan.get("replicas") or {}).values()))')
((nreplicas > 0)) || fail "spec.replication.spareCpu $SPARE_CPU bought no replica"
wait_until 180 "$ntasks task pods Running in containerd containers on real nodes" tasks_running_on_real_nodes "$ntasks"
wait_until 180 "$((ntasks + nreplicas)) pods (tasks and replicas) Running" tasks_running_on_real_nodes "$ntasks" "$((ntasks + nreplicas))"
task_nodes=$(pods_json | python3 -c 'import json,sys; print(" ".join(sorted({p["spec"]["nodeName"] for p in json.load(sys.stdin)["items"]})))')
no_host_directories
done_phase "$ntasks task pods and $nreplicas replicas Running in real containers on: $task_nodes; no hostPath, state in the bucket"

phase logs "kubectl logs of a task pod on every node with tasks"
for node in $task_nodes; do
  pod=$(kubectl get pods -n $NS -l $GROUP/topology=$TOPO --field-selector spec.nodeName=$node -o jsonpath='{.items[0].metadata.name}')
  # a task logs once it has caught up with its input, which first has to reach the bucket
  wait_until 60 "a log line of $pod (node $node)" bash -c "kubectl logs -n $NS $pod --tail=5 | grep -q ."
  out=$(kubectl logs -n $NS "$pod" --tail=5) || fail "kubectl logs $pod (node $node)"
  echo "    $node/$pod: $(tail -1 <<<"$out" | cut -c1-120)" >&2
done
wait_until 120 "the sink's first output lines in the bucket" sink_output 1
done_phase "logs read from $(wc -w <<<"$task_nodes") real nodes; the sink's output in the bucket: $(python -m backstop_runtime.output cat "${source_path%/input}/output" | wc -l) lines"

phase upgrade "helm upgrade with a live topology: the pre-upgrade Job applies the image's CRDs"
crd=streamtopologies.streams.backstop.dev
columns() { kubectl get crd $crd -o jsonpath='{.spec.versions[0].additionalPrinterColumns[*].name}'; }
task_pods() { # name uid restarts of every task pod, sorted: what an upgrade must leave alone
  pods_json | python3 -c 'import json,sys
for p in sorted(json.load(sys.stdin)["items"], key=lambda p: p["metadata"]["name"]):
    print(p["metadata"]["name"], p["metadata"]["uid"], sum(c.get("restartCount", 0) for c in p.get("status", {}).get("containerStatuses", [])))'
}
full=$(columns)
# an older CRD, as a release installed before a column was added would have
kubectl patch crd $crd --type=json \
  -p '[{"op":"remove","path":"/spec/versions/0/additionalPrinterColumns/0"}]' >/dev/null || fail "patch the CRD"
[[ $(columns) != "$full" ]] || fail "the CRD did not change"
before=$(task_pods)
old_ops=$(kubectl get pods -n $RELEASE_NS -l app.kubernetes.io/name=backstop -o jsonpath='{.items[*].metadata.uid}')
# a changed pod template rolls the operator's replicas, as a new image would
helm upgrade $RELEASE charts/backstop --namespace $RELEASE_NS --reuse-values \
  --set-string podAnnotations.e2e-upgrade="$(date +%s)" --wait --timeout 5m >/dev/null || fail "helm upgrade"
[[ $(columns) == "$full" ]] || fail "the CRD after helm upgrade has the columns: $(columns)"
hook_left=$( (kubectl get job,serviceaccount -n $RELEASE_NS -o name; kubectl get clusterrole,clusterrolebinding -o name) | grep crd-upgrade || true)
[[ -z $hook_left ]] || fail "the upgrade hook left: $hook_left"
replaced() { # every operator pod is a new one and one of them leads
  local uid
  for uid in $(kubectl get pods -n $RELEASE_NS -l app.kubernetes.io/name=backstop -o jsonpath='{.items[*].metadata.uid}'); do
    [[ " $old_ops " == *" $uid "* ]] && return 1
  done
  leader_pod >/dev/null
}
wait_until 120 "new operator replicas, one leading" replaced
op_pod=$(leader_pod)
op_node=$(kubectl get pod -n $RELEASE_NS "$op_pod" -o jsonpath='{.spec.nodeName}')
kubectl wait -n $NS --for=condition=Ready st/$TOPO --timeout=60s >/dev/null || fail "$TOPO not Ready after the upgrade"
sleep 5   # a new leader that restarted or moved a task pod would have begun by now
after=$(task_pods)
[[ $after == "$before" ]] || fail "task pods changed across the upgrade: $(diff <(echo "$before") <(echo "$after") | tr '\n' ' ')"
done_phase "CRD upgraded by the hook Job (columns: $full), nothing of the hook left; operator rolled (leader $op_pod), $TOPO Ready, its $(wc -l <<<"$after") task pods untouched"

phase kill "python -m backstop_testkit nodes kill <a real node with a replicated primary>"
# a node with a replicated primary and no operator replica; if every such node runs one,
# spare the leader's
kubectl get st -n $NS $TOPO -o json > $K8S_RUN_DIR.st-before-kill.json
pods_json > $K8S_RUN_DIR.pods-before-kill.json
replicated_nodes=$(python3 -c 'import json, sys
plan = json.load(open(sys.argv[1]))["status"]["plan"]
print(" ".join(sorted({plan["assignment"][t] for t, n in (plan.get("replicas") or {}).items() if n})))' \
  $K8S_RUN_DIR.st-before-kill.json)
op_nodes=" $(kubectl get pods -n $RELEASE_NS -l app.kubernetes.io/name=backstop -o jsonpath='{.items[*].spec.nodeName}') "
victim=""
for node in $replicated_nodes; do [[ $op_nodes != *" $node "* ]] && { victim=$node; break; }; done
[[ -n $victim ]] || for node in $replicated_nodes; do [[ $node != "$op_node" ]] && { victim=$node; break; }; done
[[ -n $victim ]] || fail "every replicated primary runs on the operator's node $op_node"
# each replicated primary of the victim runs in its replica's pod now: named in
# status.plan.promoted, the same pod (uid) as before the kill, labelled primary, on another node
promoted_in_place() {
  kubectl get st -n $NS $TOPO -o json | python3 -c '
import json, subprocess, sys
run, ns, topo, victim = sys.argv[1:5]
before = json.load(open(run + ".st-before-kill.json"))["status"]["plan"]
uids = {p["metadata"]["name"]: p["metadata"]["uid"]
        for p in json.load(open(run + ".pods-before-kill.json"))["items"]}
lost = sorted(t for t, n in before["assignment"].items()
              if n == victim and (before.get("replicas") or {}).get(t))
plan = json.load(sys.stdin)["status"]["plan"]
promoted = plan.get("promoted") or {}
pods = {p["metadata"]["name"]: p for p in json.loads(subprocess.check_output(
    ["kubectl", "get", "pods", "-n", ns, "-o", "json"]))["items"]}
out = []
for t in lost:
    name = f"{topo}--{t}--r{promoted.get(t, -1)}"
    pod = pods.get(name)
    if t not in promoted or pod is None or pod["metadata"]["uid"] != uids.get(name):
        sys.exit(1)
    if pod["metadata"]["labels"].get("streams.backstop.dev/role") != "primary":
        sys.exit(1)
    if pod["spec"].get("nodeName") in (None, victim) or plan["assignment"][t] != pod["spec"]["nodeName"]:
        sys.exit(1)
    out.append(f"{t}->{name}")
if not out:
    sys.exit(1)
print(" ".join(out))' $K8S_RUN_DIR $NS $TOPO "$victim"
}
topo_labels=(namespace=$NS topology=$TOPO)
recovery_metrics() { # steps, first-plan observations, seconds NotReady -> first RecoveryPlan
  echo "$(metric "$op_pod" backstop_recovery_steps_total "${topo_labels[@]}")" \
    "$(metric "$op_pod" backstop_recovery_first_plan_seconds_count "${topo_labels[@]}" since=not_ready)" \
    "$(metric "$op_pod" backstop_recovery_first_plan_seconds_sum "${topo_labels[@]}" since=not_ready)"
}
[[ $(metric "$op_pod" backstop_topology_tasks "${topo_labels[@]}") == "$ntasks" ]] \
  || fail "/metrics of $op_pod: backstop_topology_tasks is not $ntasks"
read -r steps0 obs0 secs0 < <(recovery_metrics) || fail "curl of $op_pod's /metrics"
lost=$(kubectl get pods -n $NS -l $GROUP/topology=$TOPO --field-selector spec.nodeName=$victim -o name | wc -l)
victim_pids=$(ctr -a /run/backstop-$API_PORT/$victim/containerd.sock -n k8s.io tasks ls -q 2>/dev/null | wc -l)
t_kill=$SECONDS
python -m backstop_testkit nodes kill "$victim" >/dev/null
[[ -z $(pgrep -f -- "--hostname-override=$victim ") ]] || fail "the kubelet of $victim survived"
wait_until 120 "$victim NotReady" bash -c "kubectl get node $victim -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qv True"
t_notready=$((SECONDS - t_kill))
wait_until 120 "a RecoveryPlan" bash -c "kubectl get recoveryplans -n $NS -o name | grep -q ."
t_plan=$((SECONDS - t_kill))
wait_until 120 "the replicas of $victim's replicated primaries promoted in place" promoted_in_place
t_promoted=$((SECONDS - t_kill))
promotions=$(promoted_in_place)
wait_until 240 "all $ntasks tasks Running again on the other real nodes" tasks_running_on_real_nodes "$ntasks"
t_back=$((SECONDS - t_kill))
pods_json | python3 -c 'import json,sys; v=sys.argv[1]; sys.exit(any(p["spec"]["nodeName"]==v for p in json.load(sys.stdin)["items"] if not p["metadata"].get("deletionTimestamp")))' "$victim" \
  || fail "tasks still on $victim"
no_host_directories
kubectl get recoveryplans -n $NS >&2
moved() { read -r s o _ < <(recovery_metrics) && [[ $s -gt $steps0 && $o -gt $obs0 ]]; }
wait_until 30 "the recovery metrics to move on $op_pod's /metrics" moved
read -r steps1 obs1 secs1 < <(recovery_metrics)
[[ $(metric "$op_pod" backstop_recovery_session_active "${topo_labels[@]}") == 0 ]] || fail "/metrics: a session still active"
[[ $(metric "$op_pod" backstop_recovery_tasks_lost "${topo_labels[@]}") == 0 ]] || fail "/metrics: tasks still lost"
done_phase "$victim killed ($lost pods, $victim_pids containers): NotReady after ${t_notready}s, RecoveryPlan after ${t_plan}s, promoted in place after ${t_promoted}s ($promotions), all tasks Running again after ${t_back}s; /metrics of $op_pod: recovery steps $steps0 -> $steps1, node-loss->first-plan observations $obs0 -> $obs1 (seconds since NotReady $secs0 -> $secs1)"

phase uninstall "delete the topology, helm uninstall"
kubectl delete -n $NS st/$TOPO --wait=true --timeout=120s >/dev/null || fail "deleting the topology (finalizer)"
no_series() { local out; out=$(scrape "$op_pod") && ! grep -q "topology=\"$TOPO\"" <<<"$out"; }
wait_until 30 "the deleted topology's series to leave $op_pod's /metrics" no_series
wait_until 120 "the task pods to go" bash -c "[[ -z \$(kubectl get pods -n $NS -o name) ]]"
helm uninstall $RELEASE --namespace $RELEASE_NS --wait --timeout 2m >/dev/null || fail "helm uninstall"
# a standby replica on the killed node never finishes terminating (no kubelet confirms it):
# delete it as Kubernetes asks for pods of a dead node
kubectl delete pods -n $RELEASE_NS --field-selector spec.nodeName=$victim --force --grace-period=0 >/dev/null 2>&1 || true
if ! timeout 60 bash -c "until [[ -z \$(kubectl get pods -n $RELEASE_NS -o name) ]]; do sleep 1; done"; then
  # seen once in CI: an operator pod on a live node stayed Terminating past SIGKILL (the process
  # itself exits within 2 s of SIGTERM); keep what the kubelet says, then remove it as for a
  # dead node, so that the check below is about what the chart leaves, not about this host
  echo "WARNING: operator pods still terminating 60 s after helm uninstall:" >&2
  kubectl get pods -n $RELEASE_NS -o wide >&2 || true
  kubectl describe pods -n $RELEASE_NS 2>/dev/null | sed -n '/^Events:/,$p' | tail -15 >&2 || true
  kubectl delete pods -n $RELEASE_NS --all --force --grace-period=0 >/dev/null 2>&1 || true
  wait_until 30 "the operator pod to go" bash -c "[[ -z \$(kubectl get pods -n $RELEASE_NS -o name) ]]"
fi
# the webhook certificate Secret (the operator made it) goes with the ValidatingWebhookConfiguration
# that owns it, the ServiceAccount's token Secrets with it: both by controllers, within seconds
release_secrets() { kubectl get secrets -n $RELEASE_NS -o name | grep "^secret/$RELEASE" || true; }
timeout 60 bash -c "until [[ -z \$(kubectl get secrets -n $RELEASE_NS -o name | grep '^secret/$RELEASE') ]]; do sleep 1; done" || true
left=$( { kubectl get sa,role,rolebinding,deploy,pods,svc -n $RELEASE_NS -o name | grep -v '^serviceaccount/default$'
          release_secrets
          kubectl get role,rolebinding -n $NS -o name
          kubectl get clusterrole,clusterrolebinding -o name | grep "/$RELEASE"
          kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations -o name | grep "/$RELEASE"
          kubectl get pods,recoveryplans,st -n $NS -o name; } 2>/dev/null || true)
[[ -z $left ]] || fail "left behind after helm uninstall: $left"
done_phase "nothing of the release left (CRDs stay: helm never deletes them)"

phase teardown "stop real nodes, kube-proxy and the control plane"
if [[ ${KEEP:-0} != 1 ]]; then
  tweets_down
  hack/local-cluster.sh down >/dev/null 2>&1
  rm -rf "$K8S_RUN_DIR/objectstore"
  trap - EXIT
  junk=$( { ip -o link show | grep -oE " (${BRIDGE}[0-9]+):" || true
            iptables-save 2>/dev/null | grep -E 'backstop-e2e-|KUBE-SVC' || true
            grep -E "/run/backstop-$API_PORT|$K8S_RUN_DIR/nodes" /proc/mounts || true; } )
  [[ -z $junk ]] || fail "host state left: $junk"
fi
done_phase "host clean"
echo "e2e passed in $((SECONDS - T_ALL))s"
