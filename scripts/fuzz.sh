#!/usr/bin/env bash
# Runs every fuzz target for a while (default 60 s each). Needs the nightly
# toolchain; installs cargo-fuzz if it is missing. Not part of CI.
#   scripts/fuzz.sh            # all targets, 60 s each
#   SECONDS_EACH=600 scripts/fuzz.sh afec_data
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
each=${SECONDS_EACH:-60}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(header afec_data afec_control afec_endpoint block_packet block_endpoint relay_frame)
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== $t ($each s)"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$each" -max_len=1500
done
