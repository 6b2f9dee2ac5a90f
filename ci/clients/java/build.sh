#!/usr/bin/env bash
# Fetches kafka-clients and kafka-tools (pom.xml) from Maven Central into ~/.m2 and compiles
# the checks in src/ against them; prints the classpath to run them with. Cached in target/.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -s target/classpath.txt ] || [ pom.xml -nt target/classpath.txt ]; then
  mvn -q -B dependency:build-classpath -Dmdep.outputFile=target/classpath.txt >&2
fi
sources=(src/main/java/kaas/*.java)
if [ ! -d target/classes ] || [ -n "$(find "${sources[@]}" -newer target/classes -print -quit)" ]; then
  rm -rf target/classes && mkdir -p target/classes
  javac -d target/classes -cp "$(cat target/classpath.txt)" "${sources[@]}" >&2
  touch target/classes
fi
echo "$PWD/target/classes:$(cat target/classpath.txt)"
