#!/usr/bin/env bash
# hack/images.sh - build Backstop's images on this machine, never pulling from a registry, and
# load them into every real node of the local cluster (hack/real-node.sh).
#
#   backstop/base:bookworm    Debian bookworm (debootstrap --variant=minbase) with python3, venv,
#                             tini and the host's CA bundle (package registries may sit behind a
#                             TLS proxy whose CA only the host trusts), `docker import`ed
#   backstop/operator:0.2.0   operator/Dockerfile on that base: the operator only, LEAN (no
#                             pyspark, no JRE; the Spark job is to get its own image)
#   backstop/runtime:0.2.0    runtime/Dockerfile on that base: the task runtime
#   backstop/spark:0.2.0      operator/Dockerfile.spark on that base: the operator plus pyspark
#                             and Debian's openjdk-17-jre-headless, for the re-optimization Job
#                             (reoptimization.mode: job); not built by default (IMAGES=spark).
#                             1.5 GB: saved to $BACKSTOP_CACHE/images/spark.tar, NOT load/, so
#                             nodes started later do not import it; it goes into the running
#                             nodes of the cluster only (again: hack/real-node.sh load all <tar>)
#
# Each image is saved to $BACKSTOP_CACHE/images/load/<name>.tar; hack/real-node.sh imports every
# archive there into each node it starts, and this script imports them into the running nodes of
# the cluster in $K8S_RUN_DIR (when it has any). Python packages come from the package registry
# during the build (pip --require-hashes), exactly the files of each image's lock (make lock);
# each image's SBOM (CycloneDX JSON) goes to $BACKSTOP_CACHE/images/sbom/<name>.cdx.json (sbom
# below; needs .venv: make install). Needs root and Docker (Debian's docker.io): a dockerd that
# is not running is started for the build (--iptables=false --bridge=none: it touches no host network
# state; builds use the host network) and stopped again afterwards.
#
# Env: BACKSTOP_CACHE (~/.cache/backstop), K8S_RUN_DIR, DEBIAN_MIRROR (from /etc/apt sources, else
#      http://deb.debian.org/debian), IMAGES ("base operator runtime"; add spark for the Spark image)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${BACKSTOP_CACHE:-$HOME/.cache/backstop}
OUT=$CACHE/images/load
VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/backstop/Chart.yaml)
BASE=backstop/base:bookworm
OPERATOR=backstop/operator:$VERSION
RUNTIME=backstop/runtime:$VERSION
SPARK=backstop/spark:$VERSION
IMAGES=${IMAGES:-base operator runtime}
T0=$SECONDS

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { echo "error: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "building images needs root (debootstrap, dockerd)"

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v dockerd >/dev/null || need+=(docker.io)
if ((${#need[@]})); then
  log "apt-get install ${need[*]} (first run only)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
fi
DOCKER=/usr/bin/docker
[[ -x $DOCKER ]] || DOCKER=docker

started_dockerd=""
stop_dockerd() {
  [[ -n $started_dockerd ]] || return 0
  kill "$started_dockerd" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$started_dockerd" 2>/dev/null || true
  log "dockerd stopped (pid $started_dockerd)"
}
trap stop_dockerd EXIT
if ! $DOCKER info >/dev/null 2>&1; then
  mkdir -p $CACHE/images
  setsid dockerd --iptables=false --bridge=none > $CACHE/images/dockerd.log 2>&1 < /dev/null &
  started_dockerd=$!
  for _ in $(seq 150); do $DOCKER info >/dev/null 2>&1 && break; sleep 0.2; done
  $DOCKER info >/dev/null 2>&1 || { tail -5 $CACHE/images/dockerd.log >&2; die "dockerd did not start"; }
  log "dockerd started for the build (pid $started_dockerd)"
fi

mirror() {
  [[ -n ${DEBIAN_MIRROR:-} ]] && { echo "$DEBIAN_MIRROR"; return; }
  local m
  m=$(sed -n 's#^URIs: *\(http[^ ]*/debian\)/*$#\1#p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [[ -z $m ]] && m=$(sed -n 's#^deb \(\[[^]]*\] \)\{0,1\}\(http[^ ]*/debian\)/* .*#\2#p' /etc/apt/sources.list 2>/dev/null | head -1)
  echo "${m:-http://deb.debian.org/debian}"
}

build_base() {
  if $DOCKER image inspect $BASE >/dev/null 2>&1; then log "$BASE: present"; return 0; fi
  local t=$SECONDS root
  root=$(mktemp -d $CACHE/images/rootfs.XXXX)
  log "$BASE: debootstrap bookworm (minbase + python3, venv, tini) from $(mirror)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,tini,passwd \
    bookworm "$root" "$(mirror)" > $CACHE/images/debootstrap.log 2>&1 \
    || { tail -5 $CACHE/images/debootstrap.log >&2; rm -rf "$root"; die "debootstrap failed"; }
  # the host's CA bundle: pip in the build reaches the registry through the same TLS proxy
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
    "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" -c . | $DOCKER import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' - $BASE >/dev/null
  rm -rf "$root"
  log "$BASE: built in $((SECONDS - t))s"
}

# The operator and Spark images' context is the product only (pyproject.toml, README.md, planners,
# operator, runtime): never testkit/ (the simulators and test harnesses), so `pip install .` in the
# image finds no backstop_testkit (tests/unit/test_layout.py checks it).
build() { # tag dockerfile-in-context context-paths...   (context = a tar of exactly these paths)
  local tag=$1 file=$2 dir=$3; shift 3
  local t=$SECONDS
  log "$tag: docker build -f $file (base $BASE)"
  tar -C "$dir" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' -c "$@" \
    | DOCKER_BUILDKIT=0 $DOCKER build -q --network host --build-arg BASE_IMAGE=$BASE -f "$file" -t "$tag" - >/dev/null
  log "$tag: built in $((SECONDS - t))s"
}

save() { # tag name   (into $OUT)
  local id old=""
  id=$($DOCKER image inspect -f '{{.Id}}' "$1")
  [[ -f $OUT/$2.id ]] && old=$(cat $OUT/$2.id)
  if [[ $id != "$old" || ! -f $OUT/$2.tar ]]; then
    mkdir -p $OUT
    $DOCKER save "$1" -o $OUT/$2.tar.tmp && mv $OUT/$2.tar.tmp $OUT/$2.tar
    echo "$id" > $OUT/$2.id
  fi
}

# A CycloneDX SBOM of the Python packages each image has installed, as installed: its /opt/venv
# copied out of a container that never starts, read by `cyclonedx-py environment` (cyclonedx-bom,
# the dev extra) with this machine's CPython 3.11 as the copy's interpreter (the images run
# Debian bookworm's 3.11; only the metadata of site-packages is read). Into
# $CACHE/images/sbom/<name>.cdx.json, again only when the image changed (<name>.id).
SBOM=$CACHE/images/sbom
CYCLONEDX=${CYCLONEDX:-$PWD/.venv/bin/cyclonedx-py}
sbom() { # tag name
  local id py tmp cid
  id=$($DOCKER image inspect -f '{{.Id}}' "$1")
  [[ -f $SBOM/$2.cdx.json && $(cat $SBOM/$2.id 2>/dev/null) == "$id" ]] && return 0
  [[ -x $CYCLONEDX ]] || die "$CYCLONEDX is missing: make install (cyclonedx-bom, the dev extra)"
  py=$("$(dirname "$CYCLONEDX")/python" -c 'import sys; print(sys._base_executable)')
  mkdir -p $SBOM && tmp=$(mktemp -d $SBOM/venv.XXXX)
  cid=$($DOCKER create "$1")
  $DOCKER cp "$cid:/opt/venv" "$tmp/venv" || { $DOCKER rm "$cid" >/dev/null; rm -rf "$tmp"; die "$1: docker cp /opt/venv"; }
  $DOCKER rm "$cid" >/dev/null
  rm -f "$tmp/venv/bin/python"* && ln -s "$py" "$tmp/venv/bin/python"
  sed -i "s#^home = .*#home = $(dirname "$py")#" "$tmp/venv/pyvenv.cfg"
  "$CYCLONEDX" environment --output-reproducible -o "$tmp/bom.json" "$tmp/venv" \
    || { rm -rf "$tmp"; die "$1: cyclonedx-py environment"; }
  # the SBOM's subject: the image (cyclonedx-py names no root component without a pyproject)
  "$py" - "$tmp/bom.json" "$1" > "$SBOM/$2.cdx.json" <<'PY'
import json, sys
bom = json.load(open(sys.argv[1]))
name, version = sys.argv[2].rsplit(":", 1)
bom.setdefault("metadata", {})["component"] = {
    "type": "container", "bom-ref": sys.argv[2], "name": name, "version": version}
json.dump(bom, sys.stdout, indent=2)
PY
  echo "$id" > $SBOM/$2.id
  rm -rf "$tmp"
  log "$1: SBOM $SBOM/$2.cdx.json ($(grep -c '"purl"' $SBOM/$2.cdx.json) packages)"
}

mkdir -p $CACHE/images
for img in $IMAGES; do
  case $img in
    base) build_base ;;
    operator) build_base; build $OPERATOR operator/Dockerfile . pyproject.toml README.md planners operator runtime
      save $OPERATOR operator; sbom $OPERATOR operator ;;
    runtime)
      [[ -f runtime/Dockerfile ]] || die "runtime/Dockerfile is missing"
      build_base; build $RUNTIME Dockerfile runtime .; save $RUNTIME runtime; sbom $RUNTIME runtime ;;
    spark) build_base; build $SPARK operator/Dockerfile.spark . pyproject.toml README.md planners operator runtime
      OUT=$CACHE/images save $SPARK spark; sbom $SPARK spark ;;
    *) die "IMAGES: unknown image '$img' (base, operator, runtime, spark)" ;;
  esac
done
for img in $IMAGES; do
  case $img in
    operator) t=$OPERATOR ;; runtime) t=$RUNTIME ;; spark) t=$SPARK ;; *) t=$BASE ;;
  esac
  printf '%-28s %s MB\n' "$t" $(($($DOCKER image inspect -f '{{.Size}}' $t) / 1000000))
done

# into the real nodes of the cluster (if it has any)
RUN=${K8S_RUN_DIR:-$CACHE/run}
tars=($OUT/*.tar)
[[ " $IMAGES " == *" spark "* ]] && tars+=("$CACHE/images/spark.tar")
if [[ -d $RUN/nodes ]] && [[ -f ${tars[0]} ]]; then
  t=$SECONDS
  for tar in "${tars[@]}"; do K8S_RUN_DIR=$RUN hack/real-node.sh load all "$tar"; done
  log "imported into the real nodes of $RUN in $((SECONDS - t))s"
fi
log "images done in $((SECONDS - T0))s"
