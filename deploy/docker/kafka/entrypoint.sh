#!/bin/sh
# The Kafka image's entrypoint, with the apache/kafka image's conventions:
# every KAFKA_<NAME> variable becomes the broker property <name> (lower
# case, _ -> .), CLUSTER_ID formats the storage on first start, and
# KAFKA_HEAP_OPTS sizes the JVM. One node, KRaft, no ZooKeeper.
set -eu
: "${CLUSTER_ID:?set CLUSTER_ID (22 characters, base64url)}"
conf=/opt/kafka/config/server.properties
mkdir -p /opt/kafka/config
: > "$conf"
env | sort | while IFS='=' read -r name value; do
  case "$name" in
    KAFKA_HEAP_OPTS|KAFKA_JVM_OPTS|KAFKA_OPTS) continue ;;
    KAFKA_*) key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z_' 'a-z.'); printf '%s=%s\n' "$key" "$value" >> "$conf" ;;
  esac
done
grep -q '^log.dirs=' "$conf" || echo "log.dirs=/var/lib/kafka/data" >> "$conf"
logdirs=$(sed -n 's/^log.dirs=//p' "$conf")
cp=/opt/kafka/lib/*
if [ ! -f "$logdirs/meta.properties" ]; then
  echo "kafka: formatting $logdirs for cluster $CLUSTER_ID"
  java -Xmx256m -cp "$cp" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$conf" --ignore-formatted
fi
# shellcheck disable=SC2086
exec java ${KAFKA_HEAP_OPTS:--Xms512m -Xmx512m} -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError \
  -Djava.awt.headless=true ${KAFKA_JVM_OPTS:-} -cp "$cp" kafka.Kafka "$conf"
