#!/usr/bin/env bash
# hack/real-node.sh - REAL Kubernetes nodes on this host for the local control plane
# (hack/local-cluster.sh): a kubelet v1.20.2 built from the same Debian `kubernetes` source tree,
# driving its own containerd 1.6 (Debian), a CNI bridge with its own /24 (Debian
# containernetworking-plugins) and a pause image compiled from the tree's build/pause/linux/pause.c.
# Nothing is pulled from a registry. Several nodes share one host: each has its own containerd
# socket and root, bridge, subnet and kubelet ports. Needs root.
#
#   hack/real-node.sh deps               apt packages, kubelet + kube-proxy builds, pause image (once)
#   hack/real-node.sh up NAME [INDEX]    start node NAME (INDEX picks subnet NET.INDEX.0/24 and ports;
#                                        default: the smallest free one); waits until it is Ready
#   hack/real-node.sh kill NAME          abrupt loss: kubelet, containers, shims and containerd get
#                                        SIGKILL at once (the node-lifecycle controller turns it NotReady)
#   hack/real-node.sh revive NAME        a killed node boots again: runtime state gone (as /run after a
#                                        reboot), images kept (as on its disk); its containers are gone
#   hack/real-node.sh down NAME          kill, remove its network state and the Node object
#   hack/real-node.sh down-all           every node of this cluster, and kube-proxy
#   hack/real-node.sh load NAME|all TAR  import an image archive (`docker save`) into the node(s)
#   hack/real-node.sh proxy-up|proxy-down  kube-proxy (iptables mode) on the host, so that pods reach
#                                        the API server at 10.0.0.1:443 (one per host: host-wide iptables)
#   hack/real-node.sh list               NAME INDEX STATE per node
#   hack/real-node.sh net-info           NET PORT_BASE BRIDGE of this cluster's nodes
#
# Env: BACKSTOP_CACHE (~/.cache/backstop; binaries in $BACKSTOP_CACHE/k8s), K8S_RUN_DIR (the cluster's
#      run dir, $BACKSTOP_CACHE/run: node state goes to $K8S_RUN_DIR/nodes), REAL_NODE_NET (10.89: pods of
#      node i get NET.i.0/24), REAL_NODE_PORT_BASE (10250: kubelet i listens on BASE+10*i, healthz on
#      BASE-2+10*i), REAL_NODE_BRIDGE (bst: bridge i is bst<i>). The defaults in brackets are the
#      default cluster's (API port 16443); another cluster gets its own from its API port (below).
#
# What this encodes (each one found the hard way on these VMs):
#  - the VM lacks CAP_SYS_RESOURCE, so runc cannot set oom_score_adj -998 for a pod sandbox:
#    containerd needs `restrict_oom_score_adj = true`, or every sandbox fails with
#    "can't get final child's PID from pipe: EOF";
#  - kubelets on one host delete each other's /var/log/pods (kubelet 1.20 cannot move it): each
#    node's containerd and kubelet run in a private mount namespace with their own /var/log/pods,
#    /var/lib/cni and /run/netns, so a node's mounts, IP allocations and network namespaces vanish
#    with its processes;
#  - kubelet needs cgroupsPerQOS: false and enforceNodeAllocatable: [] to share the host's cgroup
#    hierarchy with other kubelets;
#  - a running dockerd sets the iptables FORWARD policy to DROP: the pod subnets are let through;
#  - containerd shims outlive a killed containerd: they are found by their socket address and killed;
#  - kubectl logs/exec need the API server to reach each kubelet at its InternalIP on its own port
#    (hack/local-cluster.sh passes --kubelet-preferred-address-types=InternalIP).
set -euo pipefail

# A cluster's own settings (written by the first `up`) fill in what the environment leaves unset, so
# `python -m backstop_testkit nodes kill|revive|add` only needs K8S_RUN_DIR (the directory of the
# cluster's kubeconfig).
if [[ -n ${K8S_RUN_DIR:-} && -f $K8S_RUN_DIR/real-node.env ]]; then source "$K8S_RUN_DIR/real-node.env"; fi
CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
K8S=$CACHE/k8s
BIN=$K8S/bin
RUN=${K8S_RUN_DIR:-$CACHE/run}
KUBECONFIG_ADMIN=$RUN/kubeconfig
NODES=$RUN/nodes
PAUSE=$CACHE/images/pause
IMAGES_DIR=$CACHE/images/load     # hack/images.sh saves the images it builds here
# REAL_NODE_IMAGES: the archives a new node imports before its kubelet starts (default IMAGES_DIR)
# Defaults per cluster, so that the real nodes of two local clusters on one host never share a
# subnet, a bridge or a kubelet port: the default cluster (API port 16443) gets 10.89 / 10250 /
# bst<i>; any other one a slot k = 1..20 from its API port: 10.(89-k) / 10250+1000k / b<k>n<i>.
api_port_of() { sed -n 's#.*server: https://[^:]*:\([0-9]*\).*#\1#p' "$1" 2>/dev/null | head -1; }
_port=$(api_port_of "$RUN/kubeconfig" || true); _port=${_port:-16443}
if [[ $_port == 16443 ]]; then _slot=0; else _slot=$(((_port / 1000 * 7 + _port) % 20 + 1)); fi
if ((_slot == 0)); then _net=10.89 _base=10250 _br=bst; else _net=10.$((89 - _slot)) _base=$((10250 + 1000 * _slot)) _br=b${_slot}n; fi
NET=${REAL_NODE_NET:-$_net}
PORT_BASE=${REAL_NODE_PORT_BASE:-$_base}
BRIDGE=${REAL_NODE_BRIDGE:-$_br}
NODE_KIND_LABEL=backstop.dev/node-kind
K8S_VERSION=v1.20.2
GOROOT_DIR=${REAL_NODE_GOROOT:-/usr/lib/go-1.19}   # a stand-in toolchain in tests/unit/test_hack_builds.py
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

need_root() { [[ $(id -u) == 0 ]] || die "real nodes need root (kubelet, containerd, bridges, iptables)"; }
host_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1; }
api_port() { sed -n 's#.*server: https://[^:]*:\([0-9]*\).*#\1#p' "$KUBECONFIG_ADMIN" | head -1; }
# runtime state (sockets, containerd state): /run, as on a real machine, so a "reboot" clears it
state_dir() { echo "/run/backstop-$(api_port)/$1"; }
sock() { echo "$(state_dir "$1")/containerd.sock"; }
valid_name() { [[ $1 =~ ^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$ ]] || die "node name '$1': use lower-case letters, digits and '-' (at most 42)"; }

kapi() { # METHOD PATH [BODY] -> the API server as admin (client cert), no kubectl needed
  local d=$RUN/pki
  curl -sS --cacert $d/ca.crt --cert $d/admin.crt --key $d/admin.key -X "$1" \
    -H 'Content-Type: application/merge-patch+json' ${3:+--data "$3"} \
    "https://127.0.0.1:$(api_port)$2"
}

go_build() { # component
  [[ -x $BIN/$1 ]] && return 0
  [[ -d $K8S/gopath/src/k8s.io/kubernetes/cmd/$1 ]] || die "no Kubernetes source tree in $K8S: run hack/local-cluster.sh build first"
  log "building $1 $K8S_VERSION from the Debian source tree (~1 min warm, ~2 min cold)"
  (
    cd $K8S/gopath/src/k8s.io/kubernetes
    export PATH=$GOROOT_DIR/bin:$PATH GOCACHE=$K8S/gocache GOPATH=$K8S/gopath CGO_ENABLED=0 GO111MODULE=off GOFLAGS= GOPROXY=off
    local ld="" p
    for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
      p=k8s.io/kubernetes/vendor/$p
      ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=20 -X $p.gitTreeState=clean"
    done
    go build -trimpath -ldflags "-s -w$ld" -o $BIN/$1.tmp.$$ ./cmd/$1 && mv -f $BIN/$1.tmp.$$ $BIN/$1
  )
}

# A one-layer docker-archive image from a directory, without any container engine.
tar_image() { # rootfs-dir tag out.tar entrypoint-json
  python3 - "$@" <<'PY'
import hashlib, io, json, os, sys, tarfile
root, tag, out, entry = sys.argv[1:5]
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode="w") as t:
    for name in sorted(os.listdir(root)):
        t.add(os.path.join(root, name), arcname=name)
lb = layer.getvalue()
lid = hashlib.sha256(lb).hexdigest()
cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": json.loads(entry)},
                  "rootfs": {"type": "layers", "diff_ids": ["sha256:" + lid]}}).encode()
cid = hashlib.sha256(cfg).hexdigest()
tmp = f"{out}.tmp.{os.getpid()}"
with tarfile.open(tmp, "w") as o:
    def add(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); o.addfile(ti, io.BytesIO(data))
    add(f"{lid}/layer.tar", lb)
    add(f"{cid}.json", cfg)
    add("manifest.json", json.dumps([{"Config": f"{cid}.json", "RepoTags": [tag],
                                      "Layers": [f"{lid}/layer.tar"]}]).encode())
os.replace(tmp, out)
PY
}

# Nodes started side by side on an empty cache each find the kubelet missing: the first builds,
# the others wait on the lock and then find every part in place.
deps() { need_root; with_build_lock apt_deps; with_build_lock builds; }
with_build_lock() { # CMD...: run CMD holding the cache's build lock (hack/local-cluster.sh takes it too)
  mkdir -p $BIN
  exec 8> $K8S/.build.lock; flock 8
  "$@"
  flock -u 8; exec 8>&-
}

apt_deps() {
  local need=() p
  for p in containerd runc containernetworking-plugins gcc libc6-dev iptables conntrack busybox-static curl; do
    dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'install ok installed' || need+=($p)
  done
  if ((${#need[@]})); then
    log "apt-get install ${need[*]} (first run only)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
  fi
}

builds() { # kubelet, kube-proxy, the pause and busybox images: each once, whoever comes first
  go_build kubelet
  go_build kube-proxy
  if [[ ! -f $PAUSE/pause.tar ]]; then
    log "compiling the pause image from build/pause/linux/pause.c"
    mkdir -p $PAUSE/rootfs
    gcc -Os -static -o $PAUSE/rootfs/pause $K8S/k8s-src/build/pause/linux/pause.c -DVERSION=3.4.1
    tar_image $PAUSE/rootfs local/pause:3.4.1 $PAUSE/pause.tar '["/pause"]'
  fi
  # busybox (Debian's static build) as a tiny image for tests that need a shell in a real container
  if [[ ! -f $CACHE/images/busybox/busybox.tar ]]; then
    local b=$CACHE/images/busybox
    mkdir -p $b/rootfs/bin $b/rootfs/tmp
    cp ${REAL_NODE_BUSYBOX:-/bin/busybox} $b/rootfs/bin/busybox
    ln -sf busybox $b/rootfs/bin/sh
    tar_image $b/rootfs backstop/busybox:1.35 $b/busybox.tar '["/bin/busybox"]'
  fi
}

# This script and its settings next to the cluster's kubeconfig: the test kit's `nodes` commands find them there.
install_self() {   # (tmp + rename: nodes may start in parallel)
  if [[ ! ${BASH_SOURCE[0]} -ef $RUN/real-node.sh ]]; then
    cp "${BASH_SOURCE[0]}" $RUN/real-node.sh.$$ && mv -f $RUN/real-node.sh.$$ $RUN/real-node.sh
  fi
  cat > $RUN/real-node.env.$$ <<ENV
: \${BACKSTOP_CACHE:=$CACHE} \${REAL_NODE_NET:=$NET} \${REAL_NODE_PORT_BASE:=$PORT_BASE} \${REAL_NODE_BRIDGE:=$BRIDGE}
ENV
  mv -f $RUN/real-node.env.$$ $RUN/real-node.env
}

index_of() { cat "$NODES/$1/index" 2>/dev/null; }

free_index() {
  local i
  for i in $(seq 0 99); do
    grep -qx "$i" $NODES/*/index 2>/dev/null || { echo $i; return; }
  done
  die "no free node index (0..99) in $NODES"
}

kubelet_pid() { local f=$NODES/$1/kubelet.pid; [[ -f $f ]] && cat $f; }
alive() { local p; p=$(kubelet_pid "$1") && [[ -n $p ]] && kill -0 "$p" 2>/dev/null; }

write_config() { # name index
  local n=$1 i=$2 d=$NODES/$1 s images
  s=$(state_dir "$n")
  mkdir -p $d/cni $d/kubelet $d/logs $d/cni-state
  [[ -f $d/images-dir ]] || echo "${REAL_NODE_IMAGES:-$IMAGES_DIR}" > $d/images-dir
  images=$(cat $d/images-dir)
  cat > $d/containerd.toml <<TOML
version = 2
root = "$d/containerd"
state = "$s/containerd"
[grpc]
  address = "$s/containerd.sock"
[ttrpc]
  address = "$s/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "local/pause:3.4.1"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
TOML
  cat > $d/cni/10-bridge.conflist <<JSON
{"cniVersion": "0.4.0", "name": "backstop-$n", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE$i", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NET.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
JSON
  cat > $d/kubelet.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
port: $((PORT_BASE + 10 * i))
healthzPort: $((PORT_BASE - 2 + 10 * i))
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {}
imageGCHighThresholdPercent: 100
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
YAML
  # The node's own mount namespace: /var/log/pods, /var/lib/cni and /run/netns are private to it,
  # so its pod logs survive the other kubelets and everything it mounts dies with it.
  cat > $d/run.sh <<RUN
#!/usr/bin/env bash
mount --make-rslave /
mkdir -p /var/log/pods /var/lib/cni /run/netns
mount --bind $d/logs /var/log/pods
mount --bind $d/cni-state /var/lib/cni
mount -t tmpfs -o size=4m,mode=755 backstop-netns /run/netns
containerd --config $d/containerd.toml > $d/containerd.log 2>&1 & echo \$! > $d/containerd.pid
for _ in \$(seq 100); do [[ -S $s/containerd.sock ]] && break; sleep 0.1; done
ctr -a $s/containerd.sock -n k8s.io images import $PAUSE/pause.tar >/dev/null
# the images built here (hack/images.sh), as if pre-provisioned on the machine's disk
for t in $images/*.tar; do
  [[ -f \$t ]] || continue
  id=\${t%.tar}.id; mark=$d/imported-\$(basename \${t%.tar})
  [[ -f \$id && -f \$mark ]] && cmp -s \$id \$mark && continue
  ctr -a $s/containerd.sock -n k8s.io images import \$t >/dev/null && { [[ -f \$id ]] && cp \$id \$mark; }
done
exec $BIN/kubelet --config=$d/kubelet.yaml --kubeconfig=$KUBECONFIG_ADMIN --hostname-override=$n \\
  --node-ip=$(host_ip) --container-runtime=remote --container-runtime-endpoint=unix://$s/containerd.sock \\
  --runtime-request-timeout=5m --root-dir=$d/kubelet --node-labels=$NODE_KIND_LABEL=real \\
  --v=1 >> $d/kubelet.log 2>&1
RUN
  chmod +x $d/run.sh
}

SYSCTL_ORIG=/run/backstop-sysctl.orig   # the host's values before the first real node or kube-proxy
net_setup() {
  [[ -f $SYSCTL_ORIG ]] || sysctl -n net.ipv4.ip_forward net.ipv4.conf.all.route_localnet | paste -sd' ' > $SYSCTL_ORIG
  sysctl -qw net.ipv4.ip_forward=1
  # a running dockerd sets the FORWARD policy to DROP: let the pod subnets through
  iptables -C FORWARD -s $NET.0.0/16 -j ACCEPT 2>/dev/null || iptables -I FORWARD -s $NET.0.0/16 -j ACCEPT
  iptables -C FORWARD -d $NET.0.0/16 -j ACCEPT 2>/dev/null || iptables -I FORWARD -d $NET.0.0/16 -j ACCEPT
}

start() { # name  (config written)
  local n=$1 d=$NODES/$1 s
  s=$(state_dir "$n")
  mkdir -p $s /var/log/pods
  net_setup
  setsid nohup unshare -m $d/run.sh > /dev/null 2>&1 < /dev/null &
  echo $! > $d/kubelet.pid   # unshare execs run.sh, which execs the kubelet: the same pid
}

wait_ready() { # name timeout
  local n=$1 end=$((SECONDS + $2))
  until kapi GET /api/v1/nodes/$n 2>/dev/null | python3 -c '
import json, sys
node = json.load(sys.stdin)
status = node.get("status") if node.get("kind") == "Node" else None
conds = (status or {}).get("conditions") or []
sys.exit(0 if any(c["type"] == "Ready" and c["status"] == "True" for c in conds) else 1)'; do
    alive "$n" || { tail -5 $NODES/$n/kubelet.log >&2; die "the kubelet of $n exited (log: $NODES/$n/kubelet.log)"; }
    ((SECONDS < end)) || die "node $n not Ready after $2s (log: $NODES/$n/kubelet.log)"
    sleep 0.5
  done
}

up() { # name [index]
  need_root
  local n=${1:?usage: up NAME [INDEX]} i=${2:-}
  valid_name "$n"
  [[ -f $KUBECONFIG_ADMIN ]] || die "no control plane in $RUN: run hack/local-cluster.sh up first"
  [[ -x $BIN/kubelet && -f $PAUSE/pause.tar ]] || deps
  if alive "$n"; then log "node $n already running (pid $(kubelet_pid $n))"; return 0; fi
  mkdir -p $NODES
  install_self
  exec 9> $NODES/.lock; flock 9   # nodes started in parallel get distinct indexes
  if [[ -z $i ]]; then i=$(index_of "$n" || true); fi
  if [[ -z $i ]]; then i=$(free_index); fi
  [[ $i =~ ^[0-9]+$ && $i -le 99 ]] || die "INDEX must be 0..99, not '$i'"
  mkdir -p $NODES/$n
  echo "$i" > $NODES/$n/index
  flock -u 9; exec 9>&-
  write_config "$n" "$i"
  start "$n"
  wait_ready "$n" 300
  log "node $n Ready: kubelet pid $(kubelet_pid $n) on port $((PORT_BASE + 10 * i)), pods in $NET.$i.0/24"
}

kill_node() { # abrupt: no graceful shutdown, exactly like losing the machine
  local n=$1 d=$NODES/$1 s p
  s=$(sock "$1")
  [[ -d $d ]] || die "no real node $n in $NODES"
  p=$(kubelet_pid "$n" || true)
  [[ -n $p ]] && kill -9 "$p" 2>/dev/null || true
  # every process of this node: containers (children of its shims), shims, containerd
  local shims=() pid cmd
  for pid in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' < $pid/cmdline 2>/dev/null) || continue
    [[ $cmd == *"containerd-shim-runc-v2 "*"-address $s "* ]] && shims+=("${pid#/proc/}")
  done
  # containerd first (it restarts nothing, but it must not see the rest die), then each container's
  # init (its PID namespace dies with it), then the shims
  [[ -f $d/containerd.pid ]] && kill -9 "$(cat $d/containerd.pid)" 2>/dev/null || true
  for pid in "${shims[@]}"; do
    for c in $(cat /proc/$pid/task/*/children 2>/dev/null); do kill -9 "$c" 2>/dev/null || true; done
  done
  for pid in "${shims[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  # wait until the kernel has reaped them (the node's mount namespace dies with its last process)
  for _ in $(seq 50); do
    local left=0
    [[ -n $p ]] && kill -0 "$p" 2>/dev/null && left=1
    for pid in "${shims[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.1
  done
  echo "node $n killed: kubelet, containerd, ${#shims[@]} shims and their containers got SIGKILL"
}

cni_cleanup() { # name: the bridge plugin's per-container masquerade rules (no CNI DEL after a kill)
  local n=$1 rule chain
  iptables-save -t nat 2>/dev/null | grep -F "name: \\\"backstop-$n\\\"" | grep '^-A POSTROUTING' | while read -r rule; do
    chain=$(sed -n 's/.* -j \(CNI-[0-9a-f]*\).*/\1/p' <<<"$rule")
    eval "iptables -t nat ${rule/-A /-D }" 2>/dev/null || true
    [[ -n $chain ]] && { iptables -t nat -F "$chain" 2>/dev/null; iptables -t nat -X "$chain" 2>/dev/null; } || true
  done || true
}

reset_state() { # name: what a reboot clears
  local n=$1 s m
  s=$(state_dir "$n")
  grep -oE " ($s|$NODES/$n)/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done || true
  rm -rf "$s" "$NODES/$n/cni-state"
  cni_cleanup "$n"
  rm -f $NODES/$n/*.pid
}

revive() {
  need_root
  local n=$1
  [[ -f $NODES/$n/run.sh ]] || die "no real node $n in $NODES"
  if alive "$n"; then log "node $n is running"; return 0; fi
  kill_node "$n" >/dev/null   # whatever is left of it
  reset_state "$n"
  write_config "$n" "$(index_of "$n")"
  start "$n"
  wait_ready "$n" 300
  echo "node $n revived (kubelet pid $(kubelet_pid $n)); its old containers are gone"
}

down() {
  need_root
  local n=$1 i
  [[ -d $NODES/$n ]] || { log "no real node $n"; return 0; }
  i=$(index_of "$n")
  kill_node "$n" >/dev/null
  reset_state "$n"
  ip link del "$BRIDGE$i" 2>/dev/null || true
  kapi DELETE /api/v1/nodes/$n >/dev/null 2>&1 || true
  rm -rf "${NODES:?}/$n"
  log "node $n removed"
  last_out
}

# After the last node and kube-proxy of this cluster: its host-wide rules; the KUBE-* chains and
# sysctls once no cluster on this host has real nodes any more.
last_out() {
  ls -d $NODES/*/ >/dev/null 2>&1 && return 0
  rm -f $NODES/.lock
  [[ -f $RUN/kube-proxy.pid ]] && kill -0 "$(cat $RUN/kube-proxy.pid)" 2>/dev/null && return 0
  rmdir $NODES 2>/dev/null || true
  rm -rf /run/backstop-$(api_port) 2>/dev/null || true
  iptables -D FORWARD -s $NET.0.0/16 -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -d $NET.0.0/16 -j ACCEPT 2>/dev/null || true
  if ! ls -d /run/backstop-[0-9]*/ >/dev/null 2>&1; then host_cleanup; fi
  return 0
}

proxy_up() {
  need_root
  [[ -x $BIN/kube-proxy ]] || deps
  local pf=$RUN/kube-proxy.pid
  if [[ -f $pf ]] && kill -0 "$(cat $pf)" 2>/dev/null; then return 0; fi
  local other
  for other in /run/backstop-*/kube-proxy.pid; do
    [[ -f $other && $other != "/run/backstop-$(api_port)/kube-proxy.pid" ]] && kill -0 "$(cat $other)" 2>/dev/null \
      && die "another cluster's kube-proxy runs on this host ($other): iptables are host-wide, stop that cluster first"
  done
  net_setup
  install_self
  setsid nohup $BIN/kube-proxy --kubeconfig=$KUBECONFIG_ADMIN --proxy-mode=iptables \
    --cluster-cidr=$NET.0.0/16 --hostname-override="$(hostname)" --bind-address="$(host_ip)" \
    --healthz-bind-address=127.0.0.1:$((PORT_BASE + 6)) --metrics-bind-address=127.0.0.1:$((PORT_BASE - 1)) \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --v=1 > $RUN/kube-proxy.log 2>&1 < /dev/null &
  echo $! > $pf
  mkdir -p /run/backstop-$(api_port) && cp $pf /run/backstop-$(api_port)/kube-proxy.pid
  # ready when the kubernetes Service's rule is in place
  for _ in $(seq 100); do
    iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q 'default/kubernetes:https' && break
    kill -0 "$(cat $pf)" 2>/dev/null || { tail -5 $RUN/kube-proxy.log >&2; die "kube-proxy exited"; }
    sleep 0.2
  done
  log "kube-proxy (iptables mode) pid $(cat $pf): 10.0.0.1:443 -> $(host_ip):$(api_port)"
}

proxy_down() {
  local pf=$RUN/kube-proxy.pid p
  [[ -f $pf ]] || return 0
  p=$(cat $pf)
  if kill -0 "$p" 2>/dev/null; then
    kill "$p"; for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  fi
  [[ -x $BIN/kube-proxy ]] && $BIN/kube-proxy --cleanup --proxy-mode=iptables >/dev/null 2>&1 || true
  rm -f $pf /run/backstop-$(api_port)/kube-proxy.pid
  log "kube-proxy stopped, its iptables chains removed"
  last_out
}

# What kubelets and kube-proxy leave on the host once none of them runs any more: their KUBE-*
# iptables chains (kube-proxy --cleanup misses the kubelet's) and the sysctls they set.
host_cleanup() {
  local table chain rule
  for table in filter nat mangle; do
    iptables-save -t $table 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' \
      | while read -r rule; do eval "iptables -t $table ${rule/-A /-D }" 2>/dev/null || true; done || true
    for chain in $(iptables-save -t $table 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
      iptables -t $table -F "$chain" 2>/dev/null || true
    done
    for chain in $(iptables-save -t $table 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
      iptables -t $table -X "$chain" 2>/dev/null || true
    done
  done
  if [[ -f $SYSCTL_ORIG ]]; then
    read -r fwd localnet < $SYSCTL_ORIG || true
    [[ -n ${fwd:-} ]] && sysctl -qw net.ipv4.ip_forward=$fwd
    [[ -n ${localnet:-} ]] && sysctl -qw net.ipv4.conf.all.route_localnet=$localnet
    rm -f $SYSCTL_ORIG
  fi
  return 0
}

down_all() {
  local d
  proxy_down
  for d in $NODES/*/; do [[ -d $d ]] && down "$(basename $d)"; done
  last_out
  rm -f $RUN/real-node.env $RUN/real-node.sh
}

load() { # name|all tar
  local target=$1 tar=$2 n
  [[ -f $tar ]] || die "no image archive $tar"
  if [[ $target == all ]]; then
    for n in $(ls $NODES 2>/dev/null); do alive "$n" && load "$n" "$tar"; done
    return 0
  fi
  alive "$target" || die "node $target is not running"
  ctr -a "$(sock $target)" -n k8s.io images import "$tar" >/dev/null \
    || die "importing $tar into $target failed"
  local id=${tar%.tar}.id
  [[ -f $id ]] && cp "$id" "$NODES/$target/imported-$(basename "${tar%.tar}")"
  return 0
}

list() {
  local n
  for n in $(ls $NODES 2>/dev/null); do
    if alive "$n"; then echo "$n $(index_of $n) running"; else echo "$n $(index_of $n) killed"; fi
  done
}

cmd=${1:-}; shift || true
# keep the copy next to the kubeconfig (used by the test kit's `nodes` commands) as new as this script
if [[ -d $NODES && ! ${BASH_SOURCE[0]} -ef $RUN/real-node.sh ]]; then install_self; fi
case $cmd in
  deps) deps ;;
  builds) with_build_lock builds ;;   # deps without apt and root
  up) up "$@" ;;
  kill) need_root; kill_node "${1:?usage: kill NAME}" ;;
  revive) revive "${1:?usage: revive NAME}" ;;
  down) down "${1:?usage: down NAME}" ;;
  down-all) need_root; down_all ;;
  load) need_root; load "${1:?usage: load NAME|all TAR}" "${2:?usage: load NAME|all TAR}" ;;
  proxy-up) proxy_up ;;
  proxy-down) need_root; proxy_down ;;
  list) list ;;
  net-info) echo "$NET $PORT_BASE $BRIDGE" ;;
  *) echo "usage: $0 deps|up NAME [INDEX]|kill NAME|revive NAME|down NAME|down-all|load NAME|all TAR|proxy-up|proxy-down|list" >&2; exit 2 ;;
esac
