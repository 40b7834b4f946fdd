# Shared by services.sh, schema-registry.sh and temporal-server.sh (sourced; each defines log
# and port_open).
#
# ours <pid> <dir>: <pid> is alive and is the service whose pid file lies in <dir>: its command
# line names a path in <dir>, or it runs in <dir> (every service these scripts start does one or
# the other). A pid file left by a run the machine did not stop cleanly (a reboot, a killed
# session) may name a pid the system has since given to another process: that process is not
# taken for the service, so `up` starts the service, and it is never signalled.
ours() {
  local p=$1 dir=$2
  [[ -n $p ]] && kill -0 "$p" 2>/dev/null || return 1
  [[ -d /proc/$p ]] || return 0 # no /proc to read (not Linux): alive is all we can tell
  [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$(cd "$dir" 2>/dev/null && pwd -P)" ]] && return 0
  tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir/"
}

# stop_group <pid> <label> <port> [signal]: signal the process group (SIGTERM unless told), then
# wait_stopped.
stop_group() {
  local p=$1 label=$2 port=$3 sig=${4:-TERM}
  signal_group "$p" "$label" "$sig"
  wait_stopped "$p" "$label" "$port"
}

signal_group() { # pid label signal
  log "stopping $2 (SIG$3)"
  kill -s "$3" -- "-$1" 2>/dev/null || kill -s "$3" "$1" 2>/dev/null || true
}

# wait_stopped <pid> <label> <port>: wait until <pid> exits (SIGKILL to its group after 60 s),
# then up to 30 s until <port> is released, so an immediate `up` does not take it for a foreign
# process.
wait_stopped() {
  local p=$1 label=$2 port=$3
  local deadline=$((SECONDS + 60))
  while kill -0 "$p" 2>/dev/null; do
    if ((SECONDS >= deadline)); then log "$label did not stop in 60s; SIGKILL"; kill -KILL -- "-$p" 2>/dev/null || true; fi
    sleep 0.2
  done
  deadline=$((SECONDS + 30))
  while port_open "$port" && ((SECONDS < deadline)); do sleep 0.2; done
}
