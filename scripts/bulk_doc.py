#!/usr/bin/env python3
"""Writes docs/results/bulk.md from a `groupwire sim run bulk` output
directory: Leigh et al.'s Figure 6 (Reliable Blast UDP) beside the paper,
the adaptive rate beside the fixed one, and TCP on the same path; and the
LFN part (the paper's 45 Mbit/s x 150 ms example: single TCP, striped TCP
and RBUDP by random loss).

    python3 scripts/bulk_doc.py DIR OUT.md "COMMAND"

Every number on the page comes from DIR's CSVs and scenario.toml, or is
computed here from them.
"""
import csv
import math
import os
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
     "and the simulator's TCP on the same path; and [the paper's 45 Mbit/s x 150 ms example](#lfn-the-papers-45-mbits-x-150-ms-example) "
     "of the long fat network problem, with single TCP, striped TCP and RBUDP at three random loss rates. Produced by `scripts/results.sh bulk`, which runs:", "",
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

# LFN: the paper's own example, single TCP against striping and RBUDP.
if os.path.exists(f"{src}/lfn.csv"):
    lrows = list(csv.DictReader(open(f"{src}/lfn.csv")))
    lruns = list(csv.DictReader(open(f"{src}/lfn_runs.csv")))
    lrate = bitrate(cfg["lfn_rate"])
    lrtt = duration_s(cfg["lfn_rtt"])
    lsize = size_bytes(cfg["lfn_size"])
    bdp = lrate * lrtt / 8
    lqueue = size_bytes(cfg["lfn_queue"]) if "lfn_queue" in cfg else bdp
    share = float(cfg["lfn_rbudp_share"])
    min_rto = duration_s(cfg["lfn_tcp_min_rto"])
    dwin = size_bytes(cfg["tcp_default_window"])
    losses = []
    for r in lrows:
        if num(r["loss"]) not in losses:
            losses.append(num(r["loss"]))

    def lget(loss, mech):
        for r in lrows:
            if num(r["loss"]) == loss and r["mechanism"] == mech:
                return r
        return None

    def lossname(p):
        return "none" if p == 0 else f"{100 * p:g}%"

    def eff(r):
        if r is None or int(r["completed"]) == 0:
            return "unfinished"
        lo, hi, m = num(r["effective_min_mbps"]), num(r["effective_max_mbps"]), num(r["effective_mean_mbps"])
        text = f"{m:.2f}" if int(r["runs"]) == 1 else f"{m:.2f} ({lo:.2f}-{hi:.2f})"
        if int(r["completed"]) < int(r["runs"]):
            text += f", {r['completed']} of {r['runs']} finished"
        return text

    single = f"tcp, {dwin / 1024:.0f}KiB window"
    mechs = [r["mechanism"] for r in lrows if num(r["loss"]) == losses[0]]
    stripes = [m for m in mechs if m.startswith("striped")]
    maxstripe = stripes[-1] if stripes else None
    lossy = [p for p in losses if p > 0]
    L += ["## LFN: the paper's 45 Mbit/s x 150 ms example", "",
          "The paper (§4.2) states the long fat network problem with a number: \"for a 45Mbps link between Chicago "
          "and Amsterdam, with an average round trip time of 150ms, the capacity is 45*0.15/8 = 0.84Mbytes\"; "
          "default TCP \"will spend an inordinate amount of time waiting for acknowledges\" and so suffers \"gross "
          "bandwidth *under*-utilization\"; tuning the window to that capacity is the traditional remedy, but "
          "needs a kernel rebuild on some systems and a knowledge of the current capacity; \"Parallel TCP Socket "
          "striping\" and \"Reliable Blast UDP\" are the paper's answers. It gives no measurement of this example, "
          "so the table below is the simulator's answer to it, not a comparison with one. The same run as above "
          "produces it (part `lfn`); alone:", "",
          "```sh", "groupwire sim run bulk --seed 1 --set 'parts=[\"lfn\"]'", "```", "",
          f"- **Path**: {lrate / 1e6:g} Mbit/s, {lrtt * 1e3:g} ms round trip, nothing else on it. Its capacity "
          f"(bandwidth-delay product) is {bdp:,.0f} bytes, the paper's 0.84 MB. The drop-tail queue holds "
          f"{lqueue:,.0f} bytes" + (", one bandwidth-delay product, the classic sizing for one loss-based TCP "
                                     "flow: the tuned flow's slow-start burst fits, and the loss rows measure "
                                     "random loss, not a short queue." if abs(lqueue - bdp) < 1 else "."),
          f"- **Payload**: {lsize / 1e6:g} MB, Figure 6's file: {lsize * 8 / lrate:.1f} s at the link rate, some "
          f"{lsize * 8 / lrate / lrtt:.0f} round trips, so start-up costs stay small beside it.",
          "- **Random loss**: " + ", ".join(lossname(p) for p in losses) + " of the data packets on the "
          "bottleneck, independently (Bernoulli); ACKs and RBUDP's control messages go back unharmed.",
          f"- **Single TCP**: the simulator's TCP (NewReno with SACK, 1460-byte segments, 200 ms delayed ACKs) "
          f"with the {dwin / 1024:.0f} KiB default window of the paper's era, and with a window of the capacity.",
          f"- **Striped TCP**: N connections of the same model, each with the {dwin / 1024:.0f} KiB window, started "
          f"together, sharing the payload as the real socket code does, by work stealing from a shared offset: a "
          f"stream takes the next {size_bytes(cfg['lfn_chunk']) / 1024:.0f} KiB chunk whenever it is free, that is "
          f"when its unacknowledged bytes fit in a send buffer the size of its window "
          "(`TcpHost::connect_striped`). A stream slowed by loss holds at most a buffer and a chunk; the others "
          "carry the rest.",
          f"- **RBUDP**: the fixed rate is {share:.0%} of the link in payload ({share * lrate / 1e6:.2f} Mbit/s, "
          f"{share * lrate * wire / ps / 1e6:.1f} Mbit/s on the wire with {ps}-byte packets), the paper's "
          "\"just below the available bandwidth\" on a path with nothing else on it; the adaptive rate starts "
          "there too.",
          "- **Time** runs until the receiver has the last byte in order (for striping, every stream's; for "
          "RBUDP, the receiver's Complete); TCP's starts one round trip before its first segment, for the "
          "handshake the model skips (the streams' connections open in parallel).",
          f"- **TCP's minimum RTO is {min_rto:g} s** here (RFC 6298 §2.4), not the model's ns-3 default of "
          "200 ms: with that floor and 200 ms delayed ACKs on a 150 ms path, the ACK for a lone segment "
          "returns after 350 ms while the RTO is about 280 ms, so a flow that has once timed out times out "
          "on every segment and moves about 40 kbit/s for the rest of the transfer (Karn's rule keeps the "
          "late ACKs from correcting the estimate). Real stacks escape it (a 1 s floor, or Linux's srtt + "
          "200 ms and RTT timestamps); `--set lfn_tcp_min_rto=200ms` shows the trap.",
          f"- **Runs**: a lossless cell is deterministic and runs once; lossy cells run {nruns} times "
          "(mean, and min-max in brackets).", "",
          "| random loss | mechanism | effective throughput (Mbit/s) | of the link | time (s) | NAK rounds |",
          "|---|---|---|---|---|---|"]
    for p in losses:
        for m in mechs:
            r = lget(p, m)
            if r is None:
                continue
            done = int(r["completed"]) > 0
            frac = f"{num(r['link_fraction']):.1%}" if done else "-"
            t = f"{num(r['time_mean_s']):.1f}" if done else "-"
            nk = f"{num(r['nak_rounds_mean']):g}" if r["scheme"].startswith("rbudp") and done else "-"
            L.append(f"| {lossname(p)} | {m} | {eff(r)} | {frac} | {t} | {nk} |")
    L += ["", "![LFN](bulk/lfn_throughput.png)", "",
          "Per-run numbers are in `bulk/lfn_runs.csv`, the table above in `bulk/lfn.csv`.", ""]

    def lm(p, m, col="effective_mean_mbps"):
        r = lget(p, m)
        return num(r[col]) if r and int(r["completed"]) > 0 else float("nan")

    limit = dwin * 8 / lrtt / 1e6
    s0 = lm(0, single)
    b0 = lm(0, "tcp, BDP window")
    x0 = lm(0, maxstripe) if maxstripe else float("nan")
    f0 = lm(0, "rbudp fixed")
    text = (f"**What the paper says, and what we measured.** Without loss the {dwin / 1024:.0f} KiB window is the "
            f"LFN problem exactly: one window per {lrtt * 1e3:g} ms round trip is {limit:.2f} Mbit/s, "
            f"{limit * 1e6 / lrate:.1%} of the link, and the simulated flow moves {s0:.2f} Mbit/s "
            f"({s0 * 1e6 / lrate:.1%}; whole segments fill {int(dwin) // 1460 * 1460:,} bytes of the window, and "
            f"the handshake and slow start cost a few round trips). A window of the paper's 0.84 MB reaches "
            f"{b0:.1f} Mbit/s ({b0 * 1e6 / lrate:.0%} of the link): the headers take 2.7%, and slow start from "
            f"10 segments to the capacity's {bdp / 1460:.0f} takes about {math.log2(bdp / 1460 / 10):.0f} round "
            f"trips, {math.log2(bdp / 1460 / 10) * lrtt:.1f} s of the transfer's "
            f"{lm(0, 'tcp, BDP window', 'time_mean_s'):.1f} s, at less than the link's rate.")
    if maxstripe:
        n = int(maxstripe.split("x")[-1])
        text += (f" Striping needs no tuning: {n} streams of {dwin / 1024:.0f} KiB move {x0:.1f} Mbit/s, "
                 f"{x0 / s0:.1f} times one stream, as {n} windows per round trip should"
                 + (" (still short of the link: the capacity is " f"{bdp / dwin:.1f} such windows)." if n * dwin < bdp
                    else "."))
    text += (f" RBUDP at {share:.0%} of the link delivers {f0:.1f} Mbit/s ({f0 * 1e6 / lrate:.1%}): the "
             "blast, the handshake and one end-of-blast exchange.")
    L += [text, ""]
    for p in lossy:
        sp, bp = lm(p, single), lm(p, "tcp, BDP window")
        xp = lm(p, maxstripe) if maxstripe else float("nan")
        fp, ap = lm(p, "rbudp fixed"), lm(p, "rbudp adaptive")
        mathis = 1460 * 8 / lrtt * math.sqrt(3 / (2 * 2 * p)) / 1e6
        nk = lm(p, "rbudp fixed", "nak_rounds_mean")
        t = (f"**At {lossname(p)} random loss** single TCP moves {sp:.2f} Mbit/s with the default window and "
             f"{bp:.2f} with the tuned one: " +
             ("the tuned window no longer helps, as " if bp < 1.5 * sp else "") +
             f"loss, not the window, sets the rate now (Mathis et al.'s MSS/RTT x sqrt(3/(2bp)) with delayed ACKs, "
             f"b = 2, gives {mathis:.2f} Mbit/s). ")
        if maxstripe:
            t += (f"{n} streams move {xp:.2f} Mbit/s, {xp / sp:.1f} times one stream: each stream has its own "
                  "share of the loss-limited rate. ")
        t += (f"RBUDP keeps {fp:.1f} Mbit/s ({fp * 1e6 / lrate:.1%} of the link) fixed and {ap:.1f} adaptive, "
              f"with {nk:g} NAK rounds on average: it resends what was lost, once per round, and the loss does "
              "not slow its first blast, which carries the whole file.")
        rb = [x for x in lruns if num(x["loss"]) == p and x["mechanism"] == "rbudp fixed"]
        slow = [x for x in rb if int(num(x["control_timeouts"] or 0)) > 0]
        fast = [x for x in rb if int(num(x["control_timeouts"] or 0)) == 0]
        if slow and fast:
            avg = lambda v: sum(num(x["effective_mbps"]) for x in v) / len(v)
            t += (f" In {plural(len(slow), 'run')} of {len(rb)} the control connection had a retransmission "
                  f"timeout (a control message lost at random, resent when TCP's timer fired, as in Figure 6): "
                  f"{avg(slow):.1f} Mbit/s on average there, {avg(fast):.1f} in the others.")
        L += [t, ""]
    L += ["The paper's order of preference (§5) reads the same way: tune TCP's window where the capacity is known "
          "and the system allows it, else stripe, and use Reliable Blast UDP where the path's bandwidth can be "
          "had (\"If QoS is available\"). The table adds what random loss does: tuning the window stops helping, "
          "striping multiplies a small loss-limited rate by N, and RBUDP pays only for resending what was lost "
          "and a round trip per NAK round.", ""]

open(out, "w").write("\n".join(L))
print("wrote", out)
