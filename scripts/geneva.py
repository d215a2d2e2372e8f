#!/usr/bin/env python3
"""Runs the GENEVA reproduction and writes docs/results/geneva.md.

    scripts/results.sh geneva              # what CI-independent docs use
    scripts/geneva.py [--duration 180s] [--seeds 2] [--jobs 2]

Every number in the generated file comes from the runs this script starts
(`groupwire sim run geneva ...`, listed in the file) or, in the columns
marked "paper", from Matsuzono et al.'s text and tables.
"""

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GW = os.path.join(ROOT, "target", "release", "groupwire")
OUT = os.path.join(ROOT, "docs", "results")
DIR = os.path.join(OUT, "geneva")
CTRLS = ["gmiad", "static-small", "static-large", "dp-fec", "tfrc"]

# Table 1 of the paper (short-lived TCP flows, 500 Mbit/s load): per
# controller, data loss rate, packet loss rate, Fwnd, bursty events, TPindex,
# link loss rate.
PAPER_T1 = {
    ("10ms", 12.5): {
        "gmiad": (0.0011, 0.0068, 10.19, 164.90, 0.57, 0.039),
        "static-small": (0.0029, 0.0078, 8.0, 305.70, 0.61, 0.040),
        "static-large": (0.0026, 0.0083, 12.0, 281, 0.49, 0.039),
        "dp-fec": (0.0024, 0.32, 48.12, 169.7, 0.10, 0.024),
    },
    ("10ms", 25.0): {
        "gmiad": (0.0013, 0.0070, 9.88, 283.60, 0.61, 0.033),
        "static-small": (0.0029, 0.0089, 8.0, 509.40, 0.65, 0.035),
        "static-large": (0.0032, 0.0093, 12.0, 938.5, 0.46, 0.037),
        "dp-fec": (0.0061, 0.23, 35.69, 610, 0.18, 0.025),
    },
    ("100ms", 12.5): {
        "gmiad": (0.0039, 0.0074, 8.19, 393.50, 0.77, 0.030),
        "static-small": (0.0044, 0.0077, 8.0, 452.0, 0.78, 0.030),
        "static-large": (0.0050, 0.0093, 12.0, 549.5, 0.63, 0.031),
        "dp-fec": (0.0016, 0.35, 58.11, 878.6, 0.22, 0.025),
    },
    ("100ms", 25.0): {
        "gmiad": (0.0036, 0.0069, 8.14, 459.60, 0.82, 0.023),
        "static-small": (0.0037, 0.0070, 8.0, 473.20, 0.82, 0.024),
        "static-large": (0.0036, 0.0079, 12.0, 688.6, 0.70, 0.027),
        "dp-fec": (0.0021, 0.25, 40.41, 1186.0, 0.33, 0.030),
    },
}
# Table 2 (7 heterogeneous flows vs 200 long-lived TCP flows, RTTmin 10 ms),
# "Total (avg.)" rows: data loss, packet loss, Fwnd, bursty events, TPindex.
PAPER_T2 = {
    "gmiad": (0.0010, 0.011, 9.35, 83.71, 0.62),
    "static-small": (0.0039, 0.016, 8.0, 299.29, 0.63),
    "static-large": (0.0051, 0.019, 12.0, 624.14, 0.60),
    "dp-fec": (0.0046, 0.0055, 44.09, 14.29, 0.49),
}


def sets(duration, seeds):
    """(name, title, --set pairs) of every run set."""
    common = [("duration", duration), ("seeds", str(seeds))]
    s = []
    s.append(("fig8", "Fig. 8: 10 streams vs long-lived TCP, RTTmin 10 ms",
              common + [("rtt", "10ms"), ("tcp_flows", "[100,150,200,250]")]))
    s.append(("fig9", "Fig. 9: 10 streams vs long-lived TCP, RTTmin 100 ms",
              common + [("rtt", "100ms"), ("tcp_flows", "[300,500,700]")]))
    # The paper chose its populations to give 1-4% loss on the bottleneck
    # (§4.2); our TCP model loses less at the same counts, so these sets
    # extend the sweeps until the link loss reaches that range.
    s.append(("fig8_more", "Fig. 8, extended: more TCP flows, RTTmin 10 ms",
              common + [("rtt", "10ms"), ("tcp_flows", "[400,600]")]))
    s.append(("fig9_more", "Fig. 9, extended: more TCP flows, RTTmin 100 ms",
              common + [("rtt", "100ms"), ("tcp_flows", "[1000,1500]")]))
    for rtt in ("10ms", "100ms"):
        for r in (12.5, 25.0):
            mean = 500e6 / (r * 1500 * 8)  # rho_tcp = r_tcp * s_tcp = 500 Mbit/s
            s.append((f"table1_{rtt}_r{r:g}",
                      f"Table 1: short-lived TCP at 50% load, RTTmin {rtt}, r_tcp {r:g}",
                      common + [("rtt", rtt), ("tcp_flows", "[0]"),
                                ("short_flows.rate", str(r)),
                                ("short_flows.mean_packets", f"{mean:.1f}"),
                                ("short_flows.shape", "1.5")]))
    s.append(("table2", "Table 2: 5 x 30 + 60 + 90 Mbit/s streams vs 200 TCP flows, RTTmin 10 ms",
              common + [("rtt", "10ms"), ("tcp_flows", "[200]"), ("streams", "5"),
                        ("extra_stream_rates", '["60Mbps", "90Mbps"]')]))
    return s


def command(name, pairs):
    args = ["sim", "run", "geneva", "--seed", "1", "--quiet", "--out", f"docs/results/geneva/{name}"]
    for k, v in pairs:
        args += ["--set", f"{k}={v}"]
    return args


def run_set(item):
    name, _, pairs = item
    args = command(name, pairs)
    res = subprocess.run([GW] + args, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        sys.exit(f"{name} failed: {res.stderr}")
    return name


def read_cells(name):
    with open(os.path.join(DIR, name, "cells.csv")) as f:
        return list(csv.DictReader(f))


def read_streams(name):
    with open(os.path.join(DIR, name, "streams.csv")) as f:
        return list(csv.DictReader(f))


def summary(name):
    with open(os.path.join(DIR, name, "summary.json")) as f:
        return json.load(f)


def fnum(x, digits=4):
    if x in (None, "", "null"):
        return "n/a"
    x = float(x)
    if x != x:
        return "n/a"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}g}"


def shell_line(name, pairs):
    return "groupwire " + " ".join(
        a if not a.startswith("--") and "=" not in a else (a if "=" not in a else f"'{a}'")
        for a in command(name, pairs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="180s", help="simulated time per run (paper: about 3 minutes)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per cell")
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel")
    ap.add_argument("--only", nargs="*", help="run only these sets (fig8, fig9, table1_..., table2)")
    ap.add_argument("--doc-only", action="store_true", help="rewrite geneva.md from the runs on disk")
    a = ap.parse_args()
    all_sets = sets(a.duration, a.seeds)
    if a.doc_only:
        sm = summary("fig8")
        a.duration = f"{sm['duration_s']:g}s"
        a.seeds = sm["seeds_per_cell"]
        write_doc(all_sets, a)
        return
    todo = [s for s in all_sets if not a.only or s[0] in a.only]
    os.makedirs(DIR, exist_ok=True)
    for name, _, _ in todo:
        shutil.rmtree(os.path.join(DIR, name), ignore_errors=True)
    with ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for name in ex.map(run_set, todo):
            print(f"ran {name}", file=sys.stderr)
    write_doc(all_sets, a)


a_duration = "?"


def write_doc(all_sets, a):
    L = []
    w = L.append
    w("# GENEVA: block FEC with GMIAD against static FEC, DP-FEC and TFRC")
    w("")
    w("Produced by `scripts/results.sh geneva` (which runs "
      f"`scripts/geneva.py --duration {a.duration} --seeds {a.seeds}`). Each run set below is one command:")
    w("")
    w("```sh")
    for name, _, pairs in all_sets:
        w(shell_line(name, pairs))
    w("```")
    w("")
    w(PROSE_SETUP)
    w("")
    # The bar.
    w("## The bar: GMIAD vs static-small")
    w("")
    w("In each setting (TCP population of a figure, or a table's run), GMIAD "
      "should lose fewer data packets than static-small and keep its TPindex "
      "within 0.05 of static-small's.")
    w("")
    w("| setting | GMIAD data loss | static-small data loss | GMIAD TPindex | static-small TPindex | lower loss | TPindex within 0.05 |")
    w("|---|---|---|---|---|---|---|")
    total = lower = close = both = 0
    ext_total = ext_both = 0
    for name, title, _ in all_sets:
        cells = read_cells(name)
        pops = sorted({c["tcp_flows"] for c in cells}, key=int)
        for p in pops:
            g = next((c for c in cells if c["tcp_flows"] == p and c["controller"] == "gmiad"), None)
            s = next((c for c in cells if c["tcp_flows"] == p and c["controller"] == "static-small"), None)
            if not g or not s:
                continue
            gl, sl = float(g["data_loss_rate"]), float(s["data_loss_rate"])
            gt = float(g["tpindex"]) if g["tpindex"] else float("nan")
            st = float(s["tpindex"]) if s["tpindex"] else float("nan")
            lo = gl < sl
            cl = abs(gt - st) <= 0.05
            if name.endswith("_more"):
                ext_total += 1
                ext_both += lo and cl
            else:
                total += 1
                lower += lo
                close += cl
                both += lo and cl
            label = name if p == "0" else f"{name}, {p} TCP flows"
            w(f"| {label} | {fnum(gl)} | {fnum(sl)} | {fnum(gt, 3)} | {fnum(st, 3)} | "
              f"{'yes' if lo else 'no'} | {'yes' if cl else 'no'} |")
    w("")
    w(f"**In the paper's settings (Figs. 8 and 9, Tables 1 and 2), GMIAD has the lower residual "
      f"loss in {lower} of {total}, a TPindex within 0.05 of static-small's in {close} of {total}, "
      f"and both in {both} of {total}.** In the extended sweeps beyond the paper's populations "
      f"(`fig8_more`, `fig9_more`) it meets both in {ext_both} of {ext_total}; see below for why.")
    w("")
    for name, title, pairs in all_sets:
        w(f"## {title}")
        w("")
        w(f"`{shell_line(name, pairs)}`")
        w("")
        cells = read_cells(name)
        w("| TCP flows | controller | data rate (Mbit/s) | data loss | packet loss | mean Fwnd | mean Wtot | bursty events / stream | TPindex | TCP Mbit/s per flow | link loss |")
        w("|---|---|---|---|---|---|---|---|---|---|---|")
        for c in cells:
            w("| " + " | ".join([
                c["tcp_flows"], c["controller"], fnum(c["data_rate_mbps"]), fnum(c["data_loss_rate"]),
                fnum(c["packet_loss_rate"]), fnum(c["mean_fwnd"]), fnum(c["mean_wtot"]),
                fnum(c["bursty_events_per_stream"]), fnum(c["tpindex"], 3),
                fnum(c["tcp_throughput_mbps"]), fnum(c["link_loss_rate"])]) + " |")
        w("")
        if name.startswith("table1_"):
            _, rtt, r = name.split("_")
            paper = PAPER_T1.get((rtt, float(r[1:])))
            if paper:
                w("The paper's Table 1 for this setting, beside ours:")
                w("")
                w("| controller | data loss (paper / ours) | packet loss (paper / ours) | Fwnd (paper / ours) | TPindex (paper / ours) | link loss (paper / ours) |")
                w("|---|---|---|---|---|---|")
                for ctrl, v in paper.items():
                    c = next((c for c in cells if c["controller"] == ctrl), None)
                    if not c:
                        continue
                    w(f"| {ctrl} | {fnum(v[0])} / {fnum(c['data_loss_rate'])} | {fnum(v[1])} / {fnum(c['packet_loss_rate'])} | "
                      f"{fnum(v[2])} / {fnum(c['mean_fwnd'])} | {fnum(v[4], 3)} / {fnum(c['tpindex'], 3)} | {fnum(v[5])} / {fnum(c['link_loss_rate'])} |")
                w("")
        if name == "table2":
            w("The paper's Table 2 (\"Total (avg.)\" rows), beside ours (all 7 streams):")
            w("")
            w("| controller | data loss (paper / ours) | packet loss (paper / ours) | Fwnd (paper / ours) | TPindex (paper / ours) |")
            w("|---|---|---|---|---|")
            for ctrl, v in PAPER_T2.items():
                c = next((c for c in cells if c["controller"] == ctrl), None)
                if not c:
                    continue
                w(f"| {ctrl} | {fnum(v[0])} / {fnum(c['data_loss_rate'])} | {fnum(v[1])} / {fnum(c['packet_loss_rate'])} | "
                  f"{fnum(v[2])} / {fnum(c['mean_fwnd'])} | {fnum(v[4], 3)} / {fnum(c['tpindex'], 3)} |")
            w("")
            w("Per stream (first seed):")
            w("")
            w("| controller | stream | rate (Mbit/s) | data loss | packet loss | mean Fwnd | bursty events |")
            w("|---|---|---|---|---|---|---|")
            for s in read_streams(name):
                w(f"| {s['controller']} | {s['stream']} | {fnum(s['rate_mbps'])} | {fnum(s['data_loss_rate'])} | "
                  f"{fnum(s['packet_loss_rate'])} | {fnum(s['mean_fwnd'])} | {s['bursty_events']} |")
            w("")
        pngs = sorted(f for f in os.listdir(os.path.join(DIR, name)) if f.endswith(".png"))
        for p in pngs:
            w(f"![{p[:-4]}](geneva/{name}/{p})")
        w("")
    global a_duration
    a_duration = a.duration
    L.extend(analysis(all_sets))
    w("")
    w("**Run length.** Each run simulates the duration in the command lines above with a 5 s "
      "warm-up; the paper ran \"about 3 minutes\" per simulation. 180 s runs work the same way "
      "(`scripts/geneva.py --duration 180s`); `docs/results/perf.md` times the simulator on the "
      "Fig. 8 setting.")
    with open(os.path.join(OUT, "geneva.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    print("wrote docs/results/geneva.md", file=sys.stderr)


PROSE_SETUP = """\
**Setup** (paper §4.1, Fig. 7): a dumbbell with a 1 Gbit/s bottleneck,
10 Gbit/s access links with 1 ms delay, RTTmin 10 or 100 ms, a drop-tail
queue of min(BDP, 2048) packets, 1500-byte packets. Ten streaming flows
at 30 Mbit/s (k = 25 source packets per 10 ms SYN) run one controller at a
time: GMIAD (GENEVA), Static-FEC with Fwnd = 8 (small) and 12 (large),
DP-FEC, and TFRC (no FEC, rate limited by RFC 5348; the reference of
TPindex, eq. 9). The TCP flows are TCP-SACK (`groupwire-sim`'s model,
validated against ns-3 in `ns3-validation.md`). Each run set compares all
five controllers on the same seeds; cells are means over the seeds. The
plots are the paper's Figs. 8/9 (a)-(d) and, for the GMIAD run of the
first population, the Fwnd traces of three streams and the bottleneck's
loss rate (Figs. 10-12). Data packets occupy 1500 bytes on the simulated
wire but carry 8 real bytes through the real Reed-Solomon code (see
`crates/groupwire-sim/src/blockfec.rs`)."""

def cell(name, ctrl, pop=None):
    for c in read_cells(name):
        if c["controller"] == ctrl and (pop is None or c["tcp_flows"] == str(pop)):
            return c
    return None


def ertt_ms(fwnd, wtot, k=25, syn_ms=10.0):
    """ERTT implied by eq. 1, Wtot = (Fwnd + k)(ERTT + SYN) / SYN."""
    return wtot * syn_ms / (fwnd + k) - syn_ms


def analysis(all_sets):
    """The differences from the paper, each with the numbers behind it."""
    names = [n for n, _, _ in all_sets]
    L = ["## Where we differ from the paper, and why", ""]
    # 1. Link loss range, from the static-small runs (the network's own loss,
    # not a controller's runaway).
    def link_range(sets_):
        v = [float(c["link_loss_rate"]) for n in sets_ for c in read_cells(n)
             if c["controller"] == "static-small"]
        return min(v), max(v)
    lo_p, hi_p = link_range(["fig8", "fig9"])
    lo_x, hi_x = link_range(["fig8_more", "fig9_more"])
    L.append(
        f"- **Less loss at the same TCP populations.** The paper chose its populations so that the "
        f"bottleneck lost about 1% to 4% (§4.2). With the same counts our link loses "
        f"{lo_p:.2%} to {hi_p:.2%} (static-small runs of Figs. 8 and 9): groupwire's TCP "
        "model is validated against ns-3, not ns-2, and loses less at a given flow count. The "
        f"`fig8_more` and `fig9_more` sets add populations that bring it to {lo_x:.2%} to {hi_x:.2%}.")
    # 1b. Runaway beyond the paper's range.
    g4, s4 = cell("fig8_more", "gmiad", 400), cell("fig8_more", "static-small", 400)
    g6, s6 = cell("fig8_more", "gmiad", 600), cell("fig8_more", "static-small", 600)
    L.append(
        "- **Beyond the paper's range GMIAD runs away, as §3.2.4 warns.** At RTTmin 10 ms with 400 "
        f"and 600 TCP flows (every TCP flow's share is then about a packet per RTT), GMIAD's mean "
        f"Fwnd climbs to {float(g4['mean_fwnd']):.1f} and {float(g6['mean_fwnd']):.1f} (Fwnd_max is "
        f"60), its own packet loss to {float(g4['packet_loss_rate']):.1%} and "
        f"{float(g6['packet_loss_rate']):.1%} (static-small: {float(s4['packet_loss_rate']):.1%}, "
        f"{float(s6['packet_loss_rate']):.1%}), and TPindex falls to {float(g4['tpindex']):.2f} and "
        f"{float(g6['tpindex']):.2f} (static-small: {float(s4['tpindex']):.2f}, "
        f"{float(s6['tpindex']):.2f}). Each repair packet raises the loss the streams see, and a "
        "higher loss raises the equilibrium window W* = 2 / (pmax - p) (eq. 2): once p nears pmax = 3% "
        "the loop has no fixed point below Fwnd_max. The paper says so (\"If the packet loss "
        "probability continues to be more than or equal to pmax, GENEVA keeps the maximum "
        "acceptable Fwnd ... which results in the significant degradation of competing TCP "
        "performance and congestion collapse\") and leaves rate reduction to the application; "
        "its evaluation stays where the streams' share is small. A deployment needs that guard.")
    # 2. Bursty events.
    t1 = cell("table1_10ms_r25", "static-small")
    L.append(
        "- **Fewer bursty loss events.** Our streams are paced exactly as §3.2.2 asks, so a drop-tail "
        "overflow takes one or two packets of a stream at a time; the paper counts hundreds of "
        f"bursty events per stream over 3 minutes (Table 1, static-small at 10 ms and r_tcp 25: "
        f"{PAPER_T1[('10ms', 25.0)]['static-small'][3]:g}) where we count "
        f"{float(t1['bursty_events_per_stream']):.1f} in {a_duration} (the same setting). With fewer "
        "bursts every FEC controller loses less than in the paper, and the controllers' differences "
        "are in smaller numbers; their order is what to compare.")
    # 3. GMIAD at 100 ms.
    f9 = [float(c["mean_fwnd"]) for n in ("fig9", "fig9_more") for c in read_cells(n)
          if c["controller"] == "gmiad"]
    w9 = [float(c["mean_wtot"]) for n in ("fig9", "fig9_more") for c in read_cells(n)
          if c["controller"] == "gmiad"]
    f9_text = f"{min(f9):.2f}" if max(f9) - min(f9) < 0.005 else f"{min(f9):.2f} to {max(f9):.2f}"
    L.append(
        f"- **GMIAD at RTTmin 100 ms stays at Fwnd_min.** Our mean Fwnd is {f9_text} in every "
        f"population up to 1500 flows (paper: 8.2 to 8.4). With Wtot around {min(w9):.0f} to {max(w9):.0f}, "
        "i(Wtot) is about 1.6 per lost packet, and eq. 3 turns a Wtot increase into SYN / (ERTT + "
        "SYN), about a tenth, of a repair packet: it takes a burst of about seven losses inside one "
        "10 ms report to add one repair packet, and our long-RTT runs have few such bursts.")
    # 4. Table 1 at 10 ms.
    g = cell("table1_10ms_r12.5", "gmiad")
    pg = PAPER_T1[("10ms", 12.5)]["gmiad"]
    paper_wtot = 105.26  # Table 1, GENEVA, RTTmin 10 ms, r_tcp 12.5
    e_ours = ertt_ms(float(g["mean_fwnd"]), float(g["mean_wtot"]))
    e_paper = ertt_ms(pg[2], paper_wtot)
    misses = []
    for n in names:
        for c in read_cells(n):
            if c["controller"] != "gmiad":
                continue
            s_ = cell(n, "static-small", c["tcp_flows"])
            if s_ is None:
                continue
            lo = float(c["data_loss_rate"]) < float(s_["data_loss_rate"])
            tg = float(c["tpindex"]) if c["tpindex"] else float("nan")
            ts = float(s_["tpindex"]) if s_["tpindex"] else float("nan")
            if not (lo and abs(tg - ts) <= 0.05):
                misses.append(n if c["tcp_flows"] == "0" else f"{n} ({c['tcp_flows']} flows)")
    L.append(
        "- **Where GMIAD misses the bar here: "
        + (", ".join(misses) if misses else "nowhere")
        + ".** The extended 10 ms sweep is the runaway above. In the paper's own settings, "
        "short-lived TCP at RTTmin 10 ms (Table 1's first two) shows a milder form of it. "
        "GMIAD raises Fwnd to "
        f"{float(g['mean_fwnd']):.1f} on average (paper: {pg[2]:g}); the extra repair packets make "
        f"its own packet loss {float(g['packet_loss_rate']):.2%} against static-small's "
        f"{float(cell('table1_10ms_r12.5', 'static-small')['packet_loss_rate']):.2%}, with more "
        "packets of each stream inside each overflow, and the residual loss ends slightly higher. "
        "The reason is the RTT GMIAD sees. By eq. 1 the mean Wtot and Fwnd give the ERTT: ours "
        f"{e_ours:.1f} ms, the paper's "
        f"{e_paper:.1f} ms (from its Table 1 Wtot {paper_wtot:g} and Fwnd {pg[2]:g}). "
        f"At 50% load our queue is emptier, so Wtot sits near 73 (mean {float(g['mean_wtot']):.0f}), "
        "where i is the constant 10 "
        "(text under Fig. 6): every lost packet adds 10 to Wtot and about five repair packets per "
        "block, and a slow-start burst of a short flow moves Fwnd far. In the paper's fuller queue "
        f"the same Wtot increase moves Fwnd {1 - (10 / (e_paper + 10)) / (10 / (e_ours + 10)):.0%} "
        "less (eq. 3: SYN / (ERTT + SYN) repair packets per unit of Wtot). We keep the paper's "
        "constants; this is the case its §3.2.4 discussion of i below W = 73 leaves open.")
    # 5. DP-FEC.
    dp_rows = [(n, c) for n in names if n.startswith("fig") for c in read_cells(n)
               if c["controller"] == "dp-fec"]
    dp = [float(c["mean_fwnd"]) for _, c in dp_rows]
    top_n, top = max(dp_rows, key=lambda nc: float(nc[1]["packet_loss_rate"]))
    low = min(float(c["packet_loss_rate"]) for _, c in dp_rows)
    L.append(
        "- **DP-FEC is a reconstruction.** GENEVA's paper describes DP-FEC only in outline (§5: "
        "probe upward, halve when the FEC impact estimated from loss-event intervals exceeds a "
        "threshold); `crates/groupwire-proto/src/control/dpfec.rs` says what we chose. Like the "
        f"paper's, ours keeps a large Fwnd ({min(dp):.1f} to {max(dp):.1f} against long-lived TCP) "
        "and costs TCP the most (the lowest TPindex). The paper's DP-FEC flows lost a quarter to a "
        "third of their own packets (Table 1: 0.23 to 0.35); ours lose "
        f"{low:.2%} to {float(top['packet_loss_rate']):.2%}, the top in `{top_n}` at "
        f"{top['tcp_flows']} flows, where it runs away as GMIAD does at 10 ms. Its residual loss is "
        "low here; read its rows as a probing controller, not as DP-FEC's published numbers.")
    L.append(
        "- **TPindex.** Against long-lived TCP the paper finds about 0.65 for both static-small and "
        "GENEVA (§4.2.1); ours is in the table above for every population, computed the same way "
        "(eq. 9, against the TFRC run of the same seed and population).")
    return L


if __name__ == "__main__":
    main()
