#!/usr/bin/env bash
# Build the ns-3 reference dumbbell (validation/ns3/dumbbell.cc) against
# Debian's libns3-dev (ns-3 3.37) into validation/ns3/build/dumbbell.
# Idempotent: does nothing if the binary is newer than the source.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/dumbbell.cc"
out_dir="$here/build"
bin="$out_dir/dumbbell"
modules="ns3-core ns3-network ns3-internet ns3-point-to-point ns3-applications ns3-traffic-control ns3-nix-vector-routing"

if ! pkg-config --exists $modules 2>/dev/null; then
    echo "build.sh: libns3-dev not found; installing it with apt-get" >&2
    sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq libns3-dev pkg-config g++
fi

mkdir -p "$out_dir"
if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$here/build.sh" ]; then
    exit 0
fi

# Debian's ns3 .pc files carry a bogus "-I/usr\;" token; drop it.
cflags=""
for f in $(pkg-config --cflags $modules); do
    case "$f" in *\\*|*\;*) ;; *) cflags="$cflags $f" ;; esac
done
# ...and absolute paths to .so files that need extra -dev packages (libgsl.so,
# libsqlite3.so); the ns-3 shared libraries already carry those dependencies.
libs=""
for f in $(pkg-config --libs $modules); do
    case "$f" in /*) [ -e "$f" ] && libs="$libs $f" ;; *) libs="$libs $f" ;; esac
done

echo "build.sh: compiling $src" >&2
# shellcheck disable=SC2086
g++ -std=c++17 -O2 -o "$bin.tmp" "$src" $cflags $libs
mv "$bin.tmp" "$bin"
