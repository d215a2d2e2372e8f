#!/usr/bin/env bash
# Regenerates the simulator results under docs/results/ from the commands
# named in each file. (The ns-3 comparison has its own script:
# validation/ns3/run.sh.)
#
#   scripts/results.sh            # everything
#   scripts/results.sh link-models
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p groupwire-cli
gw=target/release/groupwire

# result NAME "PROSE" ARGS...: runs `groupwire sim run ARGS... --out docs/results/NAME`
# and writes docs/results/NAME.md from the run's report.
result() {
  local name=$1 prose=$2
  shift 2
  local dir=docs/results/$name
  rm -rf "$dir"
  "$gw" sim run "$@" --out "$dir" --quiet
  {
    echo "# $name"
    echo
    echo "Produced by \`scripts/results.sh $name\`, which runs:"
    echo
    echo '```sh'
    echo "groupwire sim run $*"
    echo '```'
    echo
    echo "$prose"
    echo
    sed -e "s#](\([a-z0-9-]*\.png\))#]($name/\1)#" "$dir/report.md"
  } >"docs/results/$name.md"
  rm "$dir/report.md"
  echo "wrote docs/results/$name.md"
}

targets=("$@")
selected() { [ ${#targets[@]} -eq 0 ] || [[ " ${targets[*]} " == *" $1 "* ]]; }

if selected link-models; then
  result link-models \
"Each loss model of \`groupwire-link\` is drawn 10^6 times (1500-byte packets)
and compared with its analytic long-run loss rate and mean loss-run length;
the plots compare the empirical run-length distribution with the analytic one.
The four \`burst:\` rows are Dyck & Gutwin's burst patterns (§5, \"Loss
patterns\"): the paper calls them 10% and 20% overall loss; the exact
long-run rates of its description are in the analytic column. Bursts may
abut, so a run of losses can be longer than the longest burst. The
\`gilbert\` and \`ge\` rows use Miyoshi et al.'s Table 2 transition
probabilities. The unit tests in \`crates/groupwire-link\` hold every model
to 5 standard errors on these quantities." \
    link-models --seed 1
fi

if selected awareness-path; then
  result awareness-path \
"A clustered telepointer stream (30 updates/s at most, moves separated by
pauses) over a 56 kbit/s path with 10% random loss, carried once by plain
UDP and once by TCP on the same loss pattern: the baseline half of Dyck &
Gutwin's comparison (§6, Figures 4 and 6). UDP's message error rate is the
loss rate and its latency is propagation plus serialization; TCP loses
nothing and pays in head-of-line blocking behind retransmissions." \
    awareness-path --seed 1
fi

if selected tcp-dumbbell; then
  result tcp-dumbbell \
"The README's main job: ten TCP NewReno/SACK flows through a 100 Mbit/s
drop-tail bottleneck (RTT 20 ms, queue min(BDP, 2048) packets), measured
after a 5 s warm-up." \
    tcp-dumbbell --seed 1
fi
