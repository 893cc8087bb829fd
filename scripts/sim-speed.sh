#!/bin/sh
# Simulation speed before and after a change, side by side in one run: the
# `sim_speed` bench binaries of several builds run in turn, round after
# round, so all see the same machine load. Build each with
# `cargo bench --bench sim_speed --no-run` and copy
# target/release/deps/sim_speed-<hash> away before switching commits.
# Usage: [RUNS=3] [ROUNDS=2] scripts/sim-speed.sh BINARY...
#
# With INSTRUCTIONS=1, each binary runs each unit's launch once under
# valgrind's callgrind instead, counting only the instructions executed
# inside the launch (the model and the harness, not the Verilator build or
# the golden model): the same count on every run, whatever the machine's
# load, so a change's gain reads off one run (docs/simulators.md's tables).
# Usage: INSTRUCTIONS=1 [UNITS="gemm attention moe"] scripts/sim-speed.sh BINARY...
set -eu
if [ "$#" -eq 0 ]; then
    echo "usage: [RUNS=3] [ROUNDS=2] [INSTRUCTIONS=1] scripts/sim-speed.sh BINARY..." >&2
    exit 2
fi
for bin in "$@"; do
    [ -x "$bin" ] || { echo "sim-speed: $bin is not an executable (build it with cargo bench --bench sim_speed --no-run)" >&2; exit 2; }
done

if [ "${INSTRUCTIONS:-0}" = 1 ]; then
    command -v valgrind >/dev/null || { echo "sim-speed: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 2; }
    # The launch, as the bench calls it; a renamed function would count nothing.
    launch='ferrite_runtime::backend::sim::SimDevice::launch_edited'
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
    echo "| binary | unit | instructions in the launch |"
    echo "|---|---|---:|"
    for bin in "$@"; do
        for unit in ${UNITS:-gemm attention moe}; do
            # Build (or find cached) the unit's model outside callgrind first.
            "$bin" 1 "$unit" >"$out/log" 2>&1 ||
                { echo "sim-speed: $bin $unit failed:" >&2; tail -5 "$out/log" >&2; exit 1; }
            valgrind --tool=callgrind --callgrind-out-file="$out/cg" --collect-atstart=no \
                --toggle-collect="$launch" "$bin" 1 "$unit" >"$out/log" 2>&1 ||
                { echo "sim-speed: $bin $unit failed under callgrind:" >&2; tail -5 "$out/log" >&2; exit 1; }
            n=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$out/log")
            if [ -z "$n" ] || [ "$n" = 0 ]; then
                echo "sim-speed: callgrind counted nothing in $launch for $bin $unit (no unit of that name, or the launch renamed)" >&2
                exit 1
            fi
            echo "| $bin | $unit | $n |"
        done
    done
    exit 0
fi

runs=${RUNS:-3} rounds=${ROUNDS:-2}
round=1
while [ "$round" -le "$rounds" ]; do
    for bin in "$@"; do
        echo "## round $round: $bin"
        "$bin" "$runs" 2>/dev/null
    done
    round=$((round + 1))
done
