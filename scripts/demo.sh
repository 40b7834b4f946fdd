#!/usr/bin/env bash
# npm run demo: install and start the services, then run the original scenario.
#
# Against services you already run, configure them instead (environment or a services file);
# a service that is configured is used as it is and never started here:
#   ONCEFLOW_TEMPORAL_ADDRESS  → no local Temporal     ONCEFLOW_KAFKA_BROKERS → no local Kafka
#   ONCEFLOW_MYSQL_HOST        → no local MariaDB      ONCEFLOW_SERVICES_ENV  → none of them
# (plus the TLS/SASL settings and credentials those services need: docs/deploy.md).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d node_modules ]] || npm ci --no-audit --no-fund
local_services=()
if [[ -n ${ONCEFLOW_SERVICES_ENV:-} ]]; then
  echo "[demo] using the services in $ONCEFLOW_SERVICES_ENV; starting none" >&2
else
  [[ -n ${ONCEFLOW_TEMPORAL_ADDRESS:-} ]] || local_services+=(temporal)
  [[ -n ${ONCEFLOW_KAFKA_BROKERS:-} ]] || local_services+=(kafka)
  [[ -n ${ONCEFLOW_MYSQL_HOST:-} ]] || local_services+=(mariadb)
  if ((${#local_services[@]} < 3)); then
    echo "[demo] configured services are used as they are; starting locally: ${local_services[*]:-none}" >&2
  fi
fi
((${#local_services[@]} == 0)) || bash scripts/services.sh up "${local_services[@]}"
exec npx tsx scripts/demo.ts "$@"
