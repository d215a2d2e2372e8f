#!/usr/bin/env bash
# Builds the peers that scripts/peers_bench.py runs beside `groupwire
# tunnel`, outside this repository, and prints their paths as shell
# assignments for the bench:
#
#   eval "$(scripts/peers.sh)"   # sets UDPSPEEDER_BIN and KCP_UDP_BIN
#
# Neither peer's code is part of this repository; nothing is installed
# system-wide. Builds go to $PEERS_DIR (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/groupwire-peers), which must lie outside
# the repository; rerunning reuses what is built. A peer that cannot be
# built here is skipped with a message on stderr (its variable is left
# out) and the bench leaves its rows out.
#
# UDPspeeder (https://github.com/wangyu-/UDPspeeder, C++, make):
#   UDPSPEEDER_BIN=PATH  use this speederv2 as it is;
#   UDPSPEEDER_SRC=DIR   build from this source tree (e.g. unpacked with
#                        `git archive`), else `git clone` it where the
#                        network allows, at UDPSPEEDER_REV (default below).
#   UDPSPEEDER_REV       the commit to clone, or to record as the version of
#                        UDPSPEEDER_SRC when that tree has no .git.
#
# kcptun's FEC (https://github.com/xtaci/kcptun): kcptun carries TCP
# streams and its own repository no longer holds its code, so this builds
# scripts/peers/kcp_udp, a UDP-datagram driver of kcp-go (kcptun's
# ARQ + Reed-Solomon FEC transport, the same library and settings), with the
# Go toolchain and module proxy:
#   KCP_UDP_BIN=PATH     use this binary as it is.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${PEERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/groupwire-peers}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$dir/" in
  "$repo"/*) echo "peers.sh: PEERS_DIR=$dir is inside the repository; choose a directory outside it" >&2; exit 2 ;;
esac
exec 9>"$dir/.lock"
flock 9

# UDPspeeder's last commit (2023-07-22) when this script was written.
rev=${UDPSPEEDER_REV:-17694ecaa9681b04498709ba7526c8a8f022b512}

udpspeeder() {
  if [ -n "${UDPSPEEDER_BIN:-}" ]; then
    [ -x "$UDPSPEEDER_BIN" ] || { echo "UDPSPEEDER_BIN=$UDPSPEEDER_BIN is not executable" >&2; return 1; }
    echo "$UDPSPEEDER_BIN"
    return
  fi
  local src=$dir/UDPspeeder
  if [ ! -x "$src/speederv2" ]; then
    command -v g++ >/dev/null && command -v make >/dev/null \
      || { echo "UDPspeeder skipped: needs g++ and make" >&2; return 1; }
    rm -rf "$src"
    if [ -n "${UDPSPEEDER_SRC:-}" ]; then
      cp -r "$UDPSPEEDER_SRC" "$src"
      [ -d "$UDPSPEEDER_SRC/.git" ] && rev=$(git -C "$UDPSPEEDER_SRC" rev-parse HEAD)
    elif timeout 120 git clone -q https://github.com/wangyu-/UDPspeeder "$src" >&2 \
         && git -C "$src" checkout -q "$rev"; then
      :
    else
      rm -rf "$src"
      echo "UDPspeeder skipped: no UDPSPEEDER_SRC and github.com/wangyu-/UDPspeeder is out of reach" >&2
      return 1
    fi
    # The makefile's git_version target asks git, which a tree without .git
    # cannot answer: write what it would, and tell make it is done (-o).
    echo "const char *gitversion = \"$rev\";" >"$src/git_version.h"
    (cd "$src" && make -o git_version all >"$dir/UDPspeeder.build.log" 2>&1) \
      || { echo "UDPspeeder skipped: make failed, see $dir/UDPspeeder.build.log" >&2; return 1; }
  fi
  echo "$src/speederv2"
}

kcp_udp() {
  if [ -n "${KCP_UDP_BIN:-}" ]; then
    [ -x "$KCP_UDP_BIN" ] || { echo "KCP_UDP_BIN=$KCP_UDP_BIN is not executable" >&2; return 1; }
    echo "$KCP_UDP_BIN"
    return
  fi
  local bin=$dir/kcp_udp
  local stamp=$dir/kcp_udp.src
  # Rebuild when the driver's source changed.
  local sum
  sum=$(cat "$repo"/scripts/peers/kcp_udp/{go.mod,go.sum,main.go} | sha256sum | cut -d' ' -f1)
  if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
    command -v go >/dev/null || { echo "kcp-go skipped: needs the Go toolchain (go)" >&2; return 1; }
    (cd "$repo/scripts/peers/kcp_udp" && timeout 600 go build -o "$bin" . >"$dir/kcp_udp.build.log" 2>&1) \
      || { echo "kcp-go skipped: go build failed (module proxy out of reach?), see $dir/kcp_udp.build.log" >&2; return 1; }
    echo "$sum" >"$stamp"
  fi
  echo "$bin"
}

if b=$(udpspeeder); then printf "UDPSPEEDER_BIN=%q\n" "$b"; fi
if [ -f "$repo/scripts/peers/kcp_udp/main.go" ] && b=$(kcp_udp); then printf "KCP_UDP_BIN=%q\n" "$b"; fi
exit 0
