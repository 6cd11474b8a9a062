#!/usr/bin/env bash
# heartbeat.sh CMD [ARG...]: runs CMD and, while it runs, prints a line
# every HEARTBEAT seconds (default 60) saying how long it has been running,
# so that a long step which holds its own output back (go test prints a
# package's result only once the package is done) never leaves minutes of
# silence. Exits with CMD's status.
set -euo pipefail

every=${HEARTBEAT:-60}
start=$SECONDS
"$@" &
pid=$!
(
	while sleep "$every"; do
		echo "   ... $(basename "$1") ${2:-} still running after $((SECONDS - start))s"
	done
) &
beat=$!
status=0
wait "$pid" || status=$?
kill "$beat" 2>/dev/null || true
wait "$beat" 2>/dev/null || true
exit "$status"
