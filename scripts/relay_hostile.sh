#!/bin/sh
# The relay under hostile clients (docs/results/reliability.md, "Relay
# under hostile clients"): builds the relay and the example with the test
# profile (optimised, and shared with `cargo test`), then runs
# 100 connections of each hostile kind against one relay process.
# Bounded: about 30 s. Usage: scripts/relay_hostile.sh [--per-kind N] [--round-trips N]
set -eu
cd "$(dirname "$0")/.."
cargo build -q --profile test -p groupwire-cli --bin groupwire --example relay_hostile
exec target/debug/examples/relay_hostile "$@"
