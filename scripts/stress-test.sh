#!/usr/bin/env bash
# The README's test command, run several times on a fresh clone of main
# while other work keeps the CPUs busy: what CI meets on a loaded machine.
#
#   scripts/stress-test.sh                 # 5 runs, 2 CPU hogs
#   RUNS=10 HOGS=4 scripts/stress-test.sh
#   REV=my-branch scripts/stress-test.sh   # another commit than main
#   STRESS_TARGET_DIR=/tmp/warm scripts/stress-test.sh
#                                          # reuse compiled dependencies there
#
# Prints one line per run and ends with "stress: N/M runs passed"; logs of
# failing runs are kept (their paths are printed). Exit 0 only when every
# run passed. The build runs once before the hogs start (a build is not
# what this stresses); the runs then rebuild nothing.
set -euo pipefail

runs=${RUNS:-5}
hogs=${HOGS:-2}
rev=${REV:-main}
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
# The README's test command, read from the README itself so the two can't drift.
test_cmd=$(grep -oE '^cargo test[^#]*' "$repo/README.md" | head -n 1 | sed 's/[[:space:]]*$//')
[ -n "$test_cmd" ] || { echo "stress: no 'cargo test' line in README.md" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/groupwire-stress.XXXXXX")
hog_pids=()
cleanup() {
  for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "stress: cloning $rev of $repo into $work/groupwire"
git clone --quiet --no-local "$repo" "$work/groupwire"
cd "$work/groupwire"
git checkout --quiet "$rev"
# CI has the steering repo's shared/ beside the clone; so do we, if we can.
[ -d "$repo/../shared" ] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"
echo "stress: commit $(git rev-parse --short HEAD); test command: $test_cmd"

if [ -n "${STRESS_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR=$STRESS_TARGET_DIR
  echo "stress: target dir $CARGO_TARGET_DIR (dependencies may be reused; the clone's crates rebuild)"
fi
echo "stress: building (no load yet)"
start=$SECONDS
$test_cmd --no-run >"$work/build.log" 2>&1 || { echo "stress: build failed, see $work/build.log" >&2; exit 1; }
echo "stress: built in $((SECONDS - start)) s"

for _ in $(seq "$hogs"); do
  (while :; do :; done) &
  hog_pids+=($!)
done
echo "stress: $hogs CPU hogs running (pids ${hog_pids[*]}), $(nproc) cores"

passed=0
for i in $(seq "$runs"); do
  log="$work/run-$i.log"
  start=$SECONDS
  if $test_cmd >"$log" 2>&1; then
    passed=$((passed + 1))
    verdict=pass
  else
    verdict="FAIL (log: $log)"
  fi
  tests=$(grep -E '^test result:' "$log" | awk '{p+=$4; f+=$6} END {printf "%d passed, %d failed", p, f}')
  echo "stress: run $i/$runs: $verdict in $((SECONDS - start)) s ($tests)"
  grep -E '^test .* FAILED$|^---- .* stdout ----$' "$log" | sed 's/^/stress:     /' || true
done

echo "stress: $passed/$runs runs passed"
[ "$passed" -eq "$runs" ] && rm -rf "$work/groupwire/target" "$work"/run-*.log
[ "$passed" -eq "$runs" ]
