#!/usr/bin/env bash
# npm test:            install what is missing, start the services, type-check, lint, run every tier.
# npm run test:unit:   the unit tier only (--unit): no services, no Chromium, no type-check or lint.
# npm run test:workflows: the workflow tier only (--workflows): the workflow loops against stub
#                      activities on a Temporal dev server of their own; no services, no type-check or lint.
# scripts/test.sh F…:  those test files; services, type-check and lint only if one of them is not
#                      unit tier, Chromium only for test/ui.test.ts.
set -euo pipefail
cd "$(dirname "$0")/.."

# The unit tier: the test files that need no service (the one place that says so). Everything
# else under test/*.test.ts needs the services of scripts/services.sh.
UNIT_TIER=(test/unit.test.ts test/protocol.test.ts test/replay.test.ts test/docs.test.ts test/harness.test.ts)
# The workflow tier: no service either, but a Temporal dev server of its own, started by the test
# (TestWorkflowEnvironment) from the Temporal CLI that scripts/services.sh builds (never downloaded).
WORKFLOW_TIER=(test/workflows.test.ts)

files=()
for arg in "$@"; do
  case $arg in
    --unit) files+=("${UNIT_TIER[@]}") ;;
    --workflows) files+=("${WORKFLOW_TIER[@]}") ;;
    *) files+=("$arg") ;;
  esac
done
if ((${#files[@]} == 0)); then files=(test/*.test.ts); fi
for f in "${UNIT_TIER[@]}" "${WORKFLOW_TIER[@]}"; do
  [[ -f $f ]] || { echo "[test] $f is listed in a tier of scripts/test.sh but does not exist" >&2; exit 2; }
done

in_tier() { # file tier-member...
  local f=$1 u; shift
  for u in "$@"; do [[ $f == "$u" || $f == "./$u" || $f == "$PWD/$u" ]] && return 0; done
  return 1
}
needs_services=0
needs_temporal_cli=0
needs_chromium=0
for f in "${files[@]}"; do
  if in_tier "$f" "${WORKFLOW_TIER[@]}"; then needs_temporal_cli=1; elif ! in_tier "$f" "${UNIT_TIER[@]}"; then needs_services=1; fi
  [[ $f == *ui.test.ts ]] && needs_chromium=1
done

if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then npm ci --no-audit --no-fund; fi
if ((needs_services)); then
  bash scripts/services.sh up
else
  # Unit and workflow tiers: every service points at a closed port and no services file is read,
  # so a test that needs a service fails here instead of passing on a machine where they happen to run.
  export ONCEFLOW_TEMPORAL_ADDRESS=127.0.0.1:1 ONCEFLOW_KAFKA_BROKERS=127.0.0.1:1 ONCEFLOW_MYSQL_HOST=127.0.0.1 ONCEFLOW_MYSQL_PORT=1 ONCEFLOW_SERVICES_ENV=/dev/null
fi
if ((needs_temporal_cli)) && [[ -z ${ONCEFLOW_TEMPORAL_BIN:-} ]]; then
  bash scripts/services.sh install temporal
  ONCEFLOW_TEMPORAL_BIN=$(bash scripts/services.sh bin temporal)
  export ONCEFLOW_TEMPORAL_BIN
fi
# The Web UI test drives Debian's Chromium (playwright-core never downloads a browser).
if ((needs_chromium)) && ! command -v chromium >/dev/null; then
  echo "[test] installing Debian's chromium for the Web UI test"
  apt-cache show chromium >/dev/null 2>&1 || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
if ((needs_services)); then
  # Names XA branches an earlier run left prepared on this stack (it only reports).
  npx tsx test/support/leftovers.ts
  npx tsc --noEmit -p .
  # The onceflow bin runs the compiled package (dist/), as an installed copy would.
  rm -rf dist && npx tsc -p tsconfig.build.json
  npx eslint src scripts test tools examples --ext .ts
fi
mkdir -p test/.tmp
# The replay tests and the test workers use one prebuilt workflow bundle (no server needed).
npx tsx scripts/bundle-workflows.ts test/.tmp/workflow-bundle.js
export ONCEFLOW_WORKFLOW_BUNDLE=$PWD/test/.tmp/workflow-bundle.js
rc=0
node --import tsx --test --test-concurrency=1 --test-reporter=spec "${files[@]}" || rc=$?
if ((rc != 0 && needs_services)); then
  # A failure's last lines say what the services were doing: a service that died mid-run shows
  # up as every later test failing to connect, and this names why (CI shows the output's end).
  echo "[test] failed (exit $rc); the services of this run now:"
  bash scripts/services.sh diagnose || true
fi
exit $rc
