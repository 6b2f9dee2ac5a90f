#!/usr/bin/env bash
# Fetches Kafka Connect (pom.xml) from Maven Central into ~/.m2 and prints its classpath.
# Cached in target/.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -s target/classpath.txt ] || [ pom.xml -nt target/classpath.txt ]; then
  mkdir -p target
  mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >&2
fi
cat target/classpath.txt
