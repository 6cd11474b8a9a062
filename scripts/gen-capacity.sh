#!/usr/bin/env bash
# gen-capacity.sh: how close the built-in load generator gets to the
# offered load of each scenario of the "Generator capacity" table in
# docs/benchmarking.md.
#
# Each row is one short `sluice-bench run` (or `latency`) against the
# goroutine runner, engine and generator pinned to different CPUs, and the
# script prints, from the JSON report, what was offered, what the
# generator held, its lag p99, its CPU use, the bottleneck of unpaced rows,
# and whether the row was generator-bound. Run it on a quiet machine: a
# neighbour on the generator's CPU shows up as lag (and gen_runqueue_wait_s).
#
# Usage: scripts/gen-capacity.sh [-B BIN] [-d DURATION]
#   -B BIN       use this sluice-bench binary instead of building one
#   -d DURATION  per row (default 3s)
set -euo pipefail

bin="" dur=3s
while getopts "B:d:h" opt; do
  case $opt in
    B) bin=$OPTARG ;;
    d) dur=$OPTARG ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "gen-capacity.sh: needs jq" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$bin" ]; then
  go build -o "$tmp/sluice-bench" ./cmd/sluice-bench
  bin=$tmp/sluice-bench
fi

row() { # name, then run flags
  local name=$1; shift
  "$bin" run --runners goroutine --verify=false --duration "$dur" --json "$tmp/r.json" "$@" >/dev/null 2>"$tmp/err" ||
    { echo "| $name | failed: $(tail -1 "$tmp/err") |"; return; }
  jq -r --arg name "$name" '.runs[0] |
    "| \($name) | \(if .offered_bps > 0 then "\(.offered_bps / 1048576 | floor) MiB/s" else "unlimited" end)" +
    " | \(.throughput_bps / 1048576 | round) MiB/s, held \(.gen_held * 1000 | round / 10)%" +
    " | \(.gen_lag_ns.p99 / 1000 | round) µs | \(.gen_cpu_util * 100 | round)% | \(.bottleneck // "-")" +
    " | \(if .generator_bound then "yes: " + .generator_bound_why else "no" end) |"' "$tmp/r.json"
}

echo "| scenario | offered | achieved | gen lag p99 | gen CPU | bottleneck | generator-bound |"
echo "|---|---|---|---|---|---|---|"
row "1 stream, 64 KiB, flat out" --sources 1 --msg-size 64KiB
row "1,000 sources, 64 KiB, flat out" --sources 1000 --msg-size 64KiB
row "1,000 sources at 64 KiB/s, 1 KiB" --sources 1000 --rate 64KiB/s --msg-size 1KiB
row "10,000 sources at 2 KiB/s, 1 KiB" --sources 10000 --rate 2KiB/s --msg-size 1KiB
"$bin" latency --runners goroutine --loads 8MiB/s,64MiB/s,512MiB/s --duration "$dur" --json "$tmp/l.json" >/dev/null 2>"$tmp/err" ||
  { echo "| latency sweep | failed: $(tail -1 "$tmp/err") |"; exit 1; }
jq -r '.points[] |
  "| latency sweep, 100 sources, 1 KiB | \(.offered_bps / 1048576 | floor) MiB/s" +
  " | \(.throughput_bps / 1048576 | round) MiB/s, held \(.gen_held * 1000 | round / 10)%" +
  " | \(.gen_lag_ns.p99 / 1000 | round) µs | \(.gen_cpu_util * 100 | round)% | -" +
  " | \(if .generator_bound then "yes: " + .generator_bound_why else "no" end) |"' "$tmp/l.json"
