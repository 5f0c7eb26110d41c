#!/usr/bin/env bash
# hack/get-kubectl.sh - put a kubectl that matches the local API server into .tools/bin (or $1).
# The API server is v1.20.2, built from Debian's kubernetes source package (hack/local-cluster.sh);
# kubectl is built from the same tree (one more `go build ./cmd/kubectl`, ~22 s on top of the
# cluster build's cache), so client and server are the same version instead of 14 minors apart.
# Idempotent: a kubectl of that version already in place is kept.
set -euo pipefail
DEST=${1:-.tools/bin}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WANT=$(sed -n 's/^K8S_VERSION=//p' "$HERE/local-cluster.sh")
if [ -x "$DEST/kubectl" ] && [ "$("$DEST/kubectl" version --client --short 2>/dev/null)" = "Client Version: $WANT" ]; then
  exit 0
fi
"$HERE/local-cluster.sh" kubectl "$DEST"
"$DEST/kubectl" version --client --short
