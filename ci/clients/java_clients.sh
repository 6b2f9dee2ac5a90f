#!/usr/bin/env bash
# The Java client (kafka-clients 4.x) against kaas: ci/clients/java/src/main/java/kaas/JavaClients.java.
set -euo pipefail
cp=$(bash "$(dirname "$0")/java/build.sh")
exec java -cp "$cp" kaas.JavaClients "$1"
