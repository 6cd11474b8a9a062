#!/usr/bin/env bash
# jetstream-cluster.sh: ingest nodes publishing into a three-node NATS
# JetStream cluster (Debian's nats-server) on loopback, with servers and
# nodes killed with SIGKILL mid-stream, and the stream checked against what
# independent senders sent.
#
# Senders are bash loops writing newline-delimited records "sNNN SEQ ...\n"
# over /dev/tcp, N per second each. The stream has three replicas.
#
#   A. One node (`sluice run -c`). Mid-stream the stream's
#      leader is killed with SIGKILL and restarted 2.5 s later; then the
#      server the node is connected to, likewise. The node is drained with
#      SIGTERM. Every record must be stored once, in order, nothing lost.
#   B. Two nodes sharing one TCP port with reuse_port. Mid-stream one node
#      is killed with SIGKILL; the other goes on and is drained. The
#      survivor's senders must have every record stored once and in order;
#      the killed node's senders a prefix of theirs, once and in order
#      (what the node had read but not had stored is lost: TCP senders get
#      no acknowledgement to resend from).
#
# `sluice-bench jetstream --check` reads each stream back in stream order
# and checks each source (by the node's id prefix and the engine's source
# id in Nats-Msg-Id) and each sender. Any loss, duplicate or reordering
# exits 1. All traffic stays on 127.0.0.1. About a minute.
#
# Usage: scripts/jetstream-cluster.sh [options]
#   -n N      senders (default 12)
#   -r RATE   records per second per sender (default 100)
#   -d SECS   how long senders send (default 20)
#   -o DIR    keep logs, configs and stores in DIR
#   -B BIN    use this sluice-bench binary instead of building one
#   -S BIN    use this sluice binary (the nodes) instead of building one
set -euo pipefail

senders=12 rate=100 secs=20 out="" bin="" sluice=""
while getopts "n:r:d:o:B:S:h" opt; do
	case $opt in
	n) senders=$OPTARG ;;
	r) rate=$OPTARG ;;
	d) secs=$OPTARG ;;
	o) out=$OPTARG ;;
	B) bin=$OPTARG ;;
	S) sluice=$OPTARG ;;
	h)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 0
		;;
	*) exit 2 ;;
	esac
done
for v in senders rate secs; do
	if ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
		echo "jetstream-cluster: -${v:0:1} must be a positive number, not ${!v}" >&2
		exit 2
	fi
done
if ((rate % 10 != 0)); then
	echo "jetstream-cluster: -r must be a multiple of 10 (senders write every 100 ms)" >&2
	exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
command -v nats-server >/dev/null || bash "$root/scripts/install-deps.sh" nats-server
for tool in nats-server curl jq; do
	command -v $tool >/dev/null || {
		echo "jetstream-cluster: needs $tool" >&2
		exit 1
	}
done
work=${out:-$(mktemp -d /tmp/sluice-jscluster.XXXXXX)}
mkdir -p "$work"
if [ -z "$bin" ]; then
	bin=$work/sluice-bench
	(cd "$root" && go build -o "$bin" ./cmd/sluice-bench)
fi
if [ -z "$sluice" ]; then
	sluice=$work/sluice
	(cd "$root" && go build -o "$sluice" ./cmd/sluice)
fi

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "$out" ] || rm -rf "$work"
}
trap cleanup EXIT

log() { printf '%s %s\n' "$(date +%T.%N | cut -c1-12)" "$*"; }
fail() {
	log "FAIL: $*"
	exit 1
}

# until SECS CMD...: run CMD every 100 ms until it succeeds, for at most SECS.
until_ok() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" 2>/dev/null; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# free_port: a loopback port nobody listens on now.
used_ports=" "
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		[[ $used_ports == *" $p "* ]] && continue
		if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
			used_ports+="$p "
			echo $p
			return
		fi
	done
}

# The cluster: client port, cluster port and monitoring port per server.
declare -a cport rport mport spid
for i in 0 1 2; do
	cport[i]=$(free_port) rport[i]=$(free_port) mport[i]=$(free_port)
done
urls="nats://127.0.0.1:${cport[0]},nats://127.0.0.1:${cport[1]},nats://127.0.0.1:${cport[2]}"

start_server() {
	local i=$1 routes="" j
	for j in 0 1 2; do
		[ "$j" = "$i" ] || routes+="${routes:+,}nats://127.0.0.1:${rport[j]}"
	done
	nats-server -a 127.0.0.1 -p "${cport[i]}" -m "${mport[i]}" -n "n$i" -js -sd "$work/n$i" \
		--cluster_name sluice --cluster "nats://127.0.0.1:${rport[i]}" --routes "$routes" \
		>>"$work/n$i.log" 2>&1 &
	spid[i]=$!
	pids+=("$!")
	until_ok 20 curl -sf "127.0.0.1:${mport[i]}/varz" >/dev/null || fail "nats-server n$i did not start"
}

kill_server() {
	kill -9 "${spid[$1]}"
	wait "${spid[$1]}" 2>/dev/null || true
}

# leader STREAM: the index of the server leading STREAM.
leader() {
	local i name
	for i in 0 1 2; do
		name=$(curl -sf "127.0.0.1:${mport[i]}/jsz?accounts=true&streams=true" |
			jq -r --arg s "$1" '[.account_details[]?.stream_detail[]? | select(.name == $s) | .cluster.leader] | first // empty') || continue
		[ -n "$name" ] && [ "$name" != null ] && {
			echo "${name#n}"
			return
		}
	done
	return 1
}

# connected_to NAME: the index of the server a client named NAME is on.
connected_to() {
	local i
	for i in 0 1 2; do
		curl -sf "127.0.0.1:${mport[i]}/connz" | jq -e --arg n "$1" '.connections[]? | select(.name == $n)' >/dev/null &&
			{
				echo "$i"
				return
			}
	done
	return 1
}

# node NAME PORT STREAM: a node config; the node itself starts with start_node.
node_config() {
	cat >"$work/$1.yaml" <<EOF
engine:
  buffers: 256
  buf_size: 16384
sources:
  - tcp:
      listen: 127.0.0.1:$2
      reuse_port: true
    framing: newline
output:
  jetstream:
    url: $urls
    subject: ingest.$3
    stream: $3
    replicas: 3
    name: $1
    id_prefix: $1-$$-$EPOCHSECONDS
    ack_timeout: 2s
drain_timeout: 60s
EOF
}

declare -A npid
start_node() {
	"$sluice" run -c "$work/$1.yaml" >"$work/$1.out" 2>"$work/$1.log" &
	npid[$1]=$!
	pids+=("$!")
	until_ok 40 grep -q 'msg="node ready"' "$work/$1.log" || {
		cat "$work/$1.log" >&2
		fail "node $1 did not start"
	}
}

# sender ID PORT: writes records for secs seconds, then its count to sent.ID.
sender() {
	trap '' PIPE
	local id name n=0 j buf line end=$((SECONDS + secs)) per=$((rate / 10))
	printf -v name 's%03d' "$1"
	if ! exec 3<>"/dev/tcp/127.0.0.1/$2"; then
		echo "$name 0" >"$work/sent.$1"
		return
	fi
	while ((SECONDS < end)); do
		buf=""
		for ((j = 0; j < per; j++)); do
			printf -v line '%s %08d %s\n' "$name" "$n" "abcdefghijklmnopqrstuvwxyz0123456789"
			buf+=$line
			n=$((n + 1))
		done
		# A failed write counts as sent: some of it may have reached the node.
		printf '%s' "$buf" >&3 2>/dev/null || break
		sleep 0.1
	done
	exec 3>&-
	echo "$name $n" >"$work/sent.$1"
}

start_senders() {
	local i
	rm -f "$work"/sent.*
	spids=()
	for ((i = 0; i < senders; i++)); do
		sender "$i" "$1" &
		spids+=("$!")
		pids+=("$!")
	done
}

wait_senders() {
	local p
	for p in "${spids[@]}"; do wait "$p" || true; done
	cat "$work"/sent.* >"$work/sent"
}

drain_node() {
	kill -TERM "${npid[$1]}"
	local st=0
	wait "${npid[$1]}" || st=$?
	[ "$st" = 0 ] || {
		tail -5 "$work/$1.log" >&2
		fail "node $1 drained with status $st"
	}
	log "node $1 $(grep -o 'msg=drained .*' "$work/$1.log")"
}

check() {
	timeout 120 "$bin" jetstream --check "$1" --url "$urls" --sent "$work/sent" ${2:+--lossy "$2"} ||
		fail "stream $1 does not hold what the senders sent"
}

log "nats-server $(nats-server --version | awk '{print $NF}'): three servers on 127.0.0.1:${cport[0]},${cport[1]},${cport[2]}"
for i in 0 1 2; do start_server $i; done
for i in 0 1 2; do until_ok 30 curl -sf "127.0.0.1:${mport[i]}/healthz" >/dev/null || fail "JetStream not ready on n$i"; done

# A: one node; the stream's leader, then the node's server, killed and restarted.
port=$(free_port)
node_config a "$port" SLUICE_A
start_node a
log "A: node a on 127.0.0.1:$port; $senders senders x $rate records/s for ${secs}s"
start_senders "$port"
sleep $((secs * 2 / 5))
until_ok 10 leader SLUICE_A >/dev/null || fail "stream SLUICE_A has no leader"
l=$(leader SLUICE_A)
log "A: kill -9 n$l, the stream's leader"
kill_server "$l"
sleep 2.5
start_server "$l"
log "A: n$l restarted"
sleep $((secs / 5))
on=$(connected_to a) || fail "node a is connected to no server"
log "A: kill -9 n$on, the server node a is connected to"
kill_server "$on"
sleep 2.5
start_server "$on"
log "A: n$on restarted; node a now on n$(connected_to a || echo '?')"
wait_senders
drain_node a
check SLUICE_A

# B: two nodes on one port with reuse_port; one killed.
port=$(free_port)
node_config b1 "$port" SLUICE_B
node_config b2 "$port" SLUICE_B
start_node b1
start_node b2
log "B: nodes b1 and b2 both on 127.0.0.1:$port (reuse_port); $senders senders"
start_senders "$port"
sleep $((secs * 2 / 5))
lossy=$(awk '/id_prefix/ {print $2}' "$work/b2.yaml")
log "B: kill -9 node b2"
kill -9 "${npid[b2]}"
wait "${npid[b2]}" 2>/dev/null || true
wait_senders
drain_node b1
check SLUICE_B "$lossy"
log "OK: every record stored once and in order; only the killed node's unstored records lost"
