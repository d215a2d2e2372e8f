#!/usr/bin/env bash
# Makes sure iperf3 is here (the kernel-TCP yardstick of the bulk-transfer
# comparison, scripts/bulk_bench.py) and prints its path. Installs Debian's
# iperf3 with apt-get when it is missing, as root or through passwordless
# sudo; exits 1 with a message saying what to install where it cannot.
#
#   scripts/iperf3.sh        # prints e.g. /usr/bin/iperf3
set -euo pipefail
have() { command -v iperf3 >/dev/null 2>&1; }
if ! have && command -v apt-get >/dev/null 2>&1; then
  sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo -n)
  exec 9>"${TMPDIR:-/tmp}/groupwire-iperf3.lock"
  flock 9
  if ! have; then
    export DEBIAN_FRONTEND=noninteractive
    # iperf3's package asks whether to start a daemon: no.
    echo "iperf3 iperf3/start_daemon boolean false" | "${sudo[@]}" debconf-set-selections 2>/dev/null || true
    "${sudo[@]}" apt-get install -y -q --no-install-recommends iperf3 >&2 \
      || { "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q --no-install-recommends iperf3 >&2; } \
      || true
  fi
fi
if ! have; then
  echo "iperf3 is not available and could not be installed here: install Debian's iperf3" >&2
  exit 1
fi
command -v iperf3
