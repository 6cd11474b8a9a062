#!/usr/bin/env bash
# fio-file.sh: measure fio's read throughput (psync and io_uring) on a
# page-cached file, then the sluice file source on the same file, so the
# two can be compared in one run.
#
# Usage: scripts/fio-file.sh [-f FILE] [-S SIZE_MIB] [-b BS]
#   -f FILE   the file to read (default: a new temporary file of -S MiB)
#   -S MIB    size of the temporary file (default 1024)
#   -b BS     block size, fio syntax; also sluice's buffer size (default 256k)
set -euo pipefail
file="" size=1024 bs=256k
while getopts "f:S:b:h" opt; do
	case $opt in
	f) file=$OPTARG ;;
	S) size=$OPTARG ;;
	b) bs=$OPTARG ;;
	h)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 0
		;;
	*) exit 2 ;;
	esac
done
command -v fio >/dev/null || {
	echo "fio-file: fio is not installed (apt-get install fio, or make deps)" >&2
	exit 1
}
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$file" ]; then
	file=$work/data
	head -c "$((size << 20))" /dev/urandom >"$file"
fi
cat "$file" >/dev/null # into the page cache
FILE=$file BS=$bs fio --output-format=json --output="$work/fio.json" "$top/scripts/file-read.fio"
jq -r '.jobs[] | "fio \(.jobname): \(.read.bw_bytes / 1e6 | floor) MB/s"' "$work/fio.json"
(cd "$top" && go run ./cmd/sluice-bench file --files "$file" --buf "$bs")
