#!/usr/bin/env bash
# hack/local-cluster.sh - Backstop's local Kubernetes control plane: etcd, kube-apiserver,
# kube-controller-manager (with the node-lifecycle controller on, short grace period) and
# kube-scheduler v1.20.2 as plain processes on 127.0.0.1. No container engine needed.
#
# Why this exists: Docker/kind cannot run on our CI machines, yet the operator must be tested
# against a real API server, scheduler and node-lifecycle controller. Nodes are simulated by
# `python -m backstop_testkit nodes` (the test kit's node simulator), which stands in for
# kubelets and nothing else.
#
# Everything comes from Debian packages:
#   * etcd 3.4                        <- Debian package etcd-server
#   * kube-apiserver & co. v1.20.2    <- built from Debian's 'kubernetes' SOURCE package
#                                        (the only Kubernetes server source in Debian bookworm)
#                                        with Debian's golang-1.19-go; vendored deps, GOPATH mode,
#                                        reflect2 swapped for Debian's 1.0.2 (1.0.1 crashes on Go>=1.18),
#                                        pkg/generated/openapi generated with the vendored openapi-gen.
#   * kubectl v1.20.2                 <- the same source tree (`build`, or `kubectl DEST`): the
#                                        client matches the API server (hack/get-kubectl.sh)
# Cold (first run): ~4-6 minutes on 2 cores, mostly compiling kube-apiserver; kubectl adds ~22 s
# on top of the others' build cache. Warm: ~5 s.
#
# Usage:  hack/local-cluster.sh [up|down|status|build|env|kubectl DEST|object-store VERB|store-secret NS]
#         (default: up)
# Env:    BACKSTOP_CACHE (default ~/.cache/backstop)  build outputs live in $BACKSTOP_CACHE/k8s
#         K8S_RUN_DIR   (default $BACKSTOP_CACHE/run) certs, logs, pids, kubeconfig
#         ETCD_PORT (12379)  API_PORT (16443)
#         NODE_MONITOR_GRACE (20s)   how long without heartbeats before a node turns NotReady/Unknown
#         POD_EVICTION_TIMEOUT (30s)
#         WITH_CONTROLLER_MANAGER=1 / WITH_SCHEDULER=1 (both on by default)
#         APISERVER_EXTRA_ARGS / CM_EXTRA_ARGS / SCHEDULER_EXTRA_ARGS  extra flags (word-split)
#         OBJECT_STORE (1)  also start the cluster's object store (hack/object-store.sh: SeaweedFS,
#                          S3 API on this host's address, port API_PORT+1890, i.e. 18333 by
#                          default; data under $K8S_RUN_DIR/objectstore) as a cloud's S3 is
#                          beside a cluster; `store-secret NS` writes the Secret
#                          backstop-object-store (endpoint, accessKeyId, secretAccessKey) that
#                          the examples' spec.store names into namespace NS
#         REAL_NODES (0)   also start that many REAL nodes (kubelet + containerd, hack/real-node.sh,
#                          needs root) named $REAL_NODE_PREFIX-<i> (real-<i>), and kube-proxy on the host
# The API server runs as a real cluster needs it: ServiceAccount admission and the token controller
# on (pods get tokens), --kubelet-preferred-address-types=InternalIP (kubectl logs/exec reach each
# kubelet on its own port), bound to 0.0.0.0 and advertising this host's address, which the
# `kubernetes` Service (10.0.0.1:443) points to.
# Result: $K8S_RUN_DIR/kubeconfig (cluster-admin via client cert)
set -euo pipefail

CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
WORK=$CACHE/k8s
RUN=${K8S_RUN_DIR:-$CACHE/run}
BIN=$WORK/bin
SRC=$WORK/k8s-src
GOPATH_DIR=$WORK/gopath
ETCD_PORT=${ETCD_PORT:-12379}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-$((ETCD_PORT + 1))}
API_PORT=${API_PORT:-16443}
if [[ -w /dev/shm ]]; then SHM=/dev/shm; else SHM=$RUN; fi
ETCD_DATA=${ETCD_DATA_DIR:-$SHM/local-k8s-etcd-$API_PORT}   # tmpfs: etcd 3.4 has no --unsafe-no-fsync
WITH_CM=${WITH_CONTROLLER_MANAGER:-1}
WITH_SCHED=${WITH_SCHEDULER:-1}
CM_CONTROLLERS=${CM_CONTROLLERS:-*}
NODE_MONITOR_GRACE=${NODE_MONITOR_GRACE:-20s}
POD_EVICTION_TIMEOUT=${POD_EVICTION_TIMEOUT:-30s}
K8S_VERSION=v1.20.2
GOROOT_DIR=/usr/lib/go-1.19
WITH_OBJECT_STORE=${OBJECT_STORE:-1}
STORE_SECRET=backstop-object-store

# the cluster's object store: its ports follow the API port, so two clusters' stores differ
object_store() { # VERB
  OBJECT_STORE_DIR=$RUN/objectstore OBJECT_STORE_S3_PORT=$((API_PORT + 1890)) \
    OBJECT_STORE_MASTER_PORT=$((API_PORT + 1891)) OBJECT_STORE_VOLUME_PORT=$((API_PORT + 1892)) \
    OBJECT_STORE_FILER_PORT=$((API_PORT + 1893)) OBJECT_STORE_STOP_TIMEOUT=5 \
    "$(dirname "${BASH_SOURCE[0]}")/object-store.sh" "$@"
}
# store-secret NS: the Secret with the object store's endpoint and credentials in namespace NS
store_secret() {
  local ns=${1:?usage: $0 store-secret NAMESPACE} kv endpoint="" key="" secret=""
  for kv in $(object_store env | sed 's/^export //'); do
    case $kv in
      BACKSTOP_S3_ENDPOINT=*) endpoint=${kv#*=} ;;
      AWS_ACCESS_KEY_ID=*) key=${kv#*=} ;;
      AWS_SECRET_ACCESS_KEY=*) secret=${kv#*=} ;;
    esac
  done
  [[ -n $endpoint && -n $key ]] || { log "the object store's settings are unknown (is it up?)"; return 1; }
  KUBECONFIG=$RUN/kubeconfig kubectl -n "$ns" create secret generic $STORE_SECRET \
    --from-literal=endpoint="$endpoint" --from-literal=accessKeyId="$key" \
    --from-literal=secretAccessKey="$secret" --dry-run=client -o yaml |
    KUBECONFIG=$RUN/kubeconfig kubectl apply -f - >/dev/null
  log "Secret $ns/$STORE_SECRET: the object store at $endpoint"
}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

install_packages() {
  local need=()
  command -v etcd >/dev/null || need+=(etcd-server)
  command -v openssl >/dev/null || need+=(openssl)
  command -v curl >/dev/null || need+=(curl ca-certificates)
  if [[ ! -x $BIN/kube-apiserver || ! -x $BIN/kubectl || ( $WITH_CM == 1 && ! -x $BIN/kube-controller-manager ) || ( $WITH_SCHED == 1 && ! -x $BIN/kube-scheduler ) ]]; then
    [[ -x $GOROOT_DIR/bin/go ]] || need+=(golang-1.19-go)
    [[ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ]] || need+=(golang-github-modern-go-reflect2-dev)
  fi
  if ((${#need[@]})); then
    log "apt-get install ${need[*]} (first run only)"
    local sudo=""; [[ $(id -u) == 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

fetch_source() {
  [[ -f $SRC/go.mod ]] && return 0
  log "fetching Debian source package 'kubernetes' (deb-src, private apt config under $WORK/apt)"
  local a=$WORK/apt
  mkdir -p $a/etc $a/lists/partial $a/src
  rm -f $a/etc/*
  # derive deb-src entries from the machine's own Debian sources (no host names hard-coded here)
  if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    sed 's/^Types: .*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > $a/etc/debian-src.sources
  fi
  if [[ -f /etc/apt/sources.list ]] && grep -q '^deb ' /etc/apt/sources.list; then
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' > $a/etc/debian-src.list
  fi
  local o=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$a/etc -o Dir::State::Lists=$a/lists)
  apt-get "${o[@]}" update -qq
  (cd $a/src && apt-get "${o[@]}" source --download-only -qq kubernetes 2>&1 | grep -v unsandboxed || true)
  local orig
  orig=$(ls $a/src/kubernetes_*.orig.tar.gz | head -1)
  mkdir -p $SRC
  tar xzf "$orig" -C $SRC --strip-components=1
  # reflect2 v1.0.1 (vendored) crashes with Go >= 1.18; Debian ships 1.0.2
  rm -rf $SRC/vendor/github.com/modern-go/reflect2
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 $SRC/vendor/github.com/modern-go/reflect2
  rm -f $SRC/vendor/github.com/modern-go/reflect2/go.mod
}

go_env() {
  mkdir -p $GOPATH_DIR/src/k8s.io $BIN
  ln -sfn $SRC $GOPATH_DIR/src/k8s.io/kubernetes
  export PATH=$GOROOT_DIR/bin:$PATH GOCACHE=$WORK/gocache GOPATH=$GOPATH_DIR CGO_ENABLED=0 GO111MODULE=off GOFLAGS= GOPROXY=off
}

gen_openapi() {
  local out=$SRC/pkg/generated/openapi/zz_generated.openapi.go
  [[ -f $out ]] && return 0
  log "generating pkg/generated/openapi (openapi-gen)"
  (
    go_env; cd $GOPATH_DIR/src/k8s.io/kubernetes
    go build -o $BIN/openapi-gen ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
    local dirs
    dirs=$(find -H . -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) -type f -name '*.go' \
      | sed 's|^\./staging/src|vendor|; s|^\./||' \
      | grep -vE '^vendor/k8s\.io/(code-generator|sample-apiserver)/' \
      | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' \
      | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
    $BIN/openapi-gen -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
      -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r $WORK/openapi-violations.report
  )
}

build_one() {
  local c=$1
  [[ -x $BIN/$c ]] && return 0
  fetch_source; gen_openapi
  log "building $c $K8S_VERSION (measured on 2 cores, cold cache: apiserver ~3 min, controller-manager ~35 s, scheduler ~10 s, kubectl ~22 s more)"
  (
    go_env; cd $GOPATH_DIR/src/k8s.io/kubernetes
    local ld="" p
    for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      p=k8s.io/kubernetes/vendor/$p
      ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitTreeState=clean -X $p.buildDate=2021-01-13T13:20:00Z"
    done
    go build -trimpath -ldflags "-s -w$ld" -o $BIN/$c.tmp.$$ ./cmd/$c && mv -f $BIN/$c.tmp.$$ $BIN/$c
  )
}

# Several clusters (tests, benchmarks, hack/get-kubectl.sh) may start on an empty cache at once: the
# first builds, the others wait here and find the binaries in place (hack/real-node.sh takes the same lock).
with_build_lock() { # STEP... (each a command line, word-split)
  mkdir -p $BIN
  exec 8> $WORK/.build.lock; flock 8
  local step
  for step in "$@"; do $step; done
  flock -u 8; exec 8>&-
}

build_all() {
  build_one kube-apiserver
  [[ $WITH_CM == 1 ]] && build_one kube-controller-manager
  [[ $WITH_SCHED == 1 ]] && build_one kube-scheduler
  build_one kubectl
  return 0
}

gen_certs() {
  local d=$RUN/pki
  [[ -f $d/admin.crt ]] && return 0
  log "generating CA, serving cert, admin client cert, service-account keys, token file"
  mkdir -p $d
  (
    cd $d
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout ca.key -out ca.crt -subj /CN=local-k8s-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign,digitalSignature 2>/dev/null
    leaf() { # name subject eku [san]
      openssl req -newkey rsa:2048 -nodes -sha256 -keyout $1.key -out $1.csr -subj "$2" 2>/dev/null
      { echo "basicConstraints=critical,CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"; echo "subjectKeyIdentifier=hash"; echo "authorityKeyIdentifier=keyid,issuer"
        [[ -n ${4:-} ]] && echo "subjectAltName=$4"; } > $1.ext
      openssl x509 -req -sha256 -days 3650 -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $1.crt -extfile $1.ext 2>/dev/null
      rm -f $1.csr $1.ext
    }
    leaf apiserver /CN=kube-apiserver serverAuth \
      "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    leaf admin "/O=system:masters/CN=admin" clientAuth
    # controller-manager runs all controllers under one identity (no per-controller SA tokens): give it system:masters
    leaf controller-manager "/O=system:masters/CN=system:kube-controller-manager" clientAuth
    leaf scheduler /CN=system:kube-scheduler clientAuth
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    echo "$(openssl rand -hex 16),admin,admin,system:masters" > tokens.csv
    chmod 600 *.key tokens.csv
  )
}

write_kubeconfig() { # file user
  local d=$RUN/pki
  cat > $1 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 $d/ca.crt)
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 $d/$2.crt)
    client-key-data: $(base64 -w0 $d/$2.key)
contexts:
- name: local
  context: {cluster: local, user: $2, namespace: default}
current-context: local
EOF
  chmod 600 $1
}

running() { [[ -f $RUN/$1.pid ]] && kill -0 "$(cat $RUN/$1.pid)" 2>/dev/null; }

spawn() { # name cmd...
  local n=$1; shift
  setsid nohup "$@" > $RUN/$n.log 2>&1 < /dev/null &
  echo $! > $RUN/$n.pid
}

wait_for() { # name timeout_s cmd...   (name = process whose pidfile is watched)
  local n=$1 t=$2; shift 2
  local end=$((SECONDS + t))
  until "$@" >/dev/null 2>&1; do
    if ! running $n; then log "$n exited; last log lines:"; tail -5 $RUN/$n.log >&2; return 1; fi
    if ((SECONDS >= end)); then log "timeout waiting for $n"; tail -5 $RUN/$n.log >&2; return 1; fi
    sleep 0.2
  done
}

port_busy() { (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; }

start() {
  with_build_lock install_packages build_all
  gen_certs
  mkdir -p $RUN
  local t0=$SECONDS d=$RUN/pki
  if running etcd || running kube-apiserver; then
    log "already running (use '$0 down' first)"
    if [[ $WITH_OBJECT_STORE == 1 ]]; then object_store up; fi
    start_real_nodes
    echo "export KUBECONFIG=$RUN/kubeconfig"; return 0
  fi
  local port
  for port in $ETCD_PORT $ETCD_PEER_PORT $API_PORT; do
    if port_busy $port; then log "127.0.0.1:$port is already in use (another instance? set ETCD_PORT/API_PORT)"; return 1; fi
  done
  rm -rf "$ETCD_DATA"; mkdir -p "$ETCD_DATA"
  # Pods reach the API server through the `kubernetes` Service (10.0.0.1:443 -> this address, by
  # kube-proxy on real nodes), so it must be an address of this host that pods can reach.
  local ADVERTISE
  ADVERTISE=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1)
  ADVERTISE=${ADVERTISE:-127.0.0.1}
  spawn etcd etcd --name local-k8s --data-dir "$ETCD_DATA" \
    --listen-client-urls http://127.0.0.1:$ETCD_PORT --advertise-client-urls http://127.0.0.1:$ETCD_PORT \
    --listen-peer-urls http://127.0.0.1:$ETCD_PEER_PORT --initial-advertise-peer-urls http://127.0.0.1:$ETCD_PEER_PORT \
    --initial-cluster local-k8s=http://127.0.0.1:$ETCD_PEER_PORT --logger zap --log-outputs stderr
  wait_for etcd 30 curl -sf http://127.0.0.1:$ETCD_PORT/health
  log "etcd ready after $((SECONDS - t0))s (pid $(cat $RUN/etcd.pid))"

  spawn kube-apiserver $BIN/kube-apiserver \
    --etcd-servers=http://127.0.0.1:$ETCD_PORT \
    --bind-address=0.0.0.0 --secure-port=$API_PORT --advertise-address=$ADVERTISE --insecure-port=0 \
    --cert-dir=$RUN/apiserver-certs --tls-cert-file=$d/apiserver.crt --tls-private-key-file=$d/apiserver.key \
    --client-ca-file=$d/ca.crt --token-auth-file=$d/tokens.csv \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file=$d/sa.pub --service-account-signing-key-file=$d/sa.key \
    --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --enable-priority-and-fairness=false \
    --v=1 ${APISERVER_EXTRA_ARGS:-}
  wait_for kube-apiserver 90 curl -sf --cacert $d/ca.crt --cert $d/admin.crt --key $d/admin.key \
    https://127.0.0.1:$API_PORT/readyz
  log "kube-apiserver ready after $((SECONDS - t0))s (pid $(cat $RUN/kube-apiserver.pid))"
  write_kubeconfig $RUN/kubeconfig admin

  if [[ $WITH_CM == 1 ]]; then
    write_kubeconfig $RUN/controller-manager.kubeconfig controller-manager
    spawn kube-controller-manager $BIN/kube-controller-manager \
      --kubeconfig=$RUN/controller-manager.kubeconfig --leader-elect=false \
      --port=0 --secure-port=0 --controllers="$CM_CONTROLLERS" \
      --service-account-private-key-file=$d/sa.key --root-ca-file=$d/ca.crt \
      --cluster-signing-cert-file=$d/ca.crt --cluster-signing-key-file=$d/ca.key \
      --use-service-account-credentials=false \
      --node-monitor-period=2s --node-monitor-grace-period=$NODE_MONITOR_GRACE \
      --pod-eviction-timeout=$POD_EVICTION_TIMEOUT --node-startup-grace-period=30s \
      --v=1 ${CM_EXTRA_ARGS:-}
    log "kube-controller-manager started (pid $(cat $RUN/kube-controller-manager.pid), controllers=$CM_CONTROLLERS)"
  fi
  if [[ $WITH_SCHED == 1 ]]; then
    write_kubeconfig $RUN/scheduler.kubeconfig scheduler
    spawn kube-scheduler $BIN/kube-scheduler \
      --kubeconfig=$RUN/scheduler.kubeconfig --leader-elect=false --port=0 --secure-port=0 --v=1 ${SCHEDULER_EXTRA_ARGS:-}
    log "kube-scheduler started (pid $(cat $RUN/kube-scheduler.pid))"
  fi
  if [[ $WITH_OBJECT_STORE == 1 ]]; then object_store up; fi
  start_real_nodes
  echo "export KUBECONFIG=$RUN/kubeconfig"
}

# REAL_NODES=N: N real nodes (kubelet + containerd, hack/real-node.sh) and kube-proxy on the host.
start_real_nodes() {
  local n=${REAL_NODES:-0} i
  ((n > 0)) || return 0
  local rn; rn="$(dirname "${BASH_SOURCE[0]}")/real-node.sh"
  K8S_RUN_DIR=$RUN $rn deps
  K8S_RUN_DIR=$RUN $rn proxy-up
  # in parallel: each node imports the images hack/images.sh built before its kubelet starts
  local pids=() rc=0 p
  for ((i = 0; i < n; i++)); do K8S_RUN_DIR=$RUN $rn up "${REAL_NODE_PREFIX:-real}-$i" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

stop() {
  if [[ -f $RUN/objectstore/weed.pid ]]; then object_store down || true; fi
  if [[ -d $RUN/nodes || -f $RUN/kube-proxy.pid ]]; then
    K8S_RUN_DIR=$RUN "$(dirname "${BASH_SOURCE[0]}")/real-node.sh" down-all
  fi
  local n p
  for n in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    if running $n; then
      p=$(cat $RUN/$n.pid); kill "$p"
      for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$p" 2>/dev/null && kill -9 "$p"
      log "stopped $n ($p)"
    fi
    rm -f $RUN/$n.pid
  done
  rm -rf "$ETCD_DATA"
}

status() {
  local n
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    if running $n; then echo "$n: running (pid $(cat $RUN/$n.pid))"; else echo "$n: not running"; fi
  done
  if [[ -d $RUN/nodes ]]; then
    K8S_RUN_DIR=$RUN "$(dirname "${BASH_SOURCE[0]}")/real-node.sh" list | sed 's/^/real node: /'
  fi
  echo "object store: $(object_store status)"
}

case ${1:-up} in
  up|start) start ;;
  down|stop) stop ;;
  status) status ;;
  build) with_build_lock install_packages build_all ;;
  kubectl)  # the kubectl of the API server's source tree, installed into DEST (hack/get-kubectl.sh)
    with_build_lock install_packages "build_one kubectl"
    mkdir -p "${2:?usage: $0 kubectl DEST}"; install -m 0755 $BIN/kubectl "$2/kubectl" ;;
  env) echo "export KUBECONFIG=$RUN/kubeconfig" ;;
  object-store) shift; object_store "$@" ;;   # up|down|status|env of the cluster's object store
  store-secret) store_secret "${2:-}" ;;
  *) echo "usage: $0 [up|down|status|build|env|kubectl DEST|object-store VERB|store-secret NS]" >&2; exit 2 ;;
esac
