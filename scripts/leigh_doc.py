#!/usr/bin/env python3
"""Writes docs/results/leigh.md from a `groupwire sim run leigh` output
directory: Figure 5 beside the paper, the latency price of spreading, what
loss process the paper's numbers imply, Figure 4 (latency and jitter
against packet size) and Figure 3 (DiffServ).

    python3 scripts/leigh_doc.py DIR OUT.md "COMMAND"

Every number on the page comes from DIR's CSVs or from the closed forms
below (independent losses), computed here.
"""
import csv
import os
import re
import sys
import tomllib

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
     "asks for, and the latency they cost; Figure 4; and the DiffServ experiment of §3 (Figure 3). "
     "Produced by `scripts/results.sh leigh`, which runs:", "",
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


# Figure 3: DiffServ (§3).
def bitrate(text):
    """bit/s from the scenario's text form ("28Mbit/s")."""
    m = re.fullmatch(r"([0-9.]+)\s*([kMG]?)bit/s", text.strip())
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def duration_s(text):
    m = re.fullmatch(r"([0-9.]+)\s*(ns|us|µs|ms|s)", text.strip())
    return float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def limit_text(text):
    """(packets, bytes) of a class limit ("60p", "512KiB", "unlimited")."""
    t = str(text).strip()
    if t.endswith("p"):
        return int(t[:-1]), None
    m = re.fullmatch(r"([0-9.]+)\s*(B|KiB|MiB|KB|MB)", t)
    if m:
        return None, float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1 << 20, "KB": 1e3, "MB": 1e6}[m.group(2)]
    return None, None


def classes(qdisc):
    return {c["name"]: c for c in qdisc.get("classes", [])}


def limit_words(text):
    """A class limit in words ("60p" -> "60 packets")."""
    packets, _ = limit_text(text)
    return f"{packets} packets" if packets is not None else str(text)


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


if os.path.exists(f"{src}/fig3.csv"):
    f3 = list(csv.DictReader(open(f"{src}/fig3.csv")))
    f3q = list(csv.DictReader(open(f"{src}/fig3_queues.csv")))
    cfg3 = tomllib.loads(cfg)["fig3"]
    variants = list(dict.fromkeys(r["variant"] for r in f3))

    def f3get(variant, phase, col):
        return float(next(r for r in f3 if r["variant"] == variant and r["phase"] == phase)[col])

    def qget(variant, router, cls, col):
        return int(next(r for r in f3q if r["variant"] == variant and r["router"] == router
                        and r["class"] == cls)[col])

    rate = bitrate(cfg3["rate"])
    size = cfg3["size"]
    wire = size + 28
    inter, interior, lan = (bitrate(cfg3["inter_domain_rate"]), bitrate(cfg3["interior_rate"]),
                            bitrate(cfg3["lan_rate"]))
    pkt_interior = wire * 8 / interior * 1e3  # ms
    pkt_inter = wire * 8 / inter * 1e3
    anl_be = limit_text(classes(cfg3["anl"])["best-effort"]["limit"])
    aruba_be = limit_text(classes(cfg3["interior"])["best-effort"]["limit"])
    aruba_drain = aruba_be[1] * 8 / interior * 1e3 if aruba_be[1] else aruba_be[0] * pkt_interior
    anl_drain = anl_be[0] * pkt_inter if anl_be[0] else anl_be[1] * 8 / inter * 1e3
    ring = cfg3["deep_tx_ring"]
    evl = cfg3["evl"]
    evl_w = {n: c.get("weight", 1) for n, c in classes(evl).items()}
    command3 = f"groupwire sim run leigh --seed 1 --set 'parts=[\"fig3\"]' --out DIR"
    phase_name = {"before": "before congestion", "congested": "competing traffic",
                  "diffserv": "foreground marked EF"}
    paper_thr = {"before": "25 Mbit/s (\"the networks saturation point\")",
                 "congested": "dips (\"the throughput of the foreground stream suffers\")",
                 "diffserv": "\"brought back to near its original levels\""}
    paper_lat = {"before": "not given in the text",
                 "congested": "rises",
                 "diffserv": "\"only partially restored\", \"approximately 150ms\" one way"}
    P = "ignores-ef"
    L += ["## Figure 3: DiffServ (§3)", "",
          "The paper sends \"a steady foreground stream of UDP data at the networks saturation point (25Mbps) "
          "from ANL (Tundra) to EVL (Laurel)\", then 25 Mbit/s of competing traffic from Fiuk to Laurel \"to "
          "increase congestion over the inter-domain link between EVL and ANL\", then marks the foreground "
          "Expedited Forwarding. ANL's Cisco 7507 routers do priority queueing, EVL's router weighted fair "
          "queueing. The finding: throughput \"brought back to near its original levels\", latency \"only "
          "partially restored\", to \"approximately 150ms\" one way, which the paper puts down to \"queueing "
          "that is occurring at the interior router (Aruba)\" and to priority queueing not being pre-emptive "
          "on the 7507. To run Figure 3 alone:", "",
          "```sh", command3, "```", "",
          "### The model and what we assumed", "",
          "Figure 2 (the testbed, \"numbers on the links represent bandwidth levels\") is not in the text, so the "
          "path is our reading of it; the queueing disciplines are `groupwire_link::qdisc` on the simulator's "
          "links, usable by any scenario:", "",
          "```text",
          "Tundra ─┐ LAN              inter-domain            interior              LAN",
          "        ├──► ANL router ════════════════► Aruba ═══════════════► EVL router ──► Laurel",
          "Fiuk ───┘    priority (EF first)          marks ignored          WFQ",
          "```", "",
          f"- **Traffic.** The foreground is {cfg3['rate']} of {size}-byte datagrams (iperf's default UDP payload; "
          f"{rate * wire / size / 1e6:.2f} Mbit/s on the wire), constant rate. The competing {cfg3['competing']} is "
          "Poisson, so the two streams do not phase-lock at the queues as two constant-rate streams do in a "
          f"simulator. Competing traffic starts at {cfg3['congestion_at']}, EF at {cfg3['diffserv_at']}, the run "
          f"ends at {cfg3['duration']} (the paper says only \"after some time\"). Both senders are at ANL: the "
          "competing traffic crosses the inter-domain link, as the paper says.",
          f"- **ANL router**: strict priority, non-preemptive, EF first. Its queue limits are Cisco IOS priority "
          f"queueing's defaults: {limit_words(classes(cfg3['anl'])['ef']['limit'])} in the high queue, "
          f"{limit_words(classes(cfg3['anl'])['best-effort']['limit'])} in the normal queue where unmarked traffic goes. Its "
          f"link to Aruba (the inter-domain link) runs at {cfg3['inter_domain_rate']}.",
          f"- **Aruba**, the interior router, ignores the mark: every packet joins one FIFO class of "
          f"{limit_words(classes(cfg3['interior'])['best-effort']['limit'])}. A FIFO only queues where its output is slower "
          f"than its input, and the paper's explanation needs a queue at Aruba, so its link towards EVL "
          f"({cfg3['interior_rate']}, the path's saturation point: the foreground fills "
          f"{rate * wire / size / interior:.0%} of it) is taken to be slower than the inter-domain link into it. "
          f"Both rates are assumptions. The buffer is **the one value taken from the paper's result**: a round "
          f"size that drains in {aruba_drain:.0f} ms at {cfg3['interior_rate']}, of the order of the paper's 150 ms. "
          "The paper gives no buffer sizes.",
          f"- **EVL router**: WFQ (self-clocked fair queueing) with Cisco's weighting by IP precedence, EF "
          f"{evl_w['ef']} shares to best effort's {evl_w['best-effort']}, {limit_words(classes(evl)['ef']['limit'])} per class "
          f"(WFQ's congestive discard threshold), on a {cfg3['lan_rate']} LAN to Laurel.",
          f"- **Delays**: {cfg3['inter_domain_delay']} and {cfg3['interior_delay']} on the two wide-area hops (ANL and "
          f"EVL are \"approximately 30 minutes away by car\"), {cfg3['lan_delay']} on each LAN.",
          "- **Variants.** `ignores-ef` is the paper's testbed. `honours-ef` lets Aruba honour the mark (its EF "
          f"class, {limit_words(classes(cfg3['interior'])['ef']['limit'])}): the paper's explanation predicts the latency comes "
          f"back. `deep-ring` also honours it, and gives both priority routers a {ring}-packet transmit ring below "
          "the scheduler (an assumed size: Cisco interfaces hand packets to such a ring, and the scheduler only "
          "chooses when it has room), the non-preemption the paper blames.",
          "- **Measures**, at Laurel, by arrival time: the foreground's payload throughput and mean one-way latency "
          f"per {cfg3['interval']} (the paper's two graphs), and per phase the means over the **second half** of the "
          "phase, once the queues have settled.", "",
          "### The paper beside the model", "",
          "| phase | paper, throughput | ours (Aruba ignores EF) | paper, one-way latency | ours (Aruba ignores EF) "
          "| ours, Aruba honours EF | ours, deep rings |",
          "|---|---|---|---|---|---|---|"]
    for ph in ("before", "congested", "diffserv"):
        cells = [f"{f3get(P, ph, 'throughput_mbps'):.2f} Mbit/s (loss {100 * f3get(P, ph, 'loss'):.1f}%)",
                 f"{f3get(P, ph, 'latency_mean_ms'):.1f} ms (p99 {f3get(P, ph, 'latency_p99_ms'):.1f})"]
        for v in ("honours-ef", "deep-ring"):
            if v in variants:
                cells.append(f"{f3get(v, ph, 'throughput_mbps'):.2f} Mbit/s, {f3get(v, ph, 'latency_mean_ms'):.1f} ms")
            else:
                cells.append("-")
        L.append(f"| {phase_name[ph]} | {paper_thr[ph]} | {cells[0]} | {paper_lat[ph]} | {cells[1]} | "
                 f"{cells[2]} | {cells[3]} |")
    L += ["", "![Figure 3, throughput](leigh/fig3_throughput.png)", "",
          "![Figure 3, latency](leigh/fig3_latency.png)", "",
          "Where the packets waited, over the whole run (`fig3_queues.csv`):", "",
          "| variant | router | class | queued | dropped | largest queue (packets) | largest queue (ms at the link's rate) |",
          "|---|---|---|---|---|---|---|"]
    router_rate = {"anl": inter, "aruba": interior, "evl": lan}
    for r in f3q:
        L.append(f"| {r['variant']} | {r['router']} | {r['class']} | {r['enqueued']} | {r['dropped']} | "
                 f"{r['max_packets']} | {int(r['max_bytes']) * 8 / router_rate[r['router']] * 1e3:.1f} |")
    before, cong, diff = (f3get(P, "before", "latency_mean_ms"), f3get(P, "congested", "latency_mean_ms"),
                          f3get(P, "diffserv", "latency_mean_ms"))
    thr0, thr1, thr2 = (f3get(P, "before", "throughput_mbps"), f3get(P, "congested", "throughput_mbps"),
                        f3get(P, "diffserv", "throughput_mbps"))
    share = interior / inter
    L += ["",
          f"**Bandwidth: restored, near its original level (paper and model agree).** Competing traffic cuts the "
          f"foreground from {thr0:.2f} to {thr1:.2f} Mbit/s: two streams share ANL's normal queue and Aruba's FIFO "
          f"in proportion to what they offer. Marked EF, the foreground leaves ANL first and gets "
          f"{thr2:.2f} Mbit/s, {thr2 / thr0:.0%} of where it started. Not all of it: ANL still sends best-effort "
          f"traffic into every gap, so the inter-domain link arrives at Aruba full ({cfg3['inter_domain_rate']}), "
          f"and Aruba's FIFO, which cannot tell EF apart, passes each stream in proportion to its share of that, "
          f"{cfg3['interior_rate']} of {cfg3['inter_domain_rate']} ({share:.0%}; the foreground loses "
          f"{100 * f3get(P, 'diffserv', 'loss'):.1f}% at Aruba). The paper's \"near\" fits a loss of this kind; how "
          "near depends on the two rates, which the text does not give.", "",
          f"**Latency: partly restored (paper and model agree), to about Aruba's buffer.** The one-way latency goes "
          f"from {before:.1f} ms to {cong:.1f} ms under congestion and back only to {diff:.1f} ms with EF. What EF "
          f"removed is ANL's queue: its normal queue of {anl_be[0]} packets drains in {anl_drain:.1f} ms at "
          f"{cfg3['inter_domain_rate']}, and the drop from congested to EF is {cong - diff:.1f} ms. What stays is "
          f"Aruba's full FIFO, {aruba_drain:.0f} ms at {cfg3['interior_rate']}. The paper's level (about 150 ms) is the "
          "one thing the buffer size was chosen for, so the level is an input here, not a prediction; the shape "
          "(bandwidth back, latency not, the remaining delay at the interior router) is the model's. How much of "
          "the congested latency came back in the paper is not in the text (the graph is not); in the model it is "
          f"{(cong - diff) / (cong - before):.0%}, because ANL's queue is small beside Aruba's.", "",
          ]
    if "honours-ef" in variants:
        hd = f3get("honours-ef", "diffserv", "latency_mean_ms")
        L += [f"**Aruba honouring EF restores the latency (the paper's explanation, tested).** With Aruba's EF class in "
              f"use, the marked foreground passes a full best-effort queue at both routers: {hd:.1f} ms one way "
              f"against {f3get('honours-ef', 'before', 'latency_mean_ms'):.1f} ms before congestion (one best-effort "
              f"packet in service ahead of it at each router costs at most {pkt_inter:.2f} + {pkt_interior:.2f} ms), "
              f"at {f3get('honours-ef', 'diffserv', 'throughput_mbps'):.2f} Mbit/s. So in this model a DiffServ "
              "path keeps latency low under heavy congestion when every congested router on it honours the "
              "mark; one interior router that does not is enough to lose it.", ""]
    if "deep-ring" in variants:
        dd = f3get("deep-ring", "diffserv", "latency_mean_ms")
        hd = f3get("honours-ef", "diffserv", "latency_mean_ms") if "honours-ef" in variants else before
        L += [f"**Non-preemption costs a ring of packets, not a queue.** The paper says a priority packet \"must wait "
              "for all the packets in the non-priority queue to be forwarded\". Non-preemptive priority "
              "queueing makes it wait for the one packet being serialized, "
              f"{pkt_inter:.2f} ms at ANL's rate, unless the interface has a transmit ring below the scheduler: "
              f"then for the whole ring. With a {ring}-packet ring at both priority routers the EF latency is "
              f"{dd:.1f} ms, {dd - hd:.1f} ms above the shallow-ring run; {ring} packets take "
              f"{ring * pkt_inter:.1f} + {ring * pkt_interior:.1f} = {ring * (pkt_inter + pkt_interior):.1f} ms at the "
              f"two routers' rates. Non-preemption alone would need a ring of about {150 / pkt_interior:.0f} packets "
              "to reach the paper's 150 ms at Aruba's rate. We have no figure for the 7507's ring, but one that deep "
              "would be a FIFO queue in all but name, so the queue at an interior router that ignores the mark is "
              "the likelier cause, as the paper itself believes. (Before the marking, the rings only add their "
              f"packets to the queues: {f3get('deep-ring', 'congested', 'latency_mean_ms'):.1f} ms under congestion "
              f"against {cong:.1f} ms.)", ""]
    evl_max = max(qget(v, "evl", c, "max_packets") for v in variants for c in classes(evl))
    L += [f"**EVL's WFQ never mattered here.** Its link to Laurel ({cfg3['lan_rate']}) is faster than anything "
          f"reaching it (its largest queue held {plural(evl_max, 'packet')}), so the weights never had to choose. The paper does not "
          "say whether EVL's router was congested; if its link had been the narrowest, WFQ's weighting "
          f"would have given EF {evl_w['ef'] / (evl_w['ef'] + evl_w['best-effort']):.0%} of it while both "
          "classes were backlogged. The WFQ and DRR shares are checked in `groupwire-link`'s tests instead.", "",
          f"**The competing traffic pays.** Under EF its throughput falls to "
          f"{f3get(P, 'diffserv', 'competing_mbps'):.2f} Mbit/s (from {f3get(P, 'congested', 'competing_mbps'):.2f} "
          "congested): priority queueing at ANL gives best effort only what the foreground leaves. The paper "
          "reports only the foreground.", ""]
open(out, "w").write("\n".join(L))
print("wrote", out)
