#!/usr/bin/env bash
# Runs every fuzz target for $SECS seconds, one at a time under the shared CPU lock, logging
# each run to fuzz/logs/<target>.log (docs/results.md, "Fuzzing", has the figures).
set -uo pipefail
cd "$(dirname "$0")"
SECS=${SECS:-300}
mkdir -p logs
for t in ${TARGETS:-cpu_max cfs_quota proc_self_cgroup cpu_list cpu_stat schedstat worker_state builder gate_settings}; do
  flock /work/cpu-heavy.lock env RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none "$t" -- \
    -max_total_time="$SECS" -timeout=10 -print_final_stats=1 > "logs/$t.log" 2>&1
  echo "$t: exit $?" >> logs/summary
done
