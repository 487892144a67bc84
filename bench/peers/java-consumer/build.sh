#!/usr/bin/env bash
# The official Java client contender (JavaConsumer.java): resolves the client's runtime
# classpath at the broker's version with Maven, offline (the broker's own resolution by
# scripts/services.sh filled ~/.m2 with it), once per pom hash, and compiles the one class
# with javac when the source changed.
#
# Usage: bench/peers/java-consumer/build.sh    prints the `java -cp` value on the last line
#   java -cp "$(bench/peers/java-consumer/build.sh | tail -1)" JavaConsumer <url> <topic> <count> <queue> <ack-every>
#
# Environment: FC_STATE_DIR (default <repo>/.services): the classpath and classes go under
# $FC_STATE_DIR/java-consumer.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${FC_STATE_DIR:-$ROOT/.services}/java-consumer
mkdir -p "$OUT"

key=$(sha256sum "$HERE/pom.xml" | cut -c1-16)
cpfile=$OUT/classpath-$key.txt
if [[ ! -s $cpfile ]]; then
  rm -f "$OUT"/classpath-*.txt
  # The broker's settings: the same repository id, so that Maven accepts its cached jars offline.
  mvn -o -B -q -s "$ROOT/services/pulsar/settings.xml" -f "$HERE/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:build-classpath \
    -Dmdep.includeScope=runtime -Dmdep.outputFile="$cpfile.tmp" </dev/null >"$OUT/mvn.log" 2>&1 ||
    { tail -n 30 "$OUT/mvn.log" >&2; echo "java-consumer: mvn could not resolve the client classpath (run scripts/services.sh start first)" >&2; exit 1; }
  mv "$cpfile.tmp" "$cpfile"
fi
classes=$OUT/classes
if [[ ! $classes/JavaConsumer.class -nt $HERE/JavaConsumer.java || ! $classes/JavaConsumer.class -nt $cpfile ]]; then
  mkdir -p "$classes"
  javac -nowarn -d "$classes" -cp "$(<"$cpfile")" "$HERE/JavaConsumer.java"
fi
echo "$classes:$(<"$cpfile")"
