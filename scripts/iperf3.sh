#!/usr/bin/env bash
# Makes sure iperf3 is here (the kernel-TCP yardstick of the bulk-transfer
# comparison, scripts/bulk_bench.py) and prints its path. Installs Debian's
# iperf3 with apt-get when it is missing, as root or through passwordless
# sudo; exits 1 with a message saying what to install where it cannot.
#
#   scripts/iperf3.sh        # prints e.g. /usr/bin/iperf3
set -euo pipefail
have() { command -v iperf3 >/dev/null 2>&1; }
# iperf3's package asks whether to start a daemon: no.
preseed() {
  echo "iperf3 iperf3/start_daemon boolean false" | "$@" debconf-set-selections 2>/dev/null || true
}
# shellcheck source=scripts/apt_ensure.sh
. "$(dirname "$0")/apt_ensure.sh"
apt_ensure iperf3 iperf3
if ! have; then
  echo "iperf3 is not available and could not be installed here: install Debian's iperf3" >&2
  exit 1
fi
command -v iperf3
