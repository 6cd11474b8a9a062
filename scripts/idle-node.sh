#!/usr/bin/env bash
# idle-node.sh: idle connections as an operator sees them. An ingest node
# (`sluice run`, uring runner, eight TCP listeners, its metrics endpoint
# on) is held open by independent clients (`sluice-bench hold` processes,
# up to 10,000 connections each, from 127.0.0.x addresses of their own)
# while a monitor probes /healthz every second and scrapes /metrics every
# 5 seconds. The node's RSS is read from /proc SETTLE after each step (no
# forced GC: whatever the node leaves for its collector counts), and the
# figure is the growth per added connection between the two steps. It
# then samples the RSS a few more times, to show whether it holds. Needs
# Linux, and loopback addresses 127.0.0.101 and up (Linux routes all of
# 127/8 to lo). See docs/benchmarking.md.
#
# Usage: scripts/idle-node.sh [-B DIR] [-l LOW] [-H HIGH] [-w WORKERS] [-s SETTLE] [-m]
#   -B DIR      use the sluice and sluice-bench binaries in DIR instead of building them
#   -l LOW      connections at the first step (default 10000)
#   -H HIGH     connections at the second step (default 100000)
#   -w WORKERS  the node's uring workers (default 6)
#   -s SETTLE   seconds between a step's last connection and the sample (default 3)
#   -m          no monitor: nothing probes or scrapes the node
set -euo pipefail

bin="" low=10000 high=100000 workers=6 settle=3 monitor=1
while getopts "B:l:H:w:s:mh" opt; do
	case $opt in
	B) bin=$OPTARG ;;
	l) low=$OPTARG ;;
	H) high=$OPTARG ;;
	w) workers=$OPTARG ;;
	s) settle=$OPTARG ;;
	m) monitor=0 ;;
	*)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 2
		;;
	esac
done
if [ "$low" -lt 1 ] || [ "$high" -le "$low" ]; then
	echo "idle-node.sh: -l $low -H $high: want 0 < LOW < HIGH" >&2
	exit 2
fi

dir=$(mktemp -d)
pids=()
node=""
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -n "$node" ]; then
		kill -TERM "$node" 2>/dev/null || true
		wait "$node" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

top=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$bin" ]; then
	(cd "$top" && go build -o "$dir/sluice" ./cmd/sluice && go build -o "$dir/sluice-bench" ./cmd/sluice-bench)
	bin=$dir
fi

# Eight listeners on free ports: 100,000 connections from 80 local
# addresses is 156 per address and listener, well inside the ephemeral
# range.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000))
		if [ -z "$(ss -Hltn "sport = :$p")" ] && [[ " ${ports[*]} " != *" $p "* ]]; then
			echo "$p"
			return
		fi
	done
}
ports=() to=()
for _ in 1 2 3 4 5 6 7 8; do
	p=$(free_port)
	ports+=("$p") to+=("127.0.0.1:$p")
done
mport=$(free_port)
{
	printf 'engine:\n  runner: uring\n  workers: %d\nsources:\n' "$workers"
	for p in "${ports[@]}"; do printf '  - tcp:\n      listen: 127.0.0.1:%d\n' "$p"; done
	printf 'metrics:\n  listen: 127.0.0.1:%d\nlog:\n  status: 0s\n' "$mport"
} >"$dir/node.yaml"
"$bin/sluice" run -c "$dir/node.yaml" 2>"$dir/node.log" &
node=$!
until curl -sf "127.0.0.1:$mport/healthz" >/dev/null; do
	kill -0 "$node" 2>/dev/null || {
		cat "$dir/node.log" >&2
		exit 1
	}
	sleep 0.1
done
if [ "$monitor" = 1 ]; then
	(while :; do
		for _ in 1 2 3 4 5; do
			curl -sf "127.0.0.1:$mport/healthz" >/dev/null || true
			sleep 1
		done
		curl -sf "127.0.0.1:$mport/metrics" >/dev/null || true
	done) &
	pids+=($!)
fi

# hold_to N: start hold processes until N connections are asked for, then
# wait until every one of them holds its share.
held=0 procs=0
hold_to() {
	local want=$1 waiting=()
	while [ "$held" -lt "$want" ]; do
		local n=$((want - held)) from="" a
		[ "$n" -le 10000 ] || n=10000
		for a in 1 2 3 4 5 6 7 8; do from+="127.0.0.$((100 + procs * 8 + a)),"; done
		"$bin/sluice-bench" hold --to "$(
			IFS=,
			echo "${to[*]}"
		)" --from "${from%,}" --conns "$n" 2>"$dir/hold$procs.log" &
		pids+=($!)
		waiting+=("$!:$dir/hold$procs.log")
		procs=$((procs + 1)) held=$((held + n))
	done
	local w
	for w in "${waiting[@]}"; do
		until grep -q "holding" "${w#*:}"; do
			if ! kill -0 "${w%%:*}" 2>/dev/null; then
				cat "${w#*:}" >&2
				exit 1
			fi
			sleep 0.2
		done
	done
}
rss() { awk '/^VmRSS/{print $2 * 1024}' "/proc/$node/status"; }

echo "idle-node: node pid $node, uring with $workers workers, monitor $([ "$monitor" = 1 ] && echo on || echo off)"
hold_to "$low"
sleep "$settle"
r1=$(rss)
echo "idle-node: $low connections: RSS $((r1 / 1024)) KiB"
hold_to "$high"
sleep "$settle"
r2=$(rss)
echo "idle-node: $high connections: RSS $((r2 / 1024)) KiB"
echo "idle-node: $(((r2 - r1) / (high - low))) B of RSS per added connection, ${settle}s after each step"
for i in 1 2 3 4 5; do
	sleep 3
	r=$(rss)
	echo "idle-node: +$((i * 3))s: RSS $((r / 1024)) KiB, $(((r - r1) / (high - low))) B per added connection"
done
