#!/usr/bin/env bash
# uring-trace.sh: trace a running uring sink's io_uring events and report
# every readable socket the worker left unread while it slept.
#
# It records the io_uring tracepoints of process PID for SECONDS with perf,
# then, for each poll that completed readable (POLL_ADD, result > 0), the
# time until its lane's next receive was submitted. A gap longer than
# THRESHOLD milliseconds during which the worker spent more than half the
# time inside a waiting io_uring_enter is a stall: data was there and the
# worker slept. Gaps while the worker ran are load, not stalls, and are
# only counted. A lane that waits for a pool buffer while processing runs
# behind looks the same from here (the worker sleeps until the grant's
# wake-up): below a few hundred milliseconds, on a busy machine, that is
# what most of them are. It also reports completions that waited longer
# than the threshold to be reaped after their task work was queued. It
# exits 1 when it found a stall.
#
# Usage: scripts/uring-trace.sh -p PID [-d SECONDS] [-t THRESHOLD_MS] [-o DIR]
#        scripts/uring-trace.sh -i PERF.DATA [-t THRESHOLD_MS]
#   -p PID       the sink process (sluice-bench sink, sluice run, a service)
#   -i FILE      report on a recording made before instead
#   -d SECONDS   how long to record (default 10)
#   -t MS        the gap that counts (default 300)
#   -o DIR       keep perf.data and the report there (default: a temporary dir)
# Needs root and perf with the io_uring and syscalls tracepoints.
set -euo pipefail

pid="" secs=10 thresh=300 out="" in=""
while getopts "p:d:t:o:i:h" opt; do
	case $opt in
	p) pid=$OPTARG ;;
	i) in=$OPTARG ;;
	d) secs=$OPTARG ;;
	t) thresh=$OPTARG ;;
	o) out=$OPTARG ;;
	h)
		sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//; /^set -e/d'
		exit 0
		;;
	*) exit 2 ;;
	esac
done
if [ -z "$in" ] && { [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; }; then
	echo "uring-trace: -p must name a running process (or -i a recording)" >&2
	exit 2
fi
command -v perf >/dev/null || {
	echo "uring-trace: perf is not installed (apt-get install linux-perf)" >&2
	exit 1
}
dir=${out:-$(mktemp -d)}
mkdir -p "$dir"
data=$in
if [ -z "$data" ]; then
	data=$dir/perf.data
	# perf stops at SIGINT after SECONDS, or when the process exits first.
	timeout -s INT "$secs" perf record -q -o "$data" -p "$pid" \
		-e io_uring:io_uring_complete -e io_uring:io_uring_task_add -e io_uring:io_uring_submit_req \
		-e syscalls:sys_enter_io_uring_enter -e syscalls:sys_exit_io_uring_enter 2>/dev/null || true
fi
perf script -i "$data" -F tid,time,event,trace 2>/dev/null | awk -v thresh="$thresh" '
function hex(s,   i, c, v) { v = 0; s = tolower(s); for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)) - 1; v = v * 16 + c }; return v }
{
	t = $2 + 0; ev = $3
	if (ev ~ /sys_enter_io_uring_enter/) {
		match($0, /min_complete: 0x[0-9a-f]+/); mc = hex(substr($0, RSTART + 16, RLENGTH - 16))
		enter = t; waiting = mc > 0
	} else if (ev ~ /sys_exit_io_uring_enter/) {
		if (waiting && enter > 0) { ws[nw] = enter; we[nw] = t; nw++ }
		enter = 0
	} else if (ev ~ /io_uring_task_add/) {
		# By request: user_data repeats (the waker), and a wake-up that
		# brings no completion is followed by another task work.
		match($0, /req 0x[0-9a-f]+/); tw[substr($0, RSTART + 4, RLENGTH - 4)] = t
	} else if (ev ~ /io_uring_complete/) {
		match($0, /user_data 0x[0-9a-f]+/); ud = substr($0, RSTART + 12, RLENGTH - 12)
		match($0, /result -?[0-9]+/); res = substr($0, RSTART + 7, RLENGTH - 7) + 0
		match($0, /req 0x[0-9a-f]+/); req = substr($0, RSTART + 4, RLENGTH - 4)
		if (req in tw) {
			if ((t - tw[req]) * 1000 > thresh && ++late <= 5) printf "late: user_data 0x%s completed %.0f ms after its task work, at %.6f\n", ud, (t - tw[req]) * 1000, t
			delete tw[req]
		}
		# user_data: the tag in its top 4 bits (2: a poll), the slot in its low 32.
		slot = substr(ud, length(ud) - 7)
		if (length(ud) == 16 && substr(ud, 1, 1) == "2" && res > 0) readable[slot] = t
	} else if (ev ~ /io_uring_submit_req/) {
		match($0, /user_data 0x[0-9a-f]+/); ud = substr($0, RSTART + 12, RLENGTH - 12)
		slot = substr(ud, length(ud) - 7)
		if (slot in readable && $0 ~ /opcode (RECV|RECVMSG|READ)/) {
			gap = t - readable[slot]
			if (gap * 1000 > thresh) { gs[ng] = readable[slot]; ge[ng] = t; gslot[ng] = slot; ng++ }
			delete readable[slot]
		}
	}
}
END {
	stalls = 0
	for (i = 0; i < ng; i++) {
		slept = 0
		for (j = 0; j < nw; j++) {
			a = (ws[j] > gs[i]) ? ws[j] : gs[i]; b = (we[j] < ge[i]) ? we[j] : ge[i]
			if (b > a) slept += b - a
		}
		if (slept > (ge[i] - gs[i]) / 2) {
			stalls++
			if (stalls <= 10) printf "stall: slot %s readable at %.6f, received %.0f ms later, the worker asleep %.0f ms of it\n", gslot[i], gs[i], (ge[i] - gs[i]) * 1000, slept * 1000
		}
	}
	printf "readable sockets unread for more than %d ms: %d, of which the worker slept through most: %d\n", thresh, ng, stalls
	printf "completions reaped more than %d ms after their task work: %d\n", thresh, late + 0
	exit stalls > 0
}' | tee "$dir/report.txt"
