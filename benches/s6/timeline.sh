#!/bin/bash
# S6's confined phase as a timeline from tracepoints (BENCHMARKS.md,
# "Sessions 22-23"). Usage, as root with perf installed:
#   benches/s6/timeline.sh DIR OUT.data   # DIR holds toolsched and toolsched-bench
#   python3 benches/s6/timeline.py OUT.data
# Runs S6 with 4,000 calls and records 3 s of its confined phase.
set -u
BIN=$1; OUT=$2
LOG=$(mktemp)
"$BIN/toolsched-bench" --server "$BIN/toolsched" --scenarios s6 --runs 1 --s6-calls 4000 > "$LOG" 2>&1 &
BP=$!
# The confined phase starts with the first "shell run" progress line.
until grep -q "shell run" "$LOG" 2>/dev/null; do
    kill -0 $BP 2>/dev/null || { echo "the bench ended early: $(cat "$LOG")"; exit 1; }
    sleep 0.2
done
sleep 2
perf record -q -a -o "$OUT" \
    -e sched:sched_process_exec -e sched:sched_process_exit \
    -e syscalls:sys_enter_writev -e syscalls:sys_exit_recvfrom \
    -e syscalls:sys_enter_sendmsg -- sleep 3 2>/dev/null
echo $BP > "$OUT.bench"   # the client's pid, for timeline.py
kill $BP 2>/dev/null; wait $BP 2>/dev/null
pkill -f "^$BIN/toolsched " || true
rm -f "$LOG"
