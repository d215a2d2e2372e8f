#!/usr/bin/env bash
# Makes the browser test's tools ready (all output on stderr):
# Debian's chromium (through apt, like gstreamer.sh; fast when present)
# and clients/js built with its locked devDependencies (`npm ci` only
# when package-lock.json changed since the last install).
#
# Where Chromium cannot be installed (no apt-get, no root or passwordless
# sudo, the package refused), it writes why into
# target/browser/unavailable and exits 0: the browser test then skips
# with that reason. Anywhere else, a missing Chromium is a failure of
# the test. A failed npm install or build fails this script.
#
#   scripts/browser.sh        # CI runs it before the tests (.ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt_ensure.sh
marker=target/browser/unavailable
mkdir -p target/browser

have() { [ -x /usr/bin/chromium ]; }
apt_ensure chromium chromium
if have; then
  rm -f "$marker"
else
  why="Debian's chromium is not installed and could not be"
  if ! command -v apt-get >/dev/null 2>&1; then
    why="$why: no apt-get on this machine"
  elif [ "$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then
    why="$why: apt-get needs root or passwordless sudo"
  else
    why="$why: apt-get install chromium failed (see the output above)"
  fi
  echo "$why" >"$marker"
  echo "scripts/browser.sh: $why; the browser test will skip" >&2
fi

command -v node >/dev/null 2>&1 || { echo "scripts/browser.sh: node (20 or later) is required" >&2; exit 1; }
cd clients/js
# One install at a time: tests and CI may call this together.
exec 8>"${TMPDIR:-/tmp}/groupwire-npm.lock"
flock 8
if ! cmp -s package-lock.json node_modules/.groupwire-lock 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error >&2
  cp package-lock.json node_modules/.groupwire-lock
fi
npm run --silent build >&2
