#!/usr/bin/env bash
# fio-load.sh: drive `sluice-bench sink` with fio's net engine and reconcile
# the totals exactly.
#
# fio opens N TCP connections that write into the sink. When fio is done the
# sink goes idle, exits and writes its JSON report. The script then checks,
# per run, that
#
#   sink bytes   == sum of fio's io_bytes + 8 bytes per connection
#   sink sources == N
#
# (fio's net engine ends every TCP connection with an 8-byte trailer).
# Any mismatch exits 1.
#
# Usage: scripts/fio-load.sh [options]
#   -n N         sources (default 1000)
#   -m MODE      bulk | paced (default bulk)
#   -s SIZE      bytes per source, fio syntax (default: 4m bulk, 1m paced)
#   -r RATE      per-source rate for paced runs, fio syntax (default 1m)
#   -b BS        fio block size (default 64k bulk, 4k paced)
#   -R RUNNER    sink runner: auto|uring|epoll|goroutine|thread (default auto)
#   -p PORT      first port (default 9300)
#   -P           use numjobs clones, one port each (port+i), instead of one
#                job section per source on one port
#   -o DIR       keep the job file and both JSON reports in DIR
#   -B BIN       use this sluice-bench binary instead of building one
set -euo pipefail

sources=1000 mode=bulk size="" rate=1m bs="" runner=auto port=9300 ports=0 out="" bin=""
while getopts "n:m:s:r:b:R:p:Po:B:h" opt; do
	case $opt in
	n) sources=$OPTARG ;;
	m) mode=$OPTARG ;;
	s) size=$OPTARG ;;
	r) rate=$OPTARG ;;
	b) bs=$OPTARG ;;
	R) runner=$OPTARG ;;
	p) port=$OPTARG ;;
	P) ports=1 ;;
	o) out=$OPTARG ;;
	B) bin=$OPTARG ;;
	h)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 0
		;;
	*) exit 2 ;;
	esac
done
case $mode in
bulk) size=${size:-4m} bs=${bs:-64k} ;;
paced) size=${size:-1m} bs=${bs:-4k} ;;
*)
	echo "fio-load: -m must be bulk or paced, not $mode" >&2
	exit 2
	;;
esac
if ! [[ $sources =~ ^[1-9][0-9]*$ ]]; then
	echo "fio-load: -n must be a positive number, not $sources" >&2
	exit 2
fi
# fio's own ceiling on jobs in one run.
if ((sources > 4096)); then
	echo "fio-load: fio runs at most 4096 jobs; -n $sources is too many" >&2
	exit 2
fi
for tool in fio jq; do
	command -v "$tool" >/dev/null || {
		echo "fio-load: $tool is not installed (apt-get install $tool, or make deps)" >&2
		exit 1
	}
done

top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
sink_pid=""
cleanup() {
	[ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null && wait "$sink_pid" 2>/dev/null
	if [ -n "$out" ]; then
		mkdir -p "$out"
		cp "$work"/*.json "$work"/job.fio "$work"/sink.log "$out"/ 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

if [ -z "$bin" ]; then
	bin=$work/sluice-bench
	(cd "$top" && go build -o "$bin" ./cmd/sluice-bench)
fi

# The sink: enough descriptors and connection slots for every source, and
# it exits once everything has ended and nothing arrived for 2s.
nports=1
((ports)) && nports=$sources
"$bin" sink --listen "127.0.0.1:$port" --ports "$nports" --runner "$runner" \
	--until-idle 2s --json "$work/sink.json" 2>"$work/sink.log" &
sink_pid=$!
for _ in $(seq 1 300); do
	grep -q "listening on" "$work/sink.log" 2>/dev/null && break
	kill -0 "$sink_pid" 2>/dev/null || {
		cat "$work/sink.log" >&2
		echo "fio-load: the sink exited before it was ready" >&2
		exit 1
	}
	sleep 0.1
done
grep -q "listening on" "$work/sink.log" || {
	echo "fio-load: the sink did not get ready in 30s" >&2
	exit 1
}

{
	echo "[global]"
	echo "ioengine=net"
	echo "protocol=tcp"
	echo "hostname=127.0.0.1"
	echo "port=$port"
	echo "rw=write"
	echo "bs=$bs"
	echo "size=$size"
	echo "thread=1"
	echo "group_reporting=0"
	if [ "$mode" = paced ]; then
		echo "rate=$rate"
		echo "rate_process=poisson"
	fi
	if ((ports)); then
		echo "[src]"
		echo "numjobs=$sources"
	else
		for i in $(seq 1 "$sources"); do echo "[s$i]"; done
	fi
} >"$work/job.fio"

echo "fio-load: $sources sources, $mode, $size each, runner $runner" >&2
start=$(date +%s.%N)
fio --output-format=json --output="$work/fio.json" "$work/job.fio"
wait "$sink_pid" || {
	cat "$work/sink.log" >&2
	echo "fio-load: the sink failed" >&2
	sink_pid=""
	exit 1
}
sink_pid=""
end=$(date +%s.%N)

fio_bytes=$(jq '[.jobs[].write.io_bytes] | add' "$work/fio.json")
fio_jobs=$(jq '.jobs | length' "$work/fio.json")
want=$((fio_bytes + 8 * fio_jobs))
got=$(jq '.bytes' "$work/sink.json")
got_sources=$(jq '.sources' "$work/sink.json")
errors=$(jq '[.streams[].errors] | add // 0' "$work/sink.json")

printf 'fio-load: fio wrote %d bytes on %d connections (+8 trailer bytes each = %d)\n' \
	"$fio_bytes" "$fio_jobs" "$want"
printf 'fio-load: sink (%s) read %d bytes from %d sources, %d errors; %s\n' \
	"$(jq -r .runner "$work/sink.json")" "$got" "$got_sources" "$errors" \
	"$(jq -r '"\(.throughput_bps / 1e6 | floor) MB/s, \(.cpu_s_per_gib * 1000 | floor / 1000) CPU-s/GiB"' "$work/sink.json")"
awk -v s="$start" -v e="$end" 'BEGIN { printf "fio-load: wall time %.1fs\n", e - s }'

fail=0
if [ "$got" != "$want" ]; then
	echo "fio-load: MISMATCH: sink read $got bytes, fio sent $want" >&2
	fail=1
fi
if [ "$got_sources" != "$sources" ] || [ "$fio_jobs" != "$sources" ]; then
	echo "fio-load: MISMATCH: $sources sources asked for, fio ran $fio_jobs, sink saw $got_sources" >&2
	fail=1
fi
if [ "$errors" != 0 ]; then
	echo "fio-load: the sink reported $errors source errors" >&2
	fail=1
fi
((fail)) && exit 1
echo "fio-load: reconciled exactly"
