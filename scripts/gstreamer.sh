#!/usr/bin/env bash
# Makes sure GStreamer's command-line tools and its "good" plugins are
# here (the stock SMPTE 2022-1 FEC, RFC 5109 ULPFEC and RFC 2198 RED
# elements groupwire's interop tests talk to) and prints gst-launch-1.0's
# path. Installs Debian's gstreamer1.0-tools and gstreamer1.0-plugins-good
# (1.20 or later has rtpst2022-1-fecenc/-fecdec) with apt-get when they are
# missing, as root or through passwordless sudo; exits 1 with a message
# saying what to install where it cannot.
#
#   scripts/gstreamer.sh        # prints e.g. /usr/bin/gst-launch-1.0
set -euo pipefail
packages=(gstreamer1.0-tools gstreamer1.0-plugins-good)
have() {
  command -v gst-launch-1.0 >/dev/null 2>&1 && gst-inspect-1.0 rtpst2022-1-fecdec >/dev/null 2>&1
}
# shellcheck source=scripts/apt_ensure.sh
. "$(dirname "$0")/apt_ensure.sh"
apt_ensure gstreamer "${packages[@]}"
if ! have; then
  echo "GStreamer with rtpst2022-1-fecdec is not available and could not be installed here:" \
       "install ${packages[*]} (1.20 or later)" >&2
  exit 1
fi
command -v gst-launch-1.0
