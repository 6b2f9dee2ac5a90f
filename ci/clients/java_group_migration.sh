#!/usr/bin/env bash
# A live group's online migration from the classic protocol to KIP-848's consumer protocol and
# back, with the Java consumer, its classic members eager (range) and cooperative:
# ci/clients/java/src/main/java/kaas/GroupMigration.java.
set -euo pipefail
cp=$(bash "$(dirname "$0")/java/build.sh")
java -cp "$cp" kaas.GroupMigration "$1" range
java -cp "$cp" kaas.GroupMigration "$1" cooperative-sticky
