#!/usr/bin/env bash
# A fuzzing campaign over the cargo-fuzz targets in fuzz/. Needs the nightly
# toolchain; installs cargo-fuzz if it is missing. Not part of CI: CI
# replays every committed corpus file through the same checks on stable
# (`cargo test -p groupwire-fuzz-targets`).
#
#   scripts/fuzz.sh                        # every target, 60 s each
#   RUNS=10000000 scripts/fuzz.sh          # every target, 10 million executions each
#   SECONDS_EACH=600 scripts/fuzz.sh afec_data relay_core
#   REPORT=docs/results/fuzz-campaign.md RUNS=10000000 scripts/fuzz.sh
#   SANITIZER=none RUNS=10000000 scripts/fuzz.sh   # about 6x faster
#
# SANITIZER picks cargo-fuzz's -s (default address: AddressSanitizer, worth
# it for the codec's unsafe SIMD kernels); `none` still catches every
# panic, overflow and debug assertion, which is what safe Rust can break.
#
# New inputs that add coverage are merged into fuzz/corpus/TARGET (commit
# them; committed inputs are never pruned);
# a crashing input is copied there too, so once fixed it is replayed by
# `cargo test` forever. Ends with a Markdown table per target: executions,
# seconds, coverage (libFuzzer's `cov` edges and `ft` features), corpus
# size, crashes; written to $REPORT when set.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
each=${SECONDS_EACH:-60}
san=${SANITIZER:-address}
runs=${RUNS:-}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)

if [ -n "$runs" ]; then limit=(-runs="$runs"); what="$runs executions"; else limit=(-max_total_time="$each"); what="$each s"; fi
logs=$(mktemp -d)
rows=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t"
  echo "== $t ($what)"
  cargo +nightly fuzz build -O -a -s "$san" "$t" >/dev/null
  start=$SECONDS
  crashes=0
  # New inputs go to a fresh directory (libFuzzer writes to the first
  # one); the committed corpus is read, never pruned: its files are
  # regression inputs (seeds, crashes once found) that `cargo test` replays.
  # Debug assertions on: they are the codec's and the machines' own checks.
  fresh=$(mktemp -d)
  if ! cargo +nightly fuzz run -O -a -s "$san" "$t" "$fresh" "corpus/$t" -- "${limit[@]}" -max_len=1500 \
    -print_final_stats=1 -artifact_prefix="artifacts/$t/" >"$logs/$t.log" 2>&1; then
    crashes=$(find "artifacts/$t" -type f | wc -l)
    echo "!! $t crashed; inputs in fuzz/artifacts/$t, copied into fuzz/corpus/$t:"
    grep -m 5 -E 'panicked|ERROR|SUMMARY' "$logs/$t.log" || true
    cp artifacts/"$t"/* "corpus/$t/" 2>/dev/null || true
  fi
  secs=$((SECONDS - start))
  # Add to the committed corpus only the new inputs that add coverage.
  cargo +nightly fuzz run -O -a -s "$san" "$t" "corpus/$t" "$fresh" -- -merge=1 >/dev/null 2>&1 || true
  rm -rf "$fresh"
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$logs/$t.log" | grep -oE '[0-9]+$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$logs/$t.log" | tail -1)
  size=$(find "corpus/$t" -type f | wc -l)
  rows+=("| \`$t\` | ${execs:-?} | $secs | ${cov:-?} | $size | $crashes |")
  tail -n 3 "$logs/$t.log"
done

table=$(
  echo "| target | executions | seconds | coverage (libFuzzer) | corpus files | crashes |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
)
echo
echo "$table"
if [ -n "${REPORT:-}" ]; then
  cd ..
  {
    echo "<!-- written by scripts/fuzz.sh on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), $(nproc) cores, sanitizer $san, debug assertions on -->"
    cmd="scripts/fuzz.sh${*:+ $*}"
    [ -n "${SECONDS_EACH:-}" ] && cmd="SECONDS_EACH=$SECONDS_EACH $cmd"
    [ -n "$runs" ] && cmd="RUNS=$runs $cmd"
    [ -n "${SANITIZER:-}" ] && cmd="SANITIZER=$SANITIZER $cmd"
    echo "Produced by \`$cmd\`."
    echo
    echo "$table"
  } >"$REPORT"
  echo "wrote $REPORT"
fi
