#!/usr/bin/env bash
# The Java consumer on KIP-848's consumer group protocol (group.protocol=consumer), with each
# server-side assignor: ci/clients/java/src/main/java/kaas/ConsumerProtocol.java; and subscribed by a
# regular expression the broker resolves (SubscriptionPattern): RegexSubscription.java.
set -euo pipefail
cp=$(bash "$(dirname "$0")/java/build.sh")
java -cp "$cp" kaas.ConsumerProtocol "$1" uniform
java -cp "$cp" kaas.ConsumerProtocol "$1" range
java -cp "$cp" kaas.RegexSubscription "$1"
