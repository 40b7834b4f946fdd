# Shared by services.sh and schema-registry.sh (sourced; both define log and port_open).
# stop_group <pid> <label> <port>: SIGTERM the process group (SIGKILL after 60 s), then wait up
# to 30 s until <port> is released, so an immediate `up` does not take it for a foreign process.
stop_group() {
  local p=$1 label=$2 port=$3 sig=${4:-TERM}
  log "stopping $label (SIG$sig)"
  kill -s "$sig" -- "-$p" 2>/dev/null || kill -s "$sig" "$p" 2>/dev/null || true
  local deadline=$((SECONDS + 60))
  while kill -0 "$p" 2>/dev/null; do
    if ((SECONDS >= deadline)); then log "$label did not stop in 60s; SIGKILL"; kill -KILL -- "-$p" 2>/dev/null || true; fi
    sleep 0.2
  done
  deadline=$((SECONDS + 30))
  while port_open "$port" && ((SECONDS < deadline)); do sleep 0.2; done
}
