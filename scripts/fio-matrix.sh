#!/usr/bin/env bash
# fio-matrix.sh: run fio-load.sh for 16, 1,000 and 4,000 sources, bulk and
# paced (1 MiB/s per source, Poisson arrivals), against one runner, and
# stop at the first run that does not reconcile.
#
# Usage: scripts/fio-matrix.sh [RUNNER]   (default auto)
set -euo pipefail
runner=${1:-auto}
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$top" && go build -o "$work/sluice-bench" ./cmd/sluice-bench)
for n in 16 1000 4000; do
	"$top/scripts/fio-load.sh" -B "$work/sluice-bench" -R "$runner" -n "$n" -m bulk -s 1m
	"$top/scripts/fio-load.sh" -B "$work/sluice-bench" -R "$runner" -n "$n" -m paced -s 256k -r 1m
done
echo "fio-matrix: every run reconciled exactly"
