#!/usr/bin/env bash
# The Kubernetes manifests of deploy/kubernetes/, checked against the Kubernetes API schemas
# (kubernetes-validate, which bundles them: no cluster and no network needed but PyPI once).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=ci/.venv-deploy
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'kubernetes-validate==1.37.0'
fi
for manifest in deploy/kubernetes/*.yaml; do
  echo "== $manifest"
  "$venv/bin/kubernetes-validate" --strict --kubernetes-version 1.37.0 "$manifest"
done
