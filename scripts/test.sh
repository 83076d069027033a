#!/usr/bin/env bash
# The whole test suite, as README.md documents it: build, start what the tests need
# beyond the machine's own services, run every vitest project, stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export RABBITMQ_URL="${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672}"
npm run build --silent
npx biome check .
npx vitest run "$@"
# The serial group, after every project and alone (a full run only): a chaos run with a
# real PostgreSQL restart, on a cluster it creates for itself (the shared one is never
# restarted); it checks the server is back before it ends.
if [ "$#" -eq 0 ]; then
  bash test/chaos/pgRestart.sh
fi
