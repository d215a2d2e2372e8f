#!/usr/bin/env bash
# Validate groupwire's tcp-dumbbell scenario against ns-3 (3.37).
#
# Runs the grid {100Mbps, 1Gbps} x RTT {10, 100} ms x flows {10, 100} on both
# simulators plus the speed benchmark cell (1 Gbit/s, RTT 100 ms, 100 flows,
# 10 simulated seconds), stores per-run JSON in validation/ns3/build/results/
# and writes the comparison to docs/results/ns3-validation.md.
#
# Usage: validation/ns3/run.sh [--only ns3|groupwire] [--reuse-ns3] [--save-reference]
#   --only ns3         run ns-3 only (groupwire columns show "—")
#   --only groupwire   run groupwire only (ns-3 numbers from earlier runs / reference)
#   --reuse-ns3        do not run ns-3; use the committed validation/ns3/reference/*.json
#   --save-reference   copy this run's ns-3 JSON files into validation/ns3/reference/
#   --no-markdown      do not (re)write the markdown report
#
# Environment (to shrink the grid for quick tries):
#   RATES="100Mbps 1Gbps"  RTTS="10 100"  FLOWS="10 100"  DURATION=20  WARMUP=5
#   SEEDS="1 2 3" (every grid cell runs once per seed on both sides; SEED=N is
#   accepted as a shorthand for SEEDS=N)
#   SPEED=1 (0 skips the speed cell; it runs with the first seed only)
#   GRID=1 (0 skips the grid, e.g. to run only the CBR cells)
#   SPEED_DURATION=10  SPEED_WARMUP=5
#   NS3_ARGS="--tcpStats=1" (extra dumbbell options, e.g. per-flow retransmission
#   and timeout counters; they do not change the simulated behaviour)
#   OUT_MD=docs/results/ns3-validation.md  RESULTS=validation/ns3/build/results
#
# CBR cells (issue 15): CBR_COUNT constant-bit-rate UDP flows at CBR_RATE beside
# N TCP flows on a CBR_RTT dumbbell, over a small sweep of the bottleneck rate
# (CBR_RATES, bit/s) so that both simulators are averaged over the phase-locking
# sawtooth of the CBR loss; plus groupwire alone at the first rate with
# CBR_JITTER of host send-time jitter over CBR_JITTER_SEEDS seeds.
#   CBR=1 (0 skips)  CBR_FLOWS="100 200"  CBR_COUNT=10  CBR_RATE=30Mbps  CBR_RTT=10
#   CBR_RATES="1000000000 1000250000 ... 1001250000" (6 rates, 0.25 Mbit/s apart)  CBR_SEEDS=1
#   CBR_DURATION=10  CBR_WARMUP=3  CBR_JITTER=20us  CBR_JITTER_SEEDS="1 2 3 4 5"
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cmdline="validation/ns3/run.sh${*:+ $*}"

only=""
reuse_ns3=0
save_ref=0
markdown=1
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only="${2:?--only needs ns3 or groupwire}"; shift 2 ;;
        --only=*) only="${1#--only=}"; shift ;;
        --reuse-ns3) reuse_ns3=1; shift ;;
        --save-reference) save_ref=1; shift ;;
        --no-markdown) markdown=0; shift ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$only" in ""|ns3|groupwire) ;; *) echo "run.sh: --only ns3|groupwire" >&2; exit 2 ;; esac

RATES="${RATES:-100Mbps 1Gbps}"
RTTS="${RTTS:-10 100}"
FLOWS="${FLOWS:-10 100}"
DURATION="${DURATION:-20}"
WARMUP="${WARMUP:-5}"
SEEDS="${SEEDS:-${SEED:-1 2 3}}"
first_seed="${SEEDS%% *}"
SPEED="${SPEED:-1}"
GRID="${GRID:-1}"
SPEED_DURATION="${SPEED_DURATION:-10}"
SPEED_WARMUP="${SPEED_WARMUP:-5}"
OUT_MD="${OUT_MD:-$repo/docs/results/ns3-validation.md}"
CBR="${CBR:-1}"
CBR_FLOWS="${CBR_FLOWS:-100 200}"
CBR_COUNT="${CBR_COUNT:-10}"
CBR_RATE="${CBR_RATE:-30Mbps}"
CBR_RTT="${CBR_RTT:-10}"
CBR_RATES="${CBR_RATES:-1000000000 1000250000 1000500000 1000750000 1001000000 1001250000}"
CBR_SEEDS="${CBR_SEEDS:-1}"
CBR_DURATION="${CBR_DURATION:-10}"
CBR_WARMUP="${CBR_WARMUP:-3}"
CBR_JITTER="${CBR_JITTER:-20us}"
CBR_JITTER_SEEDS="${CBR_JITTER_SEEDS:-1 2 3 4 5}"

results="${RESULTS:-$here/build/results}"
mkdir -p "$results"

run_ns3=1
run_gw=1
[ "$only" = "groupwire" ] && run_ns3=0
[ "$only" = "ns3" ] && run_gw=0
[ "$reuse_ns3" = 1 ] && run_ns3=0

if [ "$run_ns3" = 1 ]; then
    "$here/build.sh"
fi
if [ "$run_gw" = 1 ]; then
    (cd "$repo" && cargo build --release -p groupwire-cli)
fi

# Result files are named <sim>_<cell>_s<seed>.json.
# name rate rtt_ms flows duration_s warmup_s seed
ns3_cell() {
    local name="$1_s$7" rate="$2" rtt="$3" flows="$4" dur="$5" warm="$6" seed="$7"
    local log="$results/ns3_$name.log"
    echo "ns-3:      $name (duration ${dur}s, warmup ${warm}s, seed $seed)" >&2
    shift 7
    # shellcheck disable=SC2086  # NS3_ARGS is a list of options
    if "$here/build/dumbbell" --rate="$rate" --rtt="$rtt" --flows="$flows" \
        --duration="$dur" --warmup="$warm" --seed="$seed" ${NS3_ARGS:-} "$@" >"$log" 2>&1; then
        tail -n 1 "$log" >"$results/ns3_$name.json"
        grep '^# goodput' "$log" >&2 || true
    else
        echo "run.sh: ns-3 run $name failed; see $log" >&2
        rm -f "$results/ns3_$name.json"
    fi
}

gw_cell() {
    local name="$1_s$7" rate="$2" rtt="$3" flows="$4" dur="$5" warm="$6" seed="$7"
    local dir="$here/build/groupwire/$name"
    shift 7
    rm -rf "$dir"
    mkdir -p "$dir"
    echo "groupwire: $name (duration ${dur}s, warmup ${warm}s, seed $seed)" >&2
    if (cd "$repo" && "$repo/target/release/groupwire" sim run tcp-dumbbell \
        --seed "$seed" --out "$dir" \
        --set "bottleneck_rate=$rate" --set "rtt=${rtt}ms" --set "flows=$flows" \
        --set "duration=${dur}s" --set "warmup=${warm}s" "$@" --quiet) \
        >"$results/gw_$name.log" 2>&1 && [ -s "$dir/summary.json" ]; then
        cp "$dir/summary.json" "$results/gw_$name.json"
    else
        echo "run.sh: groupwire run $name failed; see $results/gw_$name.log" >&2
        rm -f "$results/gw_$name.json"
    fi
}

start=$(date +%s)
grid_seeds="$SEEDS"
[ "$GRID" = 1 ] || grid_seeds=""
for seed in $grid_seeds; do
    for rate in $RATES; do
        for rtt in $RTTS; do
            for flows in $FLOWS; do
                name="${rate}_${rtt}ms_${flows}f"
                if [ "$run_ns3" = 1 ]; then
                    ns3_cell "$name" "$rate" "$rtt" "$flows" "$DURATION" "$WARMUP" "$seed"
                fi
                if [ "$run_gw" = 1 ]; then
                    gw_cell "$name" "$rate" "$rtt" "$flows" "$DURATION" "$WARMUP" "$seed"
                fi
            done
        done
    done
done
if [ "$SPEED" = 1 ]; then
    name="speed_1Gbps_100ms_100f_${SPEED_DURATION}s"
    if [ "$run_ns3" = 1 ]; then
        ns3_cell "$name" 1Gbps 100 100 "$SPEED_DURATION" "$SPEED_WARMUP" "$first_seed"
    fi
    if [ "$run_gw" = 1 ]; then
        gw_cell "$name" 1Gbps 100 100 "$SPEED_DURATION" "$SPEED_WARMUP" "$first_seed"
    fi
fi
if [ "$CBR" = 1 ]; then
    # The CBR rate in bit/s, for file names.
    cbr_bps=$(python3 -c 'import re,sys; m=re.fullmatch(r"([0-9.]+)\s*([kMG]?)(bps|bit/s)?", sys.argv[1]); print(int(float(m[1])*{"":1,"k":1e3,"M":1e6,"G":1e9}[m[2]]))' "$CBR_RATE")
    for seed in $CBR_SEEDS; do
        for flows in $CBR_FLOWS; do
            for rate in $CBR_RATES; do
                name="cbr_${rate}bps_${CBR_RTT}ms_${flows}f_${CBR_COUNT}x${cbr_bps}"
                if [ "$run_ns3" = 1 ]; then
                    ns3_cell "$name" "${rate}bps" "$CBR_RTT" "$flows" "$CBR_DURATION" "$CBR_WARMUP" "$seed" \
                        --cbrFlows="$CBR_COUNT" --cbrRate="$CBR_RATE"
                fi
                if [ "$run_gw" = 1 ]; then
                    gw_cell "$name" "${rate}bps" "$CBR_RTT" "$flows" "$CBR_DURATION" "$CBR_WARMUP" "$seed" \
                        --set "cbr_flows=$CBR_COUNT" --set "cbr_rate=$CBR_RATE" --set queue_zoom=0s
                fi
            done
        done
    done
    if [ "$run_gw" = 1 ]; then
        rate="${CBR_RATES%% *}"
        for seed in $CBR_JITTER_SEEDS; do
            for flows in $CBR_FLOWS; do
                name="cbrjitter_${rate}bps_${CBR_RTT}ms_${flows}f_${CBR_COUNT}x${cbr_bps}"
                gw_cell "$name" "${rate}bps" "$CBR_RTT" "$flows" "$CBR_DURATION" "$CBR_WARMUP" "$seed" \
                    --set "cbr_flows=$CBR_COUNT" --set "cbr_rate=$CBR_RATE" --set queue_zoom=0s \
                    --set "send_jitter=$CBR_JITTER"
            done
        done
    fi
fi
echo "run.sh: runs took $(( $(date +%s) - start )) s" >&2

if [ "$save_ref" = 1 ]; then
    mkdir -p "$here/reference"
    for seed in $SEEDS $CBR_SEEDS; do
        cp "$results"/ns3_*_s"$seed".json "$here/reference/" 2>/dev/null || true
    done
    echo "run.sh: copied ns-3 results to $here/reference/" >&2
fi

[ "$markdown" = 1 ] || exit 0

# Later directories override earlier ones: with --reuse-ns3 the committed
# reference wins over stale ns-3 files in build/results.
dirs=("$results")
[ "$reuse_ns3" = 1 ] && dirs+=("$here/reference")

mkdir -p "$(dirname "$OUT_MD")"
{
    echo "# groupwire vs ns-3: TCP dumbbell validation"
    echo
    echo "Generated by \`$cmdline\` on $(date -u '+%Y-%m-%d %H:%M UTC')" \
        "(commit $(cd "$repo" && git rev-parse --short HEAD 2>/dev/null || echo unknown))."
    if [ "$reuse_ns3" = 1 ]; then
        echo "ns-3 numbers are the committed ones in \`validation/ns3/reference/\`."
    fi
    echo
    echo "Setup (identical on both sides; details in \`validation/ns3/README.md\`):" \
        "N senders and N receivers on 10 Gbit/s access links (0.1 ms one way)," \
        "one bottleneck of rate B with one-way delay RTT/2 − 0.2 ms, drop-tail FIFO" \
        "of min(BDP, 2048) packets, 1500-byte IP packets (MSS 1460, no TCP timestamps)," \
        "N long-lived TCP NewReno flows (SACK, window scaling, classic recovery," \
        "initial cwnd 10, min RTO 200 ms, delayed ACK every 2nd segment / 200 ms)" \
        "starting uniformly in [0, 1) s. Grid runs: ${DURATION} s simulated," \
        "${WARMUP} s warm-up, seeds ${SEEDS} (each cell once per seed on each side)." \
        "CBR cells: ${CBR_DURATION} s simulated, ${CBR_WARMUP} s warm-up, seeds ${CBR_SEEDS}," \
        "bottleneck rates ${CBR_RATES} bit/s; groupwire with send jitter ${CBR_JITTER}:" \
        "seeds ${CBR_JITTER_SEEDS} at the first rate." \
        "ns-3 is 3.37 (Debian libns3-dev)," \
        "built with g++ -O2; machine: $(nproc) CPU(s)," \
        "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //' || echo unknown CPU)."
    echo
    python3 "$here/compare.py" "${dirs[@]}"
} >"$OUT_MD.tmp"
mv "$OUT_MD.tmp" "$OUT_MD"
echo "run.sh: wrote $OUT_MD" >&2
