#!/usr/bin/env bash
# Fetch the Apache Kafka broker jars (and their runtime dependencies) from Maven Central
# into lib/. Idempotent: skipped when lib/ already holds the jars for the current pom.xml.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

stamp="lib/.complete"
want="$(sha256sum pom.xml | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

command -v mvn >/dev/null || { echo "fetch.sh: mvn (Maven) is required" >&2; exit 1; }
command -v java >/dev/null || { echo "fetch.sh: java (17+) is required" >&2; exit 1; }

# Fetch into a temporary folder and swap it in, so an interrupted download never leaves
# a half-filled lib/ that looks complete.
rm -rf lib.tmp
if ! mvn -q -B dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib.tmp >fetch.log 2>&1; then
  cat fetch.log >&2
  echo "fetch.sh: mvn dependency:copy-dependencies failed" >&2
  exit 1
fi
rm -f fetch.log
ls lib.tmp/kafka_2.13-*.jar >/dev/null
rm -rf lib
mv lib.tmp lib
echo "$want" >"$stamp"
echo "fetch.sh: Kafka jars in $here/lib ($(ls lib/*.jar | wc -l) jars)"
