#!/usr/bin/env bash
# Kafka's share consumer (KIP-932) in implicit and explicit acknowledgement modes, several
# consumers of one group, and one closed holding records: ci/clients/java/src/main/java/kaas/ShareConsumers.java.
set -euo pipefail
cp=$(bash "$(dirname "$0")/java/build.sh")
java -cp "$cp" kaas.ShareConsumers "$1"
