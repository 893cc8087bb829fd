#!/bin/sh
# Simulation speed before and after a change, side by side in one run: the
# `sim_speed` bench binaries of several builds run in turn, round after
# round, so all see the same machine load. Build each with
# `cargo bench --bench sim_speed --no-run` and copy
# target/release/deps/sim_speed-<hash> away before switching commits.
# Usage: [RUNS=3] [ROUNDS=2] scripts/sim-speed.sh BINARY...
set -eu
runs=${RUNS:-3} rounds=${ROUNDS:-2}
round=1
while [ "$round" -le "$rounds" ]; do
    for bin in "$@"; do
        echo "## round $round: $bin"
        "$bin" "$runs" 2>/dev/null
    done
    round=$((round + 1))
done
