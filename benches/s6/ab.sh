#!/bin/bash
# Interleaved S6 runs of two builds, order alternating (BENCHMARKS.md,
# "Sessions 22-23"). Usage: benches/s6/ab.sh DIR_A DIR_B ROUNDS CALLS
# (each DIR holds toolsched and toolsched-bench).
A=$1; B=$2; R=$3; N=$4
for r in $(seq 1 "$R"); do
    if [ $((r % 2)) -eq 1 ]; then order="$A $B"; else order="$B $A"; fi
    for bin in $order; do
        "$bin/toolsched-bench" --server "$bin/toolsched" --scenarios s6 --runs 1 --s6-calls "$N" 2>/dev/null \
            | grep "^| S6" | head -2 \
            | awk -F'|' -v b="$bin" -v r="$r" '{gsub(/ /,"",$4); gsub(/ /,"",$5); gsub(/ /,"",$6);
                printf "%s round %d %s: toolsched %s floor %s ratio %s\n", b, r, (NR==1?"confined":"none"), $4, $5, $6}'
    done
done
