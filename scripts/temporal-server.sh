#!/usr/bin/env bash
# A real Temporal server with mutual TLS for the secured local stack (issue 14):
# tools/temporal-server (go.temporal.io/server v1.29.1, the version Temporal CLI v1.5.1 pins)
# with SQLite persistence. The frontend serves TLS and requires a client certificate signed by
# the stack's CA; internode traffic stays plain on loopback inside the one process (see the
# comment at the top of tools/temporal-server/main.go for what is and is not encrypted).
#
#   scripts/temporal-server.sh build    build the binary if missing or its source changed
#   scripts/temporal-server.sh up       build, make the certificates, start if stopped, wait until SERVING
#   scripts/temporal-server.sh down     SIGTERM, then SIGKILL after 60 s
#   scripts/temporal-server.sh kill     SIGKILL (fault injection)
#   scripts/temporal-server.sh status   one line; exit 0 iff up and SERVING
#
# Environment:
#   ONCEFLOW_HOME              cache for builds (default ~/.cache/onceflow); the binary is
#                              $ONCEFLOW_HOME/temporal-server-v1.29.1/temporal-server
#   ONCEFLOW_RUN_DIR           run directory (default $ONCEFLOW_HOME/run-secure; do not share
#                              it with scripts/services.sh's dev server, which also uses temporal/)
#                              data, pid and log: $ONCEFLOW_RUN_DIR/temporal/{temporal.db,pid,temporal.log}
#   ONCEFLOW_CERTS             certificates from scripts/certs.sh (default $ONCEFLOW_RUN_DIR/certs;
#                              made by `up` if missing): ca.crt, server.crt/key, client.crt/key
#   ONCEFLOW_TEMPORAL_PORT     frontend gRPC with mTLS on 127.0.0.1 (default 7243)
#   ONCEFLOW_TEMPORAL_UI_PORT  Web UI, plain HTTP on 127.0.0.1 (default 8243; 0 = no UI)
#
# A client connects to 127.0.0.1:$ONCEFLOW_TEMPORAL_PORT (or localhost:...) trusting ca.crt and
# presenting client.crt/client.key; namespace `default` with the Onceflow* search attributes.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
ONCEFLOW_HOME=${ONCEFLOW_HOME:-$HOME/.cache/onceflow}
RUN=${ONCEFLOW_RUN_DIR:-$ONCEFLOW_HOME/run-secure}
CERTS=${ONCEFLOW_CERTS:-$RUN/certs}
PORT=${ONCEFLOW_TEMPORAL_PORT:-7243}
UI_PORT=${ONCEFLOW_TEMPORAL_UI_PORT:-8243}

SERVER_VERSION=v1.29.1
SRC=$REPO/tools/temporal-server
BIN_DIR=$ONCEFLOW_HOME/temporal-server-$SERVER_VERSION
BIN=$BIN_DIR/temporal-server
CLI_VERSION=${ONCEFLOW_TEMPORAL_CLI_VERSION:-v1.5.1}
CLI=$ONCEFLOW_HOME/temporal-$CLI_VERSION/temporal # the same CLI scripts/services.sh builds
DIR=$RUN/temporal
LOG=$DIR/temporal.log
PID_FILE=$DIR/pid

log() { printf '[temporal-server] %s\n' "$*" >&2; }
die() { printf '[temporal-server] error: %s\n' "$*" >&2; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# shellcheck source=scripts/process.sh
source "$SCRIPT_DIR/process.sh"

pid() { [[ -f $PID_FILE ]] && cat "$PID_FILE" || true; }
alive() { ours "$(pid)" "$DIR"; }

# ---------------------------------------------------------------- build
source_hash() { cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -d' ' -f1; }

build() {
  local want; want=$(source_hash)
  [[ -x $BIN && -f $BIN_DIR/source.sha256 && $(cat "$BIN_DIR/source.sha256") == "$want" ]] && return
  command -v go >/dev/null || die "Go is needed to build the Temporal server; install Go 1.25+"
  log "building the Temporal server $SERVER_VERSION (tools/temporal-server; once per source change, several minutes on a cold Go build cache)"
  mkdir -p "$BIN_DIR"
  local start=$SECONDS
  (cd "$SRC" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$BIN.tmp" .)
  mv -f "$BIN.tmp" "$BIN"
  echo "$want" >"$BIN_DIR/source.sha256"
  log "built $BIN in $((SECONDS - start)) s"
}

install_cli() { # the health check uses the Temporal CLI; build it as scripts/services.sh does (without starting anything)
  [[ -x $CLI ]] && return
  command -v go >/dev/null || die "Go is needed to build the Temporal CLI (go install); install Go 1.22+"
  log "building Temporal CLI $CLI_VERSION with go install (first time only, several minutes)"
  mkdir -p "$(dirname "$CLI")"
  GOBIN=$(dirname "$CLI") CGO_ENABLED=0 GOFLAGS=-mod=mod go install "github.com/temporalio/cli/cmd/temporal@$CLI_VERSION"
}

# ---------------------------------------------------------------- run
tls_flags=(--tls-ca-path "$CERTS/ca.crt" --tls-cert-path "$CERTS/client.crt" --tls-key-path "$CERTS/client.key")
ready() { "$CLI" operator cluster health --address "127.0.0.1:$PORT" "${tls_flags[@]}" 2>/dev/null | grep -q SERVING; }

# The log's last 30 lines without Go stack-trace frames (a fatal error carries a long trace).
log_tail() { grep -Ev '^[[:space:]]|^[^[:space:]]+$' "$LOG" | tail -n 30 >&2 || true; }

wait_ready() {
  local deadline=$((SECONDS + 120))
  until ready; do
    alive || { log_tail; die "the Temporal server exited during start-up; log: $LOG"; }
    ((SECONDS < deadline)) || { log_tail; die "the Temporal server is not SERVING after 120 s; log: $LOG"; }
    sleep 0.5
  done
}

up() {
  build
  install_cli
  bash "$SCRIPT_DIR/certs.sh" "$CERTS"
  if alive; then
    ready && { status; return; }
  else
    for p in "$PORT" $([[ $UI_PORT != 0 ]] && echo "$UI_PORT"); do
      if port_open "$p"; then
        die "port $p is held by a process that is not onceflow's Temporal server (no pid file of ours is alive). Stop that process or free the port; onceflow never kills what it did not start."
      fi
    done
    mkdir -p "$DIR"
    log "starting the Temporal server (mTLS) on 127.0.0.1:$PORT"
    # Own session (setsid), so a signal to the process group reaches the whole tree.
    setsid "$BIN" -ip 127.0.0.1 -port "$PORT" -ui-port "$UI_PORT" -db "$DIR/temporal.db" \
      -tls-cert "$CERTS/server.crt" -tls-key "$CERTS/server.key" -tls-ca "$CERTS/ca.crt" \
      -client-cert "$CERTS/client.crt" -client-key "$CERTS/client.key" \
      -namespaces default -log-level warn >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
  fi
  wait_ready
  status
}

stop() { # signal
  local p; p=$(pid)
  if ! ours "$p" "$DIR"; then rm -f "$PID_FILE"; return; fi
  stop_group "$p" "the Temporal server" "$PORT" "$1"
  rm -f "$PID_FILE"
}

status() {
  if alive && [[ -x $CLI ]] && ready; then
    local ui="no Web UI"; [[ $UI_PORT != 0 ]] && ui="Web UI http://127.0.0.1:$UI_PORT"
    echo "temporal  up    127.0.0.1:$PORT (mTLS, CA $CERTS/ca.crt, client $CERTS/client.crt)  $ui  log $LOG"
    return 0
  fi
  if port_open "$PORT"; then echo "temporal  foreign  port $PORT is held by a process that is not onceflow's"; else echo "temporal  down"; fi
  return 1
}

case ${1:-status} in
  build) build ;;
  up) up ;;
  down) stop TERM ;;
  kill) stop KILL ;;
  status) status ;;
  *) die "unknown command '$1' (expected build, up, down, kill or status)" ;;
esac
