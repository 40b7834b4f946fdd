#!/usr/bin/env bash
# npm test: install what is missing, start the services, type-check, lint, run every tier.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then npm ci --no-audit --no-fund; fi
bash scripts/services.sh up
# The Web UI test drives Debian's Chromium (playwright-core never downloads a browser).
if ! command -v chromium >/dev/null; then
  echo "[test] installing Debian's chromium for the Web UI test"
  apt-cache show chromium >/dev/null 2>&1 || apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
npx tsc --noEmit -p .
npx eslint src scripts test tools examples --ext .ts
mkdir -p test/.tmp
npx tsx scripts/bundle-workflows.ts test/.tmp/workflow-bundle.js
export ONCEFLOW_WORKFLOW_BUNDLE=$PWD/test/.tmp/workflow-bundle.js
files=("$@")
if ((${#files[@]} == 0)); then files=(test/*.test.ts); fi
exec node --import tsx --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
