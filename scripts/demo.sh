#!/usr/bin/env bash
# npm run demo: install and start the services, then run the original scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d node_modules ]] || npm ci --no-audit --no-fund
bash scripts/services.sh up
exec npx tsx scripts/demo.ts "$@"
