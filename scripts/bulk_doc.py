#!/usr/bin/env python3
"""Writes docs/results/bulk.md from a `groupwire sim run bulk` output
directory: Leigh et al.'s Figure 6 (Reliable Blast UDP) beside the paper,
the adaptive rate beside the fixed one, and TCP on the same path.

    python3 scripts/bulk_doc.py DIR OUT.md "COMMAND"

Every number on the page comes from DIR's CSVs and scenario.toml, or is
computed here from them.
"""
import csv
import re
import sys
import tomllib

src, out, command = sys.argv[1:]
rows = list(csv.DictReader(open(f"{src}/fig6.csv")))
runs = list(csv.DictReader(open(f"{src}/fig6_runs.csv")))
cfg = tomllib.loads(open(f"{src}/scenario.toml").read())


def num(x):
    return float(x) if x not in ("", None, "null") else float("nan")


def bitrate(text):
    """bit/s from the scenario's text form ("100Mbit/s")."""
    m = re.fullmatch(r"([0-9.]+)\s*([kMG]?)bit/s", str(text).strip())
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def size_bytes(text):
    m = re.fullmatch(r"([0-9.]+)\s*(B|KiB|MiB|GiB|KB|MB|GB)?", str(text).strip())
    return float(m.group(1)) * {None: 1, "B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30,
                                "KB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]


def duration_s(text):
    m = re.fullmatch(r"([0-9.]+)\s*(ns|us|µs|ms|s)", str(text).strip())
    return float(m.group(1)) * {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]


def get(scheme, rate=None):
    for r in rows:
        if r["scheme"] == scheme and (rate is None or num(r["rate_mbps"]) == rate):
            return r
    return None


def rng(lo, hi, fmt="{:.1f}"):
    lo, hi = num(lo), num(hi)
    if lo != lo:
        return "-"
    return fmt.format(lo) if abs(hi - lo) < 0.05 else f"{fmt.format(lo)}-{fmt.format(hi)}"


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def naks(r):
    lo, hi = int(num(r["nak_rounds_min"])), int(num(r["nak_rounds_max"]))
    return str(lo) if lo == hi else f"{lo}-{hi}"


link = bitrate(cfg["link_rate"])
rtt = duration_s(cfg["rtt"])
competing = bitrate(cfg["competing"])
size = size_bytes(cfg["size"])
ps = int(cfg["packet_size"])
wire = ps + 24 + 28
nruns = int(cfg["runs"])
queue = int(cfg["queue"])
available = link - competing
rates = [num(r["rate_mbps"]) for r in rows if r["scheme"] == "rbudp fixed"]

L = ["# bulk", "",
     "Leigh et al.'s Reliable Blast UDP (§4.2) in the simulator: Figure 6, a 50 MB file blasted at 20 to 90 "
     "Mbit/s over a 100 Mbit/s transatlantic path, with groupwire's adaptive rate beside the paper's fixed one "
     "and the simulator's TCP on the same path. Produced by `scripts/results.sh bulk`, which runs:", "",
     "```sh", command, "```", "",
     "and `scripts/bulk_doc.py` for this page. The sender and receiver are `groupwire_proto::rbudp::RbudpSender` "
     "and `RbudpReceiver`, the sans-IO machines a socket driver runs; their control messages cross the simulated "
     "path on a TCP connection of the simulator's TCP model (`groupwire_sim::stream_node`), as the paper's "
     "implementation sends them over TCP.", "",
     "## The setting, and what we assumed", "",
     f"- **Path**: a {link / 1e6:.0f} Mbit/s drop-tail bottleneck ({queue} packets of queue) between fast access "
     f"links, {rtt * 1e3:.0f} ms round trip: the paper's \"average round trip time of 150ms\" between Chicago and "
     "Amsterdam (§4.2), and the path the `leigh` scenario uses for Figure 5. No random loss of its own: the "
     f"paper's 20 and 40 Mbit/s blasts needed no NAK, so the path lost none of their {size / ps:,.0f} packets.",
     f"- **Competing traffic**: the paper ran \"without the benefit of QoS\" and says \"interference from competing "
     f"traffic streams was possible and likely\", without a figure. We take Poisson UDP at "
     f"{competing / 1e6:.0f} Mbit/s ({cfg['competing_size']}-byte datagrams), the background the `leigh` "
     "scenario uses on the same path for Figure 5 (chosen there for Figure 5's loss, not tuned here), which "
     f"leaves {available / 1e6:.0f} Mbit/s on average. So Figure 6 here is a prediction of that model, not a fit.",
     f"- **Rates count the payload.** The paper's 20 Mbit/s blast gave 19.7 Mbit/s effective, {19.7 / 20:.1%} "
     f"of it; a rate counted on the wire would leave at most {ps}/{wire} = {ps / wire:.1%} for the payload at our "
     f"{ps}-byte packets before any round trip, so the paper's application paced its payload. A 90 Mbit/s blast is "
     f"then {90 * wire / ps:.1f} Mbit/s on the wire (IP, UDP and our 24-byte header).",
     f"- **Effective bandwidth** is the payload ({size / 1e6:.0f} MB) over the time from the sender's Start to its "
     "receipt of the Done: the handshake (one round trip), every blast, and one end-of-blast exchange per round.",
     f"- **Runs**: {nruns} per cell, each on its own draw of the competing traffic (the paper gives ranges); the "
     "fixed rate, the adaptive rate and TCP meet the same draws.", "",
     "## Figure 6", "",
     "| sending rate (Mbit/s) | paper: effective (Mbit/s) | paper: NAKs | groupwire, fixed: effective min-max (mean) "
     "| NAK rounds | first blast lost | groupwire, adaptive: effective (mean) | NAK rounds |",
     "|---|---|---|---|---|---|---|---|"]
for r in rows:
    if r["scheme"] != "rbudp fixed":
        continue
    rate = num(r["rate_mbps"])
    a = get("rbudp adaptive", rate)
    paper = rng(r["paper_effective_low_mbps"], r["paper_effective_high_mbps"])
    pn = r["paper_nak_rounds"] or "-"
    L.append(f"| {rate:.0f} | {paper} | {pn} | {rng(r['effective_min_mbps'], r['effective_max_mbps'])} "
             f"({num(r['effective_mean_mbps']):.1f}) | {naks(r)} | {100 * num(r['first_blast_loss']):.1f}% | "
             + (f"{rng(a['effective_min_mbps'], a['effective_max_mbps'])} ({num(a['effective_mean_mbps']):.1f}) | "
                f"{naks(a)} |" if a else "- | - |"))
L += ["", "![Figure 6](bulk/fig6_effective.png)", "", "![NAK rounds](bulk/fig6_naks.png)", "",
      "Per-run numbers are in `bulk/fig6_runs.csv`, the table above in `bulk/fig6.csv`.", ""]


def fixed(rate, col):
    r = get("rbudp fixed", rate)
    return num(r[col]) if r else float("nan")


def adapt(rate, col):
    r = get("rbudp adaptive", rate)
    return num(r[col]) if r else float("nan")


# Below the available rate: the overhead is round trips.
L += ["## Where the model and the paper agree, and where they part", ""]
for rate, paper in ((20, 19.7), (40, 38.5)):
    if rate not in rates:
        continue
    eff = fixed(rate, "effective_mean_mbps")
    blast = size * 8 / (rate * 1e6)
    over = size * 8 / (eff * 1e6) - blast
    paper_over = size * 8 / (paper * 1e6) - blast
    L.append(f"**{rate} Mbit/s.** {eff:.1f} Mbit/s against the paper's {paper}, with "
             f"{naks(get('rbudp fixed', rate))} NAK rounds as in the paper. The blast itself takes {blast:.2f} s; "
             f"the rest, {over * 1e3:.0f} ms here and {paper_over * 1e3:.0f} ms in the paper, is the handshake, "
             f"the last packet's way across and the receiver's answer: about {over / rtt:.1f} round trips of "
             f"{rtt * 1e3:.0f} ms, plus the receiver's 5 ms settling time and the queue the competing traffic "
             "keeps at the bottleneck." + (" The paper's larger share suggests a longer round trip on that day "
                                            "or a slower start of its blast." if paper_over > 1.3 * over else ""))
    L.append("")
for rate, (plo, phi, pn) in ((60, (54, 57, 1)), (80, (56, 70, 2)), (90, (61, 77, 3))):
    if rate not in rates:
        continue
    r = get("rbudp fixed", rate)
    eff = num(r["effective_mean_mbps"])
    lo, hi = num(r["effective_min_mbps"]), num(r["effective_max_mbps"])
    loss = num(r["first_blast_loss"])
    n_lo, n_hi = int(num(r["nak_rounds_min"])), int(num(r["nak_rounds_max"]))
    wire_rate = rate * wire / ps
    over = wire_rate + competing / 1e6 - link / 1e6
    text = (f"**{rate} Mbit/s.** {rng(lo, hi)} Mbit/s (mean {eff:.1f}) with {naks(r)} NAK rounds, against the "
            f"paper's {plo}-{phi} with {pn}. On the wire the blast is {wire_rate:.1f} Mbit/s; with "
            f"{competing / 1e6:.0f} Mbit/s of competing traffic the bottleneck is offered "
            f"{wire_rate + competing / 1e6:.1f} Mbit/s")
    if over <= 0:
        text += (f", {-over:.1f} Mbit/s less than it carries, so only the competing traffic's Poisson bursts can "
                 f"fill its {queue}-packet queue: the first blast lost {100 * loss:.2f}% of its packets.")
    else:
        text += (f", {over:.1f} Mbit/s more than it carries: once the {queue}-packet queue is full "
                 f"({queue * wire * 8 / link * 1e3:.0f} ms of it), the excess is dropped, and the first blast lost "
                 f"{100 * loss:.1f}% of its packets.")
    if n_hi < pn and loss == 0:
        text += (f" So no NAK round, where the paper needed {plural(pn, 'round')}: its blast at 60 Mbit/s "
                 f"lost packets, so its competing traffic must at times have been heavier than the "
                 f"{link / 1e6 - wire_rate:.0f} Mbit/s the blast left, or burstier than Poisson.")
    elif n_hi < pn:
        text += (f" Fewer NAK rounds than the paper: the retransmission round here is short "
                 f"({100 * loss:.1f}% of the file), so it fits in the queue and loses almost nothing. The "
                 f"paper's {plural(pn, 'round')} mean its re-blasts kept losing, as competing traffic that was "
                 f"heavier or burstier at times than a steady {competing / 1e6:.0f} Mbit/s would make them.")
    elif n_lo > pn:
        text += (" More NAK rounds than the paper: the model's competing traffic keeps the queue fuller than the "
                 "paper's did, so re-blasts keep losing.")
    else:
        text += " The NAK rounds match."
    if eff > phi:
        text += (f" The effective bandwidth lies above the paper's range: the model's path has "
                 f"{available / 1e6:.0f} Mbit/s to give on average and no other cost; the paper's spread "
                 f"({plo}-{phi}) shows its competing traffic varied from run to run more than a Poisson "
                 "stream of fixed mean does.")
    elif eff < plo:
        text += " The effective bandwidth lies below the paper's range."
    else:
        text += " The effective bandwidth lies within the paper's range."
    L += [text, ""]

# The end-of-blast message on TCP through a full queue.
slow = [x for x in runs if x["scheme"] == "rbudp fixed" and int(num(x["control_timeouts"] or 0)) > 0]
hit = [x for x in runs if x["scheme"] == "rbudp fixed" and num(x["first_blast_loss"]) > 0]
if slow and hit:
    fast = [x for x in hit if int(num(x["control_timeouts"] or 0)) == 0]
    mean = lambda v: sum(v) / len(v)
    L += [f"**Why the lossy rates spread.** In {len(slow)} of the {len(hit)} fixed-rate runs whose blast lost "
          "packets, the control connection had a retransmission timeout: the end-of-blast message leaves right "
          "behind the blast's last packet, reaches the bottleneck while its queue is still full and is dropped "
          "with the blast's tail, and TCP resends it only when its timer fires (about one second: the connection "
          "has carried a single message, the Start, so its round-trip estimate is young and its timer long). "
          f"Those runs took {mean([num(x['elapsed_s']) for x in slow]):.2f} s on average, the others "
          + (f"{mean([num(x['elapsed_s']) for x in fast]):.2f} s" if fast else "-") +
          ". The paper's own end-of-blast went over TCP on the same congested path, so its ranges may hold the "
          "same effect; a sender that repeats the end-of-blast over UDP, or waits for the queue to drain before "
          "sending it, would avoid it.", ""]

# Adaptive.
if any(r["scheme"] == "rbudp adaptive" for r in rows):
    lossy = [rate for rate in rates if fixed(rate, "first_blast_loss") >= 0.01]
    L += ["## The adaptive rate", "",
          "The paper leaves the rate to the user (\"just below the available bandwidth\"). groupwire's adaptive "
          "sender blasts first at the rate given; the receiver measures the rate at which that blast arrived "
          "(its bytes over the time from the first arrival to the last) and returns it with the missing list; "
          "after a blast that lost 1% or more, the next blasts go at 95% of it. A blast that overran the "
          "bottleneck arrives at what the bottleneck let through, so that is the path's rate while it was busy."]
    if lossy:
        parts = []
        for rate in lossy:
            nr = [num(x["next_rate_mbps"]) for x in runs
                  if x["scheme"] == "rbudp adaptive" and num(x["rate_mbps"]) == rate]
            nr = [x for x in nr if x == x]
            parts.append(f"from {rate:.0f} Mbit/s it chose {rng(min(nr) * ps / wire, max(nr) * ps / wire, '{:.0f}')} "
                         f"Mbit/s of payload for the re-blasts, {fixed(rate, 'nak_rounds_mean'):.1f} NAK rounds "
                         f"on average became {adapt(rate, 'nak_rounds_mean'):.1f}, and the effective bandwidth "
                         f"went from {fixed(rate, 'effective_mean_mbps'):.1f} to "
                         f"{adapt(rate, 'effective_mean_mbps'):.1f} Mbit/s" if nr else f"at {rate:.0f} Mbit/s no "
                         "estimate was made")
        L += ["", "Where the first blast lost 1% or more, " + "; ".join(parts) + ".", "",
              ("Here the adaptive rate gained nothing in time: the fixed rate's single re-blast was short enough to "
               "fit in the bottleneck's queue, so sending it slower only made it take longer. " if all(
                  adapt(r, "effective_mean_mbps") <= fixed(r, "effective_mean_mbps") for r in lossy) else "") +
              "The gain in time is small by construction: the first blast, sent at the user's rate, carries the "
              "whole file, and what the bottleneck drops of it must be sent again at any rate. The adaptive rate "
              "saves round trips and the load that the fixed rate's re-blasts put on the other traffic, not the "
              "first blast's loss. To save that too, the rate would have to be measured before the file is "
              "blasted (a short probe blast first), which is a step beyond the paper's scheme."]
    else:
        L += ["", "No first blast lost 1% or more in this setting, so the adaptive rate kept every rate as given "
              "and its rows equal the fixed ones."]
    L.append("")

# TCP.
d, t = get("tcp default window"), get("tcp bdp window")
if d and t:
    dw, tw = int(num(d["window_bytes"])), int(num(t["window_bytes"]))
    de, te = num(d["effective_mean_mbps"]), num(t["effective_mean_mbps"])
    limit = dw * 8 / rtt / 1e6
    best = max(fixed(r, "effective_mean_mbps") for r in rates) if rates else float("nan")
    L += ["## TCP on the same path", "",
          "The paper: \"on an over-provisioned network, effective throughput is almost as high as the sending "
          "bandwidth. This is in contrast to TCP, which typically incurs a 20% bandwidth loss by requiring "
          "frequent acknowledgements\", and as the link fills RBUDP's \"performance is no poorer than what is "
          "expected of optimally tuned TCP\". The simulator's TCP (NewReno with SACK, 1460-byte segments) moves "
          "the same 50 MB across the same path and competing traffic, timed from one round trip before its "
          "first segment (the handshake the model does not simulate):", "",
          "| TCP | window | effective bandwidth min-max (mean), Mbit/s | of the bandwidth the competing traffic leaves |",
          "|---|---|---|---|",
          f"| default window | {dw / 1024:.0f} KiB | {rng(d['effective_min_mbps'], d['effective_max_mbps'])} "
          f"({de:.1f}) | {de * 1e6 / available:.0%} |",
          f"| tuned to the bandwidth-delay product | {tw / 1e6:.3f} MB | "
          f"{rng(t['effective_min_mbps'], t['effective_max_mbps'])} ({te:.1f}) | {te * 1e6 / available:.0%} |", "",
          f"**The default window** is the LFN problem the paper describes: at most one {dw / 1024:.0f} KiB window per "
          f"{rtt * 1e3:.0f} ms round trip, {limit:.1f} Mbit/s, whatever the link; it reaches {de:.1f}. "
          f"**The tuned window** reaches {te:.1f} Mbit/s, {1 - te * 1e6 / available:.0%} below the "
          f"{available / 1e6:.0f} Mbit/s the competing traffic leaves"
          + (f" (the paper's \"20% bandwidth loss\" is of this order)" if 0.1 <= 1 - te * 1e6 / available <= 0.3
             else "") +
          ": a loss in the shared drop-tail queue halves its window, and on a 150 ms path it takes many round "
          f"trips to grow back. RBUDP's best mean here, {best:.1f} Mbit/s, is "
          + ("above" if best > te else "below") + " tuned TCP's, and every RBUDP rate beats the default window "
          "by far, which is the paper's point: RBUDP needs no window tuning, only a rate.", ""]

open(out, "w").write("\n".join(L))
print("wrote", out)
