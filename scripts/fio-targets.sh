#!/usr/bin/env bash
# fio-targets.sh: the targets under fio (docs/benchmarking.md and
# docs/decisions/0016-targets-under-fio.md), beside gnet and a sink
# written with Go alone and a bare epoll loop. Each row is one
# `sluice-bench run --client fio --peers gnet,go,epoll` command: every
# runner, the gnet sink, the go sink (a goroutine per connection) and the
# bare-epoll sink (one thread, one edge-triggered epoll instance, one
# shared buffer), each in a process of its own pinned to
# the first CPU, fio on the others, over several rounds in alternating
# order, with every row's bytes reconciled with fio's report. As root the
# sinks and fio sit on either end of a veth wire (--wire auto: two network
# namespaces, each side's receive work on its own CPU, as between two
# hosts), and every row gives the receiving core's whole busy time per GiB,
# which the targets judge; elsewhere they fall back to loopback and say
# so. It prints each row's table (median CPU-s/GiB and throughput, ratios
# of uring to every other row with their min-max over the rounds) and
# keeps the reports and charts. About 15 minutes with the defaults on a 2-CPU
# machine; run it on a quiet one.
#
# Usage: scripts/fio-targets.sh [-B BIN] [-o DIR] [-r ROUNDS] [-d DURATION] [-R RUNNERS] [-w WIRE] [-I] [ROW...]
#   -B BIN       use this sluice-bench binary instead of building one
#   -o DIR       keep the text and JSON reports and the charts here (default: a temp dir)
#   -r ROUNDS    rounds per row (default 3)
#   -d DURATION  fio's runtime per row and round (default 6s)
#   -R RUNNERS   runners to compare (default uring,goroutine,epoll,thread)
#   -w WIRE      auto, veth or loopback (default auto: veth where it can be built)
#   -I           run the engine's consumer inline, where each chunk was read
#                (--inline), as gnet's handler and Go's goroutine run theirs
#   ROW          bulk, paced, stream, lines (default: these four), or
#                bulk-rated: the bulk row's 1,000 connections held to 2 MiB/s
#                each (2 GiB/s offered), a load the sinks mostly keep up with, so
#                that it measures each sink's own cost rather than a race
#                with fio; or quiet: the bulk row with a quiet source
#                beside it (--quiet-source 20ms), whose lines' latency
#                each sink reports (p50, p99, max)
set -euo pipefail

bin="" out="" rounds=3 duration=6s runners=uring,goroutine,epoll,thread wire=auto inline=()
while getopts "B:o:r:d:R:w:Ih" opt; do
	case $opt in
	B) bin=$OPTARG ;;
	o) out=$OPTARG ;;
	r) rounds=$OPTARG ;;
	d) duration=$OPTARG ;;
	R) runners=$OPTARG ;;
	w) wire=$OPTARG ;;
	I) inline=(--inline) ;;
	*)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(bulk paced stream lines)
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$bin" ]; then
	(cd "$top" && go build -o "$out/sluice-bench" ./cmd/sluice-bench)
	bin=$out/sluice-bench
fi

# A row that fails (a sink that did not receive what fio sent) is reported
# and the others still run; the script then exits 1.
failed=()
row() {
	local name=$1
	shift
	echo "== $name: sluice-bench $*"
	if ! (cd "$top" && "$bin" "$@" --json "$out/$name.json" --plot "$out/$name" 2>"$out/$name.log") | tee "$out/$name.txt"; then
		grep -h MISMATCH "$out/$name.log" || true
		failed+=("$name")
	fi
	echo
}

common=(run --client fio --wire "$wire" --runners "$runners" --peers gnet,go,epoll --duration "$duration" --rounds "$rounds"
	--target 'cpu_s_per_gib<=0.8' ${inline[@]+"${inline[@]}"})
for r in "${rows[@]}"; do
	case $r in
	bulk)
		# 1,000 connections writing 64 KiB blocks flat out.
		row bulk "${common[@]}" --sources 1000 --msg-size 64KiB ;;
	paced)
		# 1,000 connections at 64 KiB/s each in 1 KiB writes, Poisson arrivals.
		row paced "${common[@]}" --sources 1000 --rate 64KiB/s --msg-size 1KiB ;;
	stream)
		# One connection writing 64 KiB blocks flat out.
		row stream "${common[@]}" --sources 1 --msg-size 64KiB ;;
	lines)
		# 200 connections writing 16 KiB blocks of 128-byte lines; the sinks count the lines.
		row lines "${common[@]}" --sources 200 --msg-size 16KiB --framing newline --record-size 128 ;;
	quiet)
		# The bulk row, and one more connection sending its clock as a line every 20 ms.
		row quiet "${common[@]}" --sources 1000 --msg-size 64KiB --quiet-source 20ms ;;
	bulk-rated)
		# 1,000 connections writing 64 KiB blocks at 2 MiB/s each, Poisson arrivals.
		row bulk-rated "${common[@]}" --sources 1000 --rate 2MiB/s --msg-size 64KiB ;;
	*)
		echo "fio-targets.sh: unknown row $r" >&2
		exit 2
		;;
	esac
done
echo "reports in $out"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fio-targets.sh: rows that did not reconcile: ${failed[*]}" >&2
	exit 1
fi
