#!/usr/bin/env bash
# Regenerates the simulator results under docs/results/ from the commands
# named in each file. (The ns-3 comparison has its own script:
# validation/ns3/run.sh.)
#
#   scripts/results.sh            # everything
#   scripts/results.sh link-models
#   scripts/results.sh tcp-dumbbell-cbr  # issue 15's CBR case, 5 seeds with send jitter, about a minute
#   scripts/results.sh miyoshi    # Miyoshi et al.'s tables and figures, about 10 s
#   scripts/results.sh leigh      # Leigh et al.'s Figures 3-5 and the XOR layouts, a few seconds
#   scripts/results.sh robustness # issue 15's family bench on one page (its parts below; PEERS=1 adds the peers)
#   scripts/results.sh fec-codes  # sliding-window vs block code on the channel family, a few minutes
#   scripts/results.sh robustness-afec  # issue 15's channel family for AFEC, about 2 minutes on 2 cores
#   scripts/results.sh bulk       # Leigh et al.'s Figure 6 and the LFN table (RBUDP, striped TCP, TCP), about a minute
#   scripts/results.sh bulk-real  # groupwire bulk beside iperf3 on real sockets, about 10 minutes (root)
#   scripts/results.sh session-striping  # a session's bulk channel on 1, 2, 4, 8 TCP connections, real sockets, under a minute
#   scripts/results.sh tunnel     # real processes on loopback, about 6 minutes
#   scripts/results.sh robustness-tunnel  # the tunnel on the channel family, a few minutes
#   scripts/results.sh relay      # the relay's figures and throughput, about 20 minutes
#   scripts/results.sh relay-cluster  # relay nodes on NATS: 1-3 nodes, JetStream vs SQLite, failover; about 3 minutes
#   scripts/results.sh robustness-peers  # tunnel beside UDPspeeder and kcptun's FEC, 8-16 minutes
#   scripts/results.sh tele-immersion  # issue 16's session: model selector vs heuristic vs fixed, under a minute
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p groupwire-cli
gw=${CARGO_TARGET_DIR:-target}/release/groupwire

# fresh NAME SIM_ARGS...: `groupwire sim SIM_ARGS... --out docs/results/NAME
# --quiet` into an emptied folder.
fresh() {
  local dir=docs/results/$1
  shift
  rm -rf "$dir"
  "$gw" sim "$@" --out "$dir" --quiet
}

# report NAME: the report of the run in docs/results/NAME/, its plots'
# links made relative to docs/results/; removes it (the page replaces it).
report() {
  sed -e "s#](\([^)]*\.png\))#]($1/\1)#" "docs/results/$1/report.md"
  rm "docs/results/$1/report.md"
}

# result NAME "PROSE" ARGS...: runs `groupwire sim run ARGS... --out docs/results/NAME`
# and writes docs/results/NAME.md from the run's report.
result() {
  local name=$1 prose=$2
  shift 2
  fresh "$name" run "$@"
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
    report "$name"
  } >"docs/results/$name.md"
  echo "wrote docs/results/$name.md"
}

# sweep NAME: runs the experiment plan crates/groupwire-sim/plans/NAME.toml
# (`groupwire sim sweep`) into docs/results/NAME/ and makes its page
# docs/results/NAME.md.
sweep() {
  fresh "$1" sweep "crates/groupwire-sim/plans/$1.toml"
  report "$1" >"docs/results/$1.md"
  echo "wrote docs/results/$1.md"
}

# scripted NAME: a scenario whose page needs prose built from the numbers:
# the run's files, then scripts/NAME_doc.py (underscores for dashes)
# writes the page.
scripted() {
  local name=$1
  fresh "$name" run "$name" --seed 1
  rm -f "docs/results/$name/report.md"
  python3 "scripts/${name//-/_}_doc.py" "docs/results/$name" "docs/results/$name.md" \
    "groupwire sim run $name --seed 1 --out docs/results/$name"
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
probabilities. The last two rows are time-varying channels
(\`schedule:alternating\`, \`schedule:fading\`) drawn at 1000 packets/s:
their analytic figures are time-weighted over a cycle (mean run: lost
packets over runs started, each part weighted by the runs it starts).
10^6 packets span 25 cycles of \`fading\` but 8 1/3 of \`alternating\`,
whose last third is a minute of light loss, so its empirical loss rate
sits a few percent below the cycle's. The unit tests in
\`crates/groupwire-link\` hold every fixed model to 5 standard errors on
these quantities." \
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

if selected dyck; then
  # Dyck & Gutwin's grid, with the numbers the paper's text gives beside ours.
  sweep dyck
fi

if selected robustness-afec; then
  result robustness-afec \
"Issue 15's channel family for AFEC: the paper's integer controller
(\`afec\`), fractional steps (\`afec-frac\`), the predictive controller
(\`afec-pred\`) and the robust one (\`afec-robust\`, Step::Robust in
crates/groupwire-proto/src/afec/robust.rs) on Bernoulli, Gilbert (10% loss
in mean bursts of 2, 5 and 10), Gilbert-Elliott with loss in both states
and the time-varying presets \`schedule:alternating\` and
\`schedule:fading\`, with four MER bands, at a rate where the bandwidth
suffices for most cells and one where it does not for the heavier ones.
The source, path and endpoint are \`dyck\`'s (the clustered telepointer,
loss both ways, an unbounded queue; adaptive schemes cap their rate at 85%
of the path), with the default message lifetime, so late messages count as
lost. Each cell pools the seeds named in the summary.

**The oracle** of a cell is the cheapest fixed code set size on a 0.05 grid
that *meets* the band: whose MER over the scored messages (after the
warm-up, pooled over the seeds) is at or below the band's top. The search
bisects the grid (whole sizes first, then between the two that bracket the
top). \`band_reachable\` is *no* where plain UDP (size 1) already loses
less than the band's floor: no redundancy reaches such a band.
\`bandwidth_suffices\` comes from the measured load: the oracle's wire
bytes per message at the source's peak rate (\`peak_load_kbit_s\`) fit
the 85% of the rate that the adaptive schemes may use. \`size_bound\` is
the smallest whole size whose fixed MER is at most half the band's floor
(or, if none is, the whole size with the fewest errors): the most the
measured loss process needs.

**Columns** (controllers table): \`in_band\` is the share of scored
1000-message windows with an MER inside the band; \`*_vs_oracle\` are
ratios to the oracle's MER, mean, p95 and p99 latency and wire bytes per
message; \`max_size\` is the largest code set size in force for a message
after the warm-up; on the time-varying channels \`recovery_*_windows\` count
windows from each change of channel (a segment start of the schedule) to
the first window back in band (0: the window the change falls in is in
band) and \`never_recovered\` the changes after which no window of the
run was in band.

**Goals** (issue 15), scored where the bandwidth suffices and the band is
reachable: \`in_band\` at least 85% of windows; \`latency\` mean and p95
no worse than the oracle's (within 1% for rounding); \`bytes\` within 1.1x
the oracle's; \`no_overshoot\` max_size at most size_bound; \`recovery\`
every change back in band within 3 windows (always met on steady
channels). The goals table counts the cells meeting each; the misses
table lists every missed cell with its numbers, and its \`why\` column
reads them: per missed goal, the reason where the numbers show one (plain
UDP, the oracle, within two standard deviations of a window of the band's
floor; a mean MER under the oracle's, which recovers more messages, each
after a later packet), else the measure beside the goal. Read \`in_band\` beside
the oracle's: on bursty channels the MER of 1000 messages varies by more
than a narrow band is wide even at a fixed size, so the oracle itself holds
the band in only some windows, and the goal of 85% cannot be met there by
any controller that only chooses a size; those misses are the channel's,
and the table says by how much each controller beats or trails the
oracle's share.

**Window tracking** (\`afec-robust\`, \`window_goal\` in
crates/groupwire-proto/src/afec/robust.rs). The robust controller does
more than choose a size: every 10 messages it asks for the size whose
predicted MER brings the receiver's 1000-message window back to its aim
within 200 messages, counting the losses the window holds and those about
to leave it (deadbeat control of the window, clamped so the size never
exceeds what half the band's floor needs). The aim is as high in the band
as the window's measured spread allows: two standard deviations under the
top, between the middle and four fifths of the way up (60% until a full
window's spread is known: \`Spread\` in robust.rs). So
on the random and short-burst channels it holds the band in more windows
than the oracle, often in nearly all of them, where before (one integral
correction every 200 messages) it held about as many as the oracle. What
stops more cells from meeting every goal, read from the misses table:
(1) *latency*: a window in band more often means a mean MER below the
oracle's, which sits just under the band's top, so more messages are
recovered rather than lost, each one a packet late; the latency goal (no
worse than the oracle within 1%) is then missed by what holding the band
costs, not by the control; (2) where plain UDP's loss sits at the band's
floor (\`bernoulli:0.05\` in 5-6%; \`bernoulli:0.1\` and the Gilbert
channels in 10-12%: the \`why\` column names them) a large share of the
windows fall below the floor at size 1 and no redundancy can raise them; (3) on long bursts (mean 5 and 10), Gilbert-Elliott's bad spells and the
time-varying presets one burst at a size below its length loses many
messages at once, the window's spread stays wider than the band, and the
sizes that would absorb the bursts exceed \`size_bound\`. Its change
detector (CUSUM on the fitted Gilbert chain) needs strong evidence
(\`THRESHOLD\` in robust.rs says what a weaker one did on the
Gilbert-Elliott cells): the window tracking and the estimate's
exponential forgetting follow a change without cutting the memory." \
    robustness-afec --seed 1
fi

if selected tcp-dumbbell; then
  result tcp-dumbbell \
"The README's main job: ten TCP NewReno/SACK flows through a 100 Mbit/s
drop-tail bottleneck (RTT 20 ms, queue min(BDP, 2048) packets), measured
after a 5 s warm-up. The queue plot's 100 ms samples are too far apart to
show the queue's sawtooth; the queue_fine plot samples it every 1 ms for
the first second after the warm-up (\`queue_zoom\`)." \
    tcp-dumbbell --seed 1
fi

if selected tcp-dumbbell-cbr; then
  result tcp-dumbbell-cbr \
"Issue 15's case: ten CBR UDP flows at 30 Mbit/s beside 200 TCP NewReno/SACK
flows on a 1 Gbit/s, 10 ms drop-tail dumbbell, 10 s with a 3 s warm-up,
every host sending with up to 20 us of send-time jitter, over five seeds
(each seed draws the flows' start times and the jitter). The summary is the
mean over seeds with the min and max of the headline numbers; the seeds
table has one row per seed; the other tables and the plots are seed 1's.
Without jitter a CBR flow's exact period locks into phase with the queue and
one run's CBR loss is a point on a sawtooth over the bottleneck rate
([ns3-validation.md](ns3-validation.md) shows the sawtooth on both
simulators and this jittered setting against it)." \
    tcp-dumbbell --seed 1 --set flows=200 --set bottleneck_rate=1Gbps --set rtt=10ms \
    --set cbr_flows=10 --set cbr_rate=30Mbps --set duration=10s --set warmup=3s \
    --set send_jitter=20us --set seeds=5
fi

if selected tunnel-sim; then
  result tunnel-sim \
"The machine \`groupwire tunnel\` runs (\`groupwire_proto::tunnel::TunnelEndpoint\`)
on the simulator instead of sockets: side A sends 2000 datagrams/s of 1000
bytes for 30 s to side B over a link with Gilbert loss (10% long-run, mean
burst 4: the channel of [tunnel.md](tunnel.md)); the reverse link, which
carries B's reports, is lossless. The six settings are the rows of
tunnel.md, each on its own copy of the link with the same seed. residual
is 1 − distinct datagrams B delivered / sent; overhead counts IP and UDP
headers on both sides, as the real tunnel does. The real processes add
scheduling noise and timing that varies with load; the simulated sender is
exactly periodic (so with a 2 ms block wait every block closes early, 4
datagrams each), and one-way latency is the link's 1 ms plus what recovery
added. Read it beside tunnel.md: what differs between the two is the
driver (timing, batching, a real sender's irregular gaps, which change how
many datagrams a 2 ms block holds), not the machine. The last four rows are
Miyoshi et al.'s code switch (\`--fec threshold\`: a window on a ladder of
0 to 3k, one rung up when 2 of the last 10 report intervals left a datagram
unrebuilt, one down after 10 that did not) and our predictive switch
(\`--fec predictive\`: an online two-state fit of the per-interval packet
losses, the window with the best expected goodput, a lost block weighted 20
blocks), at k = 20 and k = 150 (docs/results/miyoshi.md describes both).
The two target rows are \`groupwire tunnel\`'s default controller
(\`--fec target\`, which picks k and Fwnd per block to meet
\`--target-loss\` within \`--max-delay\`; its k column is only its
starting point), with its defaults and with a 100 ms budget; on the whole
channel family it is in [robustness-tunnel.md](robustness-tunnel.md).
The last three rows are the sliding-window code (RFC 8681): fixed at a
window of 20 and half a repair per source (\`--fec sliding:w=20,o=0.5\`),
and closed loop (\`--fec sliding:target\`, the target controller choosing
the window and overhead) at the two target rows' goals; a sliding code has
no blocks, so its k, Fwnd and block columns are empty or zero.
The channel table is what every transport reports (docs/metrics.md), here
from B's application on the simulator's clock: one-way latency, the jitter
of Leigh et al.'s Figure 4 and of RFC 3550, and the burstiness of the
sources' loss on the link with the Gilbert chain fitted to it; the no-FEC
row's fit should recover the link's own p and r (the loss model above)." \
    tunnel --seed 1
fi

if selected robustness-tunnel; then
  # The tunnel on the channel family (issue 15): every cell's runs on both
  # cores, a few minutes; a script composes the page with the reasons for
  # every missed cell, from the run's files.
  scripted robustness-tunnel
fi

if selected miyoshi; then
  scripted miyoshi
fi

if selected leigh; then
  scripted leigh
fi

if selected fec-codes; then
  result fec-codes \
"A sliding-window code (RFC 8681's SWRLC over GF(2^8), \`groupwire_codec::sliding\`)
against a Reed-Solomon block code (what the tunnel sends) at equal overhead
and equal span, on the closed-loop issue's channel family
(\`LossModel::family\`). Sources of 1000 bytes leave at 2000/s onto a
100 Mbit/s link; the loss process decides each packet (source or repair) at
its departure, so a code that sends more is exposed to more loss. The block
code sends each block's m repairs after its k-th source; the sliding code
sends a repair over its last w sources whenever its credit of o repairs per
source reaches one. Both run for real: every repair is encoded and every
rebuilt source checked byte for byte. overhead is repair packets per
source; residual is sources never delivered; rebuilt_* is the delay from a
rebuilt source's send to its rebuild; late_Xms is the share of sources not
delivered within X ms (lost ones included): the residual loss an
application with that delay budget sees. The pairs table sets each block
code beside the sliding code of the same overhead and span, and the wins
table counts, per budget, the channels where each leaves fewer sources
late. Each cell pools two seeds of 120 s (240,000 sources, the last 256
not scored)." \
    fec-codes --seed 1
fi

if selected tele-immersion; then
  result tele-immersion \
"Issue 16's simulator proof, first version
(\`crates/groupwire-sim/src/scenario/tele_immersion.rs\`; its module docs
define every measure). One session (\`groupwire_proto::session::Session\`)
from A to B with five channels: a telepointer (30 messages/s of 40 bytes,
\`Qos::awareness().mer_band(0.05, 0.06)\`), state (20/s of 200 bytes,
\`Qos::low_latency().max_loss(0.001).max_delay(50ms)\`), a camera (2 Mbit/s
in 1000-byte messages, \`Qos::stream().rate(2Mbit/s).max_residual_loss(0.001).max_delay(50ms)\`),
edits (2/s of 300 bytes, \`Qos::reliable_ordered()\`) and bulk (a 1 MB
dataset every 30 s in 16 KiB messages, \`Qos::bulk()\`). The path (A to B;
the reverse is loss-free with the same rate and delay) changes every 60 s:
its loss is 0.1% random, then 2% random, then Gilbert with 8% loss in mean
bursts of 4, then 0.5% random; its rate is 10 Mbit/s but 4 Mbit/s in the
third minute; its one-way delay is 20 ms, 40 ms in the second and third
minutes; a 100-packet drop-tail queue. Runs on the same seed: the
model-based selector (\`model\`), Leigh et al.'s heuristic (\`heuristic\`),
every channel pinned to one mechanism (\`fixed:M\`, where M is valid for
the channel's QoS; \`valid\` is false where it is not and the channel sat on
its initial mechanism), and the model selector on a stationary path (2%
random loss, 10 Mbit/s, 20 ms; \`stationary\`).

**Columns.** \`qos_met\`: share of 1 s windows (by send time, after a 10 s
warm-up) whose messages lost or late are within the QoS (band: at most its
top, 6%; residual: at most 0.1%; reliable: none lost); \`in_band\`: within
the band itself; \`lost\`: never delivered; \`late\`: delivered after the
deadline (the link's propagation delay plus the 50 ms budget, or the
telepointer's 400 ms lifetime); \`overhead\`: the session's wire bytes per
application byte, less one (stream channels: frame headers only; TCP/IP
headers and retransmissions are not counted); latency from send to
delivery at B. The goal table sets the model run beside the best fixed
choice per channel (highest \`qos_met\`, then least overhead); the
mechanism plots show the mechanism each policy run had in force (0 plain,
1 afec, 2 xor, 3 block, 4 reliable, 5 striped).

**What this run shows (the reasons are read from the code and the
tables below).** One seed's comparison turns on a window or two of 230
(each run draws its own losses), so the measure is the pooled tables at
the end of this page (24 seeds); this seed's goal table is an example.
Pooled, the model selector meets the telepointer's and the camera's QoS
in at least as many windows as the best fixed choice for each, at less
overhead; on the state channel it meets the overhead goal and misses the
QoS. \`the_model_selector_meets_the_goal_for_the_telepointer_and_the_camera\`
checks the pooled comparison on seeds 1 to 4, and
\`the_model_selector_meets_issue_16s_goal\` stays ignored for the rest.
The stationary run never switches more than once a minute. The \`qos_*\`
plots show where each policy loses windows, per 10 s, beside the best
fixed choice; the \`monitor_*\` plots what the model run's resource
monitor believed of the path.

What closed most of the gap, each in the module docs where it lives:
(1) **Capacity.** The monitor reads a path as full when a standing queue
holds and the peer gets less of what was sent than the path's own loss
explains; the delivered rate then (the stream's bytes with the
datagrams', so a bulk transfer filling the path measures it) is the
capacity, kept a minute (forgotten at once on a shorter path: a minimum
round trip under three quarters of the one it was measured at is a new
link, not a queue, so the camera leaves plain within 3 s of the fourth
minute's faster link, not 11 s), and the loss counted while full stays out
of the Gilbert fit. Each channel's share is the capacity less what the others
send without redundancy. At the start of the third minute, Block's
controller answers 8% bursty loss on a link cut to 4 Mbit/s with more
repairs than the link carries: the controller now sees the overload
within about a second and moves the camera to what fits (before, the
camera held Block for the whole minute and every channel was late behind
the full queue). (2) **Rescue.** A fixed 60 s dwell kept a channel on a
mechanism a new path had made useless; now a channel that no longer meets
its QoS on a path whose loss rate moved twofold (over 0.5%), or whose
mechanism no longer fits, moves after a 2 s (overload: 0.5 s) hold, the
dwell notwithstanding; economies still wait out the dwell. (3)
**Windows.** The QoS is judged per 1 s window, so the model keeps a
mechanism only if at most 5% of windows are predicted over the target,
counting the clumps its losses come in (\`window_meets\`: an XOR row
that fails loses two messages at once, so a row of ten at 2% loss, 0.5%
lost on average, puts 7% of the telepointer's 30-message windows over
its one-loss allowance, not the 1% independent losses would); targets
for Block are set at the mean that independent losses would allow
(\`window_target\`: about 1.2% for the telepointer). A mechanism whose
own windows fail beyond chance is moved within the dwell. (4) **Evidence.** It predicts on the loss-run rate one
standard error above the fit, so a lucky few seconds do not strip a
channel's redundancy. (5) **Interleaving.** A channel's packets see the
path's chain only every few packets (the others' packets between): the
telepointer's XOR groups lose nearly independently on a bursty path, and
a session XOR copy sent after the idle wait is that many packets later,
while two copies sent together are adjacent. (6) **Late recoveries**
reported after the interval that counted them lost no longer read as
residual loss to the closed loop. (7) **Nothing meets**: the fewest
failed windows (\`window_fail\`), and of candidates within a tenth of
the fewest, the least loss for the bytes sent (\`loss_cost\`): on the
third minute's path the state channel takes a second copy of each
message (it cuts the windows lost, where the least loss for the bytes
alone refused it), and the camera, which fails every window whatever it
sends, the light code that trims the most loss for its bytes. (8) Reliable is late for a budgeted channel when a bulk
channel shares the stream (one FIFO TCP connection). (9) **AFEC's band
is its receiver's** (Dyck and Gutwin's NAK and INC), which reads it from
the channel's QoS: the selector aimed the telepointer's AFEC at 1.2% for
its windows, the receiver held the QoS's 5-6%, and the channel lost 5%
on the third minute's path; AFEC candidates now keep the QoS's band.
(10) **Overhead budget.** A Block sender the selector chose may spend
twice the overhead it was chosen at: its own controller raised the
camera's repairs sixfold at the third minute's start, into a link cut
to 4 Mbit/s, and every channel was late until the overload rescue.
(11) **Late prior.** A Block sender opened before the monitor had
measured the path (every channel of \`fixed:block\`) takes the monitor's
fit once it has, instead of outweighing the controller's pessimistic
prior from its own packets. (12) **Stream window.** Reliable frames
wait in the session until the stream has sent the 16 KiB before them
(\`SessionConfig::stream_window\`), and share the stream by capacity
profile (each twice the weight of the one below), so an edit passes a
bulk transfer's waiting frames: the edits' p99 in the
channels table below (22 s at 9fd82265, when the session handed TCP every
frame at once). TCP then sends what the path delivers, so the monitor also
reads a standing queue while frames wait as a full path. (13) **The
closed loop's evidence is the path's.** A recent loss (the monitor's fast
fit) past the change ratio from the loss at the choice is another path,
so the correction measured on the old one is set aside: three seconds
into the fourth minute it had tightened the telepointer's Block to 0.16%
for a path losing 0.5%. (14) **Dispersion.** The receiver measures the
bottleneck's rate from its packets' dispersion (pairs sent together
arrive one serialization time apart) and reports it; times the path's
loss, it is the capacity before anything has filled the path, so at the
third minute's cut to 4 Mbit/s the camera leaves Block within about 1.5 s
(at 91074fea it held Block 17 s on seed 1, until a bulk transfer
overflowed the queue and the full-path test saw it). (15) **Bulk pacing.** Bulk frames on the
stream leave at 85% of what the capacity leaves after the datagram
channels (\`BulkPacer\`), so a dataset's TCP no longer fills the queue
the real-time channels share: every run's first minute used to lose a
window or two of every channel at each dataset. It is the session's, so
the fixed runs have it too (their minute-1 column is the difference).
(16) **Striping.** Where the model predicts one TCP connection's
loss-driven window (RFC 5348's equation at the loss-run rate) falls
short of the bulk channel's share of the measured capacity, it stripes
bulk over the fewest connections within a tenth of the best predicted
throughput (\`Mechanism::Striped\`, Leigh et al. §4.3; each connection
is its own modelled TCP), as the switches table shows in the second
minute and on the stationary path. A dataset then takes less time, and
the edits, which share stream 0 with it, wait behind less of it: the
last table on this page. Without a capacity estimate to pace bulk by
(the fourth minute's new link until it is measured), a striped channel
keeps to stream 0, since unpaced connections would take their shares of
the queue from the real-time channels.

What is still missing: the state channel (20 messages a second, each
XOR copy sent alone 25 ms after its message; at 20 messages a window
and a 0.1% target, one loss fails a window). The pooled tables show
where its windows go. (a) In the first minute the model keeps it plain:
at 0.1% loss about one window in fifty fails (1 − 0.999²⁰), within the
5% of windows the controller's \`window_risk\` allows, while every fixed
XOR row sends each message twice and, now that bulk is paced, fails
none (the minute-1 column). (b) At the second minute's 2% loss it moves
to \`xor:2\` after the 2 s rescue hold, a few windows late (minute 2).
(c) In the third minute it moves to two copies (\`xor:4x4\`) about 3 s
in and still fails more windows than \`xor:5x5\`, the best fixed choice
by the mean, which sends two copies from the start: its first seconds
fail, and so do a second or two while the camera's Block still
overloads the link; why the rest of the minute fails more often than
\`xor:5x5\` on the same number of copies is not measured yet (the
camera's cheaper choice puts fewer packets between a message and its
copies, and the simulator's Gilbert chain is per packet, is one
candidate). Tried and not landed: a \`window_risk\` of 2% bought the
telepointer more redundancy than the best fixed choice spends and left
the state channel where it was; holding bulk frames in the session
while the monitor saw a standing queue made the state channel worse
(what TCP already had in flight stayed in the queue; pacing from the
capacity, above, keeps TCP from holding more than the window); and
requiring the mean loss target besides the window one sent the camera
to heavier codes that overloaded the third minute's link. Neither
selector puts bulk on Blast: the path has no reservation, and Reliable
Blast UDP is offered only with one (\`Provision::reserved\`, Leigh et al. §5).
The \`fixed:blast\` run pins bulk to Blast anyway (each 16 KiB chunk one
transfer, at 90% of the monitor's capacity estimate): its bulk row in
the channels table shows every chunk delivered, at a longer mean latency
than the model's Reliable (each chunk waits for its own Start, Accept
and Done). The other channels of that run sit on their initial
mechanisms (AFEC, Block), as in \`fixed:block\`, whose rows theirs
resemble. The edits' QoS comparison is trivial (every run delivers every
edit); their latency is not.
Packets carry DSCP marks, but the bottleneck is one FIFO. At 30
messages a window the telepointer's MER moves in steps of 1/30, so no
window can sit inside the 5-6% band: \`in_band\` is 0 by arithmetic, and
\`qos_met\` counts windows at or under 6%. The stream's TCP uses a 40 ms
delayed ACK (Linux's minimum; \`stream_tcp\` in the source says why the
simulator's 200 ms default stalls it)." \
    tele-immersion --seed 1
  # The goal table above is one seed's; the same comparison over 24 (one
  # seed's comparison turns on a window or two of 230).
  seeds=$(mktemp -d)
  for s in $(seq 1 24); do
    "$gw" sim run tele-immersion --seed "$s" --out "$seeds/seed-$s" --no-plots --quiet
  done
  {
    echo
    echo "## Over 24 seeds"
    echo
    echo "Produced by the same script, which runs \`groupwire sim run tele-immersion --seed N\`"
    echo "for N = 1 to 24 and pools the runs with \`scripts/tele_immersion_seeds.py\`."
    echo
    python3 scripts/tele_immersion_seeds.py "$seeds"/seed-{1..24}
  } >>docs/results/tele-immersion.md
  rm -rf "$seeds"
fi

if selected bulk; then
  scripted bulk
fi

if selected bulk-real; then
  # Not a simulation: groupwire bulk and iperf3 as processes, through
  # groupwire emulate shell's namespace (root) and on plain loopback.
  python3 scripts/bulk_bench.py docs/results/bulk-real.md
fi

if selected session-striping; then
  # Not a simulation: two sessions on loopback through the emulator's TCP
  # relay, one stream count after another in one run.
  cargo build --release -q -p groupwire-cli --example session_striping
  striping=${CARGO_TARGET_DIR:-target}/release/examples/session_striping
  {
    echo "# A session's bulk channel striped over TCP connections, on real sockets"
    echo
    echo "Produced by \`scripts/results.sh session-striping\` on $(date -u '+%Y-%m-%d %H:%M UTC') (commit $(git rev-parse --short HEAD)), which runs"
    echo "\`crates/groupwire-cli/examples/session_striping.rs\` twice. Machine: $(uname -sr), $(nproc) cores."
    echo
    echo "Two \`groupwire_tokio::session::Session\`s on loopback, the connecting one's"
    echo "datagrams and TCP connections through \`groupwire_tokio::emulator\` with its TCP"
    echo "relay (\`groupwire emulate --tcp\`: each relayed connection is its own Reno TCP"
    echo "across the emulated links, so a lost segment costs that connection a window"
    echo "halving and a retransmission). One bulk channel (\`Qos::bulk()\`) pinned to"
    echo "\`Mechanism::Reliable\` (one connection) or \`Mechanism::Striped { streams: n }\`"
    echo "(Leigh et al. §4.3: each message whole on one of n connections) moves the"
    echo "payload in 16 KiB messages; every message is checked to arrive exactly once."
    echo "Seconds from the first send to the last delivery; the ratio is to the one"
    echo "connection of the same run. Each connection halves its own window at its own"
    echo "losses, so n of them keep about n times one's loss-limited rate until the path's"
    echo "rate bounds them; that is why the model selector stripes a bulk channel where"
    echo "it measures loss on a path one connection cannot fill (\`docs/results/tele-immersion.md\`)."
    echo
    echo "## 1% random loss"
    echo
    "$striping" --loss bernoulli:0.01
    echo
    echo "## 0.1% random loss"
    echo
    "$striping" --loss bernoulli:0.001
  } >docs/results/session-striping.md
fi

if selected geneva; then
  # Many runs (all five controllers x every setting x 2 seeds of 90 s),
  # one run set per core; composed into one page with the paper's numbers.
  sweep geneva
fi

if selected tunnel; then
  # Not a simulation: groupwire tunnel and emulate as processes on loopback.
  cargo build --release -q -p groupwire-cli --example udp_load
  python3 scripts/tunnel_bench.py results docs/results/tunnel.md
fi

if selected relay; then
  # Not a simulation: the relay, nats-server and the load generator as
  # processes on loopback, pinned to one core each; about 20 minutes.
  python3 scripts/relay_bench.py docs/results/relay.md
fi

if selected relay-cluster; then
  # Not a simulation: relay nodes on one nats-server (scripts/nats.sh) and
  # the load generator as processes on loopback; about 3 minutes.
  GW="$gw" python3 scripts/relay_cluster.py docs/results/relay-cluster.md
fi

if selected robustness-peers; then
  # Not a simulation: groupwire tunnel, UDPspeeder and kcp-go (kcptun's
  # FEC) as processes on loopback through one groupwire emulate hop. The
  # peers are built outside the repository (scripts/peers.sh: PEERS_DIR,
  # UDPSPEEDER_SRC, UDPSPEEDER_BIN, KCP_UDP_BIN); without UDPspeeder the
  # page is left as it is.
  cargo build --release -q -p groupwire-cli --example udp_load
  peers=$(scripts/peers.sh)
  if [[ "$peers" == *UDPSPEEDER_BIN=* ]]; then
    (eval "$peers" && export UDPSPEEDER_BIN KCP_UDP_BIN \
      && python3 scripts/peers_bench.py docs/results/robustness-peers.md)
  else
    echo "robustness-peers skipped: UDPspeeder is not available (see above); docs/results/robustness-peers.md left as it is" >&2
  fi
fi

# Issue 15's family bench on one page. Named alone, it runs its parts
# first; in a full run they have run above.
if selected robustness; then
  if [ ${#targets[@]} -gt 0 ]; then
    "$0" robustness-afec robustness-tunnel fec-codes
    if [ "${PEERS:-0}" = 1 ]; then "$0" robustness-peers; fi
  fi
  python3 scripts/robustness_doc.py docs/results
fi
