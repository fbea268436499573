#!/bin/sh
# Shows README's test command working on a host with no PostgreSQL or Redis (issue 38): runs the suite's
# PostgreSQL-dialect and Redis tests in a network namespace of their own, where nothing answers on
# 127.0.0.1:5432 or :6379, so the suite's global setup (test/services.ts) starts throwaway servers there
# and removes them at the end. As root. Other test files may be given as arguments.
set -eu
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  set -- test/platform/store.test.ts test/platform/redis.test.ts test/platform/scale-out.test.ts src/platform/jobs.test.ts src/platform/jobs-durability.test.ts
fi
ns="nube-bare-$$"
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT INT TERM
ip netns exec "$ns" ip link set lo up
for port in 5432 6379; do
  if ! ip netns exec "$ns" node -e "require('net').connect($port, '127.0.0.1').on('connect', () => process.exit(1)).on('error', () => process.exit(0))"; then
    echo "something answers on 127.0.0.1:$port in the namespace" >&2
    exit 1
  fi
done
echo "in network namespace $ns: nothing answers on 127.0.0.1:5432 or :6379"
ip netns exec "$ns" env -u NUBE_TEST_PG_URL -u NUBE_TEST_REDIS_URL npx vitest run "$@"
