#!/usr/bin/env bash
# targets.sh: measures every row of the performance targets table in
# docs/decisions/0010-bulk-row-on-loopback.md (the io_uring runner against
# the fallbacks) and keeps each report.
#
# Every row runs its runners side by side in one command, over several
# rounds in alternating order, and prints each ratio's median and min-max;
# a verdict is "met" only when the whole range is on the right side of the
# target. Rows whose generator did not hold the offered load are marked
# generator-bound and get no verdict. About 8 minutes on a 2-CPU machine;
# run it on a quiet one.
#
# Usage: scripts/targets.sh [-B BIN] [-o DIR] [-r ROUNDS] [ROW...]
#   -B BIN     use this sluice-bench binary instead of building one
#   -o DIR     keep the text and JSON reports here (default: a temp dir)
#   -r ROUNDS  rounds per row (default 3)
#   ROW        stream, bulk, paced, idle, file, latency (default: all)
set -euo pipefail

bin="" out="" rounds=3
while getopts "B:o:r:h" opt; do
  case $opt in
    B) bin=$OPTARG ;;
    o) out=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(stream bulk paced idle file latency)
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
if [ -z "$bin" ]; then
  go build -o "$out/sluice-bench" ./cmd/sluice-bench
  bin=$out/sluice-bench
fi

row() {
  local name=$1
  shift
  echo "== $name: sluice-bench $*"
  "$bin" "$@" --json "$out/$name.json" 2>"$out/$name.log" | tee "$out/$name.txt"
  echo
}

for r in "${rows[@]}"; do
  case $r in
    stream)
      # One TCP stream, 64 KiB messages, flat out; iperf3 as the loopback reference when installed.
      row stream run --runners uring,goroutine,epoll --sources 1 --msg-size 64KiB --duration 5s \
        --rounds "$rounds" --verify=false --iperf3 --target 'throughput>=1,cpu_s_per_gib<=0.9' ;;
    bulk)
      # With the kernel's autotuned receive buffers, then with 1 MiB ones:
      # the first can lock an event loop into doing the senders' transmit
      # work on loopback (docs/decisions/0010-bulk-row-on-loopback.md).
      row bulk run --runners uring,goroutine,epoll --sources 1000 --msg-size 64KiB --duration 5s \
        --rounds "$rounds" --verify=false --target 'cpu_s_per_gib<=0.75'
      row bulk-rcvbuf run --runners uring,goroutine,epoll --sources 1000 --msg-size 64KiB --duration 5s \
        --rounds "$rounds" --verify=false --recv-buffer 1MiB --target 'cpu_s_per_gib<=0.75' ;;
    paced)
      # 1,000 sources at 64 KiB/s in 1 KiB messages; targets 0.6x goroutine and 0.8x epoll.
      row paced run --runners uring,goroutine,epoll --sources 1000 --rate 64KiB/s --msg-size 1KiB \
        --duration 6s --rounds "$rounds" --verify=false --target 'cpu_s_per_gib<=0.6,cpu_s_per_gib<=0.8' ;;
    idle)
      # 10,000 mostly idle sources at 2 KiB/s, then the same at 1,000: the
      # difference in peak RSS over the 9,000 extra sources is what a
      # source costs beyond the pool (the pool and the process's fixed
      # costs cancel out).
      row idle run --runners uring,epoll --sources 10000 --rate 2KiB/s --msg-size 1KiB --duration 10s \
        --rounds "$rounds" --verify=false --target 'cpu_s_per_gib<=1'
      row idle-1k run --runners uring,epoll --sources 1000 --rate 2KiB/s --msg-size 1KiB --duration 10s \
        --rounds "$rounds" --verify=false
      if command -v jq >/dev/null; then
        for r in uring epoll; do
          med='[.runs[] | select(.runner == $r) | .rss_max_bytes] | sort | .[length / 2 | floor]'
          big=$(jq --arg r "$r" "$med" "$out/idle.json")
          small=$(jq --arg r "$r" "$med" "$out/idle-1k.json")
          echo "idle: $r RSS per source beyond the pool: $(( (big - small) / 9000 )) bytes (median peak RSS $((big >> 20)) MiB at 10,000 sources, $((small >> 20)) MiB at 1,000)"
        done
      fi ;;
    file)
      row file file --runners uring,epoll,goroutine --rounds "$rounds" ;;
    latency)
      row latency latency --runners uring,goroutine --rounds "$rounds" ;;
    *)
      echo "targets.sh: unknown row $r" >&2
      exit 2 ;;
  esac
done
echo "reports in $out"
