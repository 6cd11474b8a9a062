#!/usr/bin/env bash
# udp-sweep.sh: for each datagram size, the highest offered rate each sink
# keeps with at most 0.1% of datagrams lost. Each size is one `sluice-bench
# run --proto udp` sweep over rising --udp-rate steps: the runners, Go's
# ReadFromUDP loop and gnet's udp:// loops, each in a process of its own
# pinned to the first CPU, the load on the other, over several rounds in
# alternating order; a row stops at the first rate where its median loss
# exceeds the mark. As root the sinks and the load sit on either end of a
# veth wire (--wire auto), and every row gives the receiving core's whole
# busy time per million datagrams delivered. It prints each size's table
# and verdicts and keeps the JSON reports. About 4 minutes per size with
# the defaults on a 2-CPU machine; run it on a quiet one.
#
# Usage: scripts/udp-sweep.sh [-B BIN] [-o DIR] [-r ROUNDS] [-d DURATION] [-R RUNNERS] [-c CLIENT] [-s SOURCES] [-w WIRE] [SIZE...]
#   -B BIN       use this sluice-bench binary instead of building one
#   -o DIR       keep the text and JSON reports here (default: a temp dir)
#   -r ROUNDS    rounds per rate (default 3)
#   -d DURATION  the load's time per row and round (default 3s)
#   -R RUNNERS   runners to compare (default uring,epoll)
#   -c CLIENT    fio (its net engine, a thread per source) or gen (the
#                bench's own sender, a socket per source) (default fio)
#   -s SOURCES   senders (default 4 for fio, 1000 for gen)
#   -w WIRE      auto, veth or loopback (default auto: veth where it can be built)
#   SIZE         128, 512 or 8KiB (default: these three)
set -euo pipefail

bin="" out="" rounds=3 duration=3s runners=uring,epoll client=fio sources="" wire=auto
while getopts "B:o:r:d:R:c:s:w:h" opt; do
	case $opt in
	B) bin=$OPTARG ;;
	o) out=$OPTARG ;;
	r) rounds=$OPTARG ;;
	d) duration=$OPTARG ;;
	R) runners=$OPTARG ;;
	c) client=$OPTARG ;;
	s) sources=$OPTARG ;;
	w) wire=$OPTARG ;;
	*)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(128 512 8KiB)
if [ -z "$sources" ]; then
	case $client in
	gen) sources=1000 ;;
	*) sources=4 ;;
	esac
fi
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
top=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$bin" ]; then
	(cd "$top" && go build -o "$out/sluice-bench" ./cmd/sluice-bench)
	bin=$out/sluice-bench
fi

# A size whose rows do not add up (datagrams neither delivered nor counted
# as dropped) is reported and the others still run; the script then exits 1.
failed=()
for size in "${sizes[@]}"; do
	case $size in
	128 | 512) rates=100k,150k,200k,250k,300k ;;
	8KiB) rates=25k,50k,75k,100k ;;
	*)
		echo "udp-sweep.sh: unknown size $size (128, 512 or 8KiB)" >&2
		exit 2
		;;
	esac
	echo "== $size-byte datagrams at $rates"
	if ! (cd "$top" && "$bin" run --proto udp --client "$client" --wire "$wire" --runners "$runners" --peers go,gnet \
		--sources "$sources" --msg-size "$size" --udp-rate "$rates" --rounds "$rounds" --duration "$duration" \
		--json "$out/udp-$size.json" 2>"$out/udp-$size.log") | tee "$out/udp-$size.txt"; then
		grep -h MISMATCH "$out/udp-$size.log" || true
		failed+=("$size")
	fi
	echo
done
echo "reports in $out"
if [ ${#failed[@]} -gt 0 ]; then
	echo "udp-sweep.sh: sizes whose counts did not add up: ${failed[*]}" >&2
	exit 1
fi
