#!/usr/bin/env bash
# A live group's online migration from the classic protocol to KIP-848's consumer protocol and
# back, with the Java consumer: ci/clients/java/src/main/java/kaas/GroupMigration.java. CI runs
# it with cooperative classic members (their owned partitions cross the migration); the
# simulator's classic members are eager, and `GroupMigration BOOTSTRAP range` checks eager
# Java members by hand (about 23 s a run on the cluster).
set -euo pipefail
cp=$(bash "$(dirname "$0")/java/build.sh")
java -cp "$cp" kaas.GroupMigration "$1" cooperative-sticky
