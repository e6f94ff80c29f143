#!/usr/bin/env bash
# Runs every fuzz target for $SECS seconds (default 300), one at a time, logging each run to
# fuzz/logs/<target>.log; docs/results.md ("Fuzzing") has the figures. With $LOCK set (a file),
# each run holds `flock $LOCK` so that no other CPU-heavy run shares the machine with it.
set -uo pipefail
cd "$(dirname "$0")"
SECS=${SECS:-300}
mkdir -p logs
for t in ${TARGETS:-cpu_max cfs_quota proc_self_cgroup cpu_list cpu_stat schedstat worker_state builder gate_settings}; do
  run=(env RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none "$t" --
    -max_total_time="$SECS" -timeout=10 -print_final_stats=1)
  if [ -n "${LOCK:-}" ]; then run=(flock "$LOCK" "${run[@]}"); fi
  "${run[@]}" > "logs/$t.log" 2>&1
  echo "$t: exit $?" >> logs/summary
done
