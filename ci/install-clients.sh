#!/usr/bin/env bash
# Installs the clients every script uses, once, before any of them runs (ci/test.sh runs
# scripts side by side, and two first runs must not both build ci/.venv): the Python clients
# in ci/.venv (PyPI), the Node.js clients in ci/clients/node/node_modules (npm), the Java
# client, Kafka's tools and Kafka Connect in ~/.m2 (Maven Central) with the Java checks
# compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x ci/.venv/bin/python ]; then
  python3 -m venv ci/.venv
  ci/.venv/bin/pip install --quiet -r ci/clients/requirements.txt
fi
if [ ! -d ci/clients/node/node_modules ]; then
  (cd ci/clients/node && npm install --no-audit --no-fund --silent)
fi
bash ci/clients/java/build.sh > /dev/null
bash ci/clients/connect/classpath.sh > /dev/null
