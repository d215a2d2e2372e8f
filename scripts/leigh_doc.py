#!/usr/bin/env python3
"""Writes docs/results/leigh.md from a `groupwire sim run leigh` output
directory: Figure 5 beside the paper, the latency price of spreading, what
loss process the paper's numbers imply, and Figure 4 (latency and jitter
against packet size).

    python3 scripts/leigh_doc.py DIR OUT.md "COMMAND"

Every number on the page comes from DIR's CSVs or from the closed forms
below (independent losses), computed here.
"""
import csv
import sys

src, out, command = sys.argv[1:]
rows = list(csv.DictReader(open(f"{src}/schemes.csv")))
cfg = open(f"{src}/scenario.toml").read()
PAPER = {("uncongested", "udp"): 1.90, ("uncongested", "xor:3"): 0.05,
         ("congested", "udp"): 17.40, ("congested", "xor:3"): 4.15}


def get(cond, scheme):
    return next(r for r in rows if r["condition"] == cond and r["scheme"] == scheme)


def pct(x):
    return f"{100 * float(x):.2f}%"


def ms(x):
    return "-" if x in ("", None, "null") else f"{float(x):.2f}"


def iid_residual(p, n=3):
    """Loss left by one parity per n under independent loss p: a packet is
    lost and at least one other of its group (the n - 1 others and the
    parity) is lost too."""
    return p * (1 - (1 - p) ** n)


def iid_loss_for(residual, n=3):
    """The independent loss rate at which one parity per n leaves `residual`."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if iid_residual(mid, n) < residual else (lo, mid)
    return lo


L = ["# leigh", "",
     "Leigh et al.'s XOR FEC over UDP (§4.1): Figure 5, the interleaved (SMPTE 2022-1 column) layouts the paper "
     "asks for, and the latency they cost. Produced by `scripts/results.sh leigh`, which runs:", "",
     "```sh", command, "```", "",
     "and `scripts/leigh_doc.py` for this page. The sender and receiver are `groupwire_proto::xor::XorEndpoint`, "
     "the same machine the real-socket paths use, in the standard's wire format (`tests/xor_gstreamer.rs` checks "
     "it against stock GStreamer both ways).", "",
     "## The setting", "",
     "A 50 Mbit/s stream of 1000-byte datagrams crosses a 100 Mbit/s drop-tail bottleneck (1000 packets of queue) "
     "on a 150 ms round-trip path (the EVL-SARA transatlantic path; the paper gives no RTT for this experiment, "
     "the bulk-transfer section's 150 ms is taken). The path loses 1.9% of packets at random (Bernoulli): the "
     "paper's uncongested UDP loss is its only figure for the path's own loss. Poisson cross traffic shares the "
     "bottleneck: 26 Mbit/s always (the paper does not say what else used the path; this is the one value chosen "
     "here, so that plain UDP under congestion loses about the paper's 17.4%), plus the paper's 50 Mbit/s of "
     "injected congestion. \"Sent at 50 Mbit/s\" is read as 50 Mbit/s on the wire, parity included, so with one "
     "parity per three the media rate is 37.5 Mbit/s (`rate_includes_parity`; the other reading adds the parity's "
     "load on top). The full configuration is `" + f"{src}/scenario.toml" + "`.", "",
     "## Figure 5", "",
     "| condition | scheme | paper | groupwire, link loss | groupwire, after FEC | parity overhead |",
     "|---|---|---|---|---|---|"]
for cond in ("uncongested", "congested"):
    for scheme in ("udp", "xor:3"):
        r = get(cond, scheme)
        paper = PAPER[(cond, scheme)]
        L.append(f"| {cond} | {'UDP' if scheme == 'udp' else 'FEC, 1 per 3 (`xor:3`)'} | {paper:.2f}% | "
                 f"{pct(r['link_loss'])} | {pct(r['residual'])} | {pct(r['overhead'])} |")
L += ["", "![Figure 5](leigh/fig5.png)", ""]

un, co = get("uncongested", "xor:3"), get("congested", "xor:3")
un_udp, co_udp = float(get("uncongested", "udp")["link_loss"]), float(get("congested", "udp")["link_loss"])
L += ["**Uncongested.** The path's random loss is the paper's; one parity per three leaves "
      f"{pct(un['residual'])} (paper 0.05%). Under independent loss at 1.90% the closed form "
      "p(1 - (1 - p)^3) (a packet is lost and so is one of the other three packets of its group) gives "
      f"{iid_residual(0.019):.3%}, so our figure is the independent-loss figure to within the run's noise; the paper's "
      f"0.05% would need independent loss of {iid_loss_for(0.0005):.2%} in its FEC run, or losses spread more evenly "
      "than independent ones.", "",
      "**Congested.** Here the model and the paper part. Overflow of a shared drop-tail queue loses "
      f"{pct(co_udp)} of plain UDP (the paper: 17.4%, the one figure the background rate was chosen for), and the "
      f"FEC stream, sent at the same wire rate, sees {pct(co['link_loss'])} link loss in bursts of mean "
      f"{float(co['mean_burst']):.2f} packets. One parity per three then leaves {pct(co['residual'])}, against the "
      f"paper's 4.15%. Independent loss at 17.4% would leave {iid_residual(0.174):.2%}; even a parity that is never "
      f"lost cannot bring 17.4% independent loss below {0.174 * (1 - (1 - 0.174) ** 2):.2%} (a packet and one of "
      "its two data neighbours). So the paper's 4.15% is out of reach of any loss process at the UDP run's rate "
      "that is independent or burstier than independent, which is what a congested FIFO gives (its losses "
      f"cluster: mean burst {float(co['mean_burst']):.2f}). It needs either a lighter loss in the FEC run (independent "
      f"loss of {iid_loss_for(0.0415):.1%} gives 4.15%; the two runs were made at different times on a shared "
      "transatlantic path) or losses spread more evenly than independent, as a policer that drops at regular "
      "intervals would make. We report the model's figure and do not tune it to the paper's.", "",
      "## Spreading the parity, and its price", "",
      "The paper: FEC \"cannot recover from the loss of large consecutive blocks of packets. To recover from this "
      "the selection of encoding packets must be more widely distributed across the data stream. This unfortunately "
      "has the effect of increasing latency.\" SMPTE 2022-1's column parity is that spreading: `xor:LxD:col` XORs "
      "packets L apart, so a burst of up to L losses costs each column one packet; `xor:LxD` adds a parity per row "
      "too. Added latency is what a rebuild added: from the arrival of the next later packet that did arrive to the "
      "rebuilt packet's delivery (zero for plain UDP, which never waits).", "",
      "| condition | scheme | parity overhead | link loss | after FEC | rebuilt by rows | by columns | "
      "added latency p50 / p99 / max (ms) | one-way p99 (ms) |",
      "|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    L.append(f"| {r['condition']} | `{r['scheme']}` | {pct(r['overhead'])} | {pct(r['link_loss'])} | "
             f"{pct(r['residual'])} | {r['rebuilt_row']} | {r['rebuilt_column']} | "
             f"{ms(r['added_p50_ms'])} / {ms(r['added_p99_ms'])} / {ms(r['added_max_ms'])} | {ms(r['one_way_p99_ms'])} |")
c33, c123 = get("congested", "xor:3x3:col"), get("congested", "xor:12x3:col")
m44 = get("congested", "xor:4x4")
L += ["", "![latency price](leigh/latency_price.png)", "",
      f"At the same overhead as one parity per three, columns of three (`xor:3x3:col`) leave {pct(c33['residual'])} "
      f"under congestion instead of {pct(co['residual'])}, at a p99 added latency of {ms(c33['added_p99_ms'])} ms "
      f"instead of {ms(co['added_p99_ms'])} ms; columns twelve apart (`xor:12x3:col`) leave {pct(c123['residual'])} "
      f"and add up to {ms(c123['added_max_ms'])} ms: the congested queue's bursts are short (mean "
      f"{float(co['mean_burst']):.2f}), so spreading further buys nothing here and costs latency, as the paper "
      f"predicts. What helps at this loss rate is more parity: the 2-D matrix `xor:4x4` (50% overhead) leaves "
      f"{pct(m44['residual'])}. Which layout is right depends on the loss process and the delay budget, which is the "
      "argument for choosing it from measurements (the strategy selector, later).", ""]
# Figure 4: latency and jitter against packet size.
f4 = list(csv.DictReader(open(f"{src}/fig4.csv")))
sizes = sorted({int(r["size"]) for r in f4})
schemes = list(dict.fromkeys(r["scheme"] for r in f4))


def f4get(scheme, size):
    return next(r for r in f4 if r["scheme"] == scheme and int(r["size"]) == size)


def num(x):
    return float(x) if x not in ("", None, "null") else float("nan")


def between(scheme, col):
    """Sizes at which `scheme` lies between UDP and TCP in `col` (inclusive of UDP)."""
    return [s for s in sizes
            if num(f4get("udp", s)[col]) <= num(f4get(scheme, s)[col]) <= num(f4get("tcp", s)[col])]


def excess(scheme, size):
    return num(f4get(scheme, size)["latency_mean_ms"]) - num(f4get("udp", size)["latency_mean_ms"])


L += ["## Figure 4: latency and jitter against packet size", "",
      "The paper sends 100 packets with TCP, UDP and FEC (one parity per three) between EVL and SARA for several "
      "packet sizes, and finds \"FEC does appear to incur lower latency than TCP but slightly higher latency than "
      "UDP\", that \"the benefits of FEC are greatest at small packet sizes since it takes less time to accumulate "
      "and encode 3 small packets\", and that \"FEC produces lower levels of jitter than TCP but higher levels than "
      "standard UDP\". Jitter is its own definition: the mean absolute deviation of each packet's latency from "
      "the mean of its run of 20 (`groupwire_metrics::channel::Fig4Jitter`), with RFC 3550's interarrival jitter "
      "beside it.", "",
      "The model (the paper gives neither rates nor the round trip here, so these are ours): the path above "
      "(100 Mbit/s, 150 ms round trip, 1.9% independent loss) without cross traffic; the application makes a "
      "packet every size × 8 / `fig4_rate` seconds (2 Mbit/s), so gathering three takes longer for larger "
      "packets; each scheme and size runs `fig4_runs` times (20) on its own seeds, the same seeds for every scheme. "
      "Two FEC senders: groupwire's, which sends each packet at once and its parity after each third (only a "
      "rebuilt packet waits), and the paper's as its explanation implies, which holds each group of three until "
      "its parity is computed. TCP is NewReno with Nagle off, each packet a message whose latency ends when its "
      "last byte is delivered in order.", "",
      "| scheme | size (B) | delivered / sent | latency mean / p99 (ms) | jitter, Figure 4 (ms) | jitter, RFC 3550 (ms) |",
      "|---|---|---|---|---|---|"]
for r in f4:
    L.append(f"| {r['scheme']} | {r['size']} | {r['delivered']} / {r['sent']} | "
             f"{num(r['latency_mean_ms']):.2f} / {num(r['latency_p99_ms']):.2f} | "
             f"{ms(r['jitter_fig4_ms'])} | {ms(r['jitter_rfc3550_ms'])} |")
held, ours = "fec xor:3, sent when encoded", "fec xor:3, sent at once"
lat_held, jit_held = between(held, "latency_mean_ms"), between(held, "jitter_fig4_ms")
lat_ours, jit_ours = between(ours, "latency_mean_ms"), between(ours, "jitter_fig4_ms")
small, big = sizes[0], sizes[-1]
L += ["", "![Figure 4 latency](leigh/fig4_latency.png)", "", "![Figure 4 jitter](leigh/fig4_jitter.png)", "",
      f"**Latency between UDP and TCP.** The paper's FEC sender lies between UDP and TCP in mean latency at "
      f"{len(lat_held)} of {len(sizes)} sizes, and groupwire's at {len(lat_ours)} of {len(sizes)}. "
      f"**Best with small packets.** Over UDP, the held sender's mean latency exceeds UDP's by "
      f"{excess(held, small):.2f} ms at {small} bytes and {excess(held, big):.2f} ms at {big} bytes: the time to gather "
      f"three packets, as the paper explains. Groupwire's sender pays only for the rebuilt packets "
      f"({excess(ours, small):.3f} ms at {small} bytes, {excess(ours, big):.3f} ms at {big} bytes), which is the "
      "paper's stated goal (\"bring FEC performance closer to UDP performance while maintaining maximal "
      "reliability\"). "
      f"**Jitter between UDP and TCP.** By Figure 4's definition the held sender is between them at "
      f"{len(jit_held)} of {len(sizes)} sizes and groupwire's at {len(jit_ours)} of {len(sizes)}. UDP's jitter is zero "
      "here because nothing else shares the modelled path (every packet that arrives sees the same delay); the "
      "paper's UDP had the real path's queueing. TCP's latency and jitter come from retransmissions: a lost "
      "segment holds every later packet for a round trip or, at the tail, a retransmission timeout.", ""]
open(out, "w").write("\n".join(L))
print("wrote", out)
