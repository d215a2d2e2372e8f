#!/bin/sh
# The relay under hostile clients (docs/results/reliability.md, "Relay
# under hostile clients"): builds the relay and the example with the test
# profile (optimised, and shared with `cargo test`), then runs
# 100 connections of each hostile kind against one relay process.
# With two CPUs or more the run is isolated (`--isolate`: relay on CPU 0,
# member on CPU 1, hostile clients on CPU 1 under SCHED_IDLE; see the
# example's docs), so the ratio measures the relay, not the load
# generator taking the member's CPU.
# Bounded: about 30 s. Usage: scripts/relay_hostile.sh [--per-kind N] [--round-trips N] [--kinds a,b]
set -eu
cd "$(dirname "$0")/.."
cargo build -q --profile test -p groupwire-cli --bin groupwire --example relay_hostile
isolate=
[ "$(nproc)" -ge 2 ] && isolate=--isolate
exec target/debug/examples/relay_hostile $isolate "$@"
