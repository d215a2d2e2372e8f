#!/usr/bin/env python3
"""Writes docs/results/miyoshi.md from a `groupwire sim run miyoshi` output
directory. Every number on the page comes from that run's files (the
paper's figures are constants of the scenario, carried in its tables).

    scripts/miyoshi_doc.py OUT_DIR DOC.md COMMAND
"""

import csv
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(x, fmt="{:.0f}"):
    if x in ("", None, "null"):
        return "-"
    return fmt.format(float(x))


def pct(x):
    return f"{float(x) * 100:.1f}%"


def ratio(x):
    return f"{float(x):.3f}"


def frames_table(path, out):
    out.append(
        "| scheme | lost | received | overhead (paper's way) | available | "
        "exact overhead | exact available | analytic lost | analytic available | "
        "paper lost | paper available |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows(path):
        out.append(
            f"| {r['scheme']} | {num(r['lost'])} ± {num(r['lost_sd'])} | {num(r['received'])} | "
            f"{num(r['overhead'])} | {num(r['available'])} ± {num(r['available_sd'])} | "
            f"{num(r['exact_overhead'])} | {num(r['exact_available'])} | "
            f"{num(r['analytic_lost'])} | {num(r['analytic_available'])} | "
            f"{num(r['paper_lost'])} | {num(r['paper_available'])} |"
        )


def curve_table(path, out):
    pts = rows(path)
    schemes = list(dict.fromkeys(r["scheme"] for r in pts))
    bers = list(dict.fromkeys(r["ber"] for r in pts))
    out.append("| BER | " + " | ".join(schemes) + " |")
    out.append("|---|" + "---|" * len(schemes))
    for b in bers:
        cells = []
        for s in schemes:
            r = next(r for r in pts if r["ber"] == b and r["scheme"] == s)
            cells.append(f"{float(r['goodput_kbps']):.1f}")
        out.append(f"| {float(b):.0e} | " + " | ".join(cells) + " |")
    return pts


def per_bit_p_err(p, r, p_b, bits=800):
    """P(an 800-bit frame has an error) when the Gilbert chain steps once per
    bit, starting in its stationary distribution, with no errors in Good and
    rate e = p_b (p + r) / p in Bad: a forward recursion over the bits of the
    probability of no error so far, per state."""
    e = p_b * (p + r) / p
    pi_bad = p / (p + r)
    good, bad = 1 - pi_bad, pi_bad * (1 - e)
    for _ in range(bits - 1):
        good, bad = good * (1 - p) + bad * r, (good * p + bad * (1 - r)) * (1 - e)
    return 1 - (good + bad)


def main():
    out_dir, doc, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    s = json.loads((out_dir / "summary.json").read_text())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rel = out_dir.name
    o = []
    o.append("# miyoshi: adaptive BCH FEC with ELN on a bursty wireless link")
    o.append("")
    o.append(
        f"Produced by `scripts/results.sh miyoshi` on {when} (commit {commit}), which runs:"
    )
    o.append("")
    o.append("```sh")
    o.append(command)
    o.append(f"scripts/miyoshi_doc.py {out_dir} {doc} '<that command>'")
    o.append("```")
    o.append("")
    o.append(
        f"The whole run took {float(s['wall_seconds']):.1f} s on this 2-core machine "
        f"(the TCP transfers on both cores; any thread count gives the same numbers, "
        f"which a test checks). CSV files and plots are in [`{rel}/`]({rel}/). "
        "Paper: Miyoshi et al., *Adaptive FEC with ELN for TCP over bursty wireless "
        "links* (`../shared/papers/miyoshi-adaptive-fec-eln-wireless-tcp.txt`); its "
        "figures exist only as captions in our copy, so the figure comparisons below "
        "are with what its text says about them."
    )
    o.append("")

    # --- The model -----------------------------------------------------
    o.append("## What is simulated, and what we assumed")
    o.append("")
    o.append(
        "- **Codes.** BCH(127, 92) t = 5, (127, 64) t = 10, (127, 36) t = 15, real "
        "encoder and decoder (`groupwire_codec::Bch`). Every codeword of every frame "
        "goes through the decoder (`Bch::decode_errors`, which decodes the error "
        "pattern alone: the code is linear, so this is what decoding any codeword "
        "with those errors does). A frame is lost if any codeword is uncorrectable "
        "or miscorrected."
    )
    o.append(
        "- **Table 2's channel, one step per frame.** The paper draws state "
        "durations by eq. 4 and decides \"for each sending packet\", with bit errors "
        "\"random in each packet\" (§5). We read that as the Gilbert chain stepped "
        "once per 800-bit frame, no errors in Error-free, independent bit errors in "
        "Error at a rate `e`. The paper gives p_b, not `e`: `e = p_b (p_GE + p_EG) / "
        "p_GE`, 0.0014 and 0.001625 (`ber:miyoshi-lower`, `ber:miyoshi-higher`)."
    )
    o.append(
        "- **Frames of Tables 3-4.** 800 bits on the air including parity (the "
        "paper's overhead column is received × (127 − k) / 127, e.g. 50,000 × 63 / 127 "
        "= 24,803): six full codewords plus a shortened 38-bit codeword where its "
        "parity leaves room (only for k = 92). The *available* column follows the "
        "paper's accounting; *exact* columns count the data bits really carried "
        "(555, 384, 216 of 800)."
    )
    o.append(
        "- **\"FEC(127.94)\".** The paper's first FEC row says 127.94 where its text "
        "says (127, 92); its overhead, 49,965 × 33 / 127 = 12,983, was computed with "
        "k = 94, which is not a BCH code length. We use (127, 92) throughout, so our "
        "overhead for that row is 35/127 of a frame, not 33/127."
    )
    o.append(
        "- **Network (Figure 1, Table 1).** Wired host, base station, terminal; "
        "384 kbit/s wireless each way, 1 ms per hop, 100-byte segments and 40-byte "
        "ACKs, 50 KB buffers. The wired rate is not given: 10 Mbit/s, 26 times the "
        "wireless rate, so it never limits. TCP Reno without SACK, an ACK per "
        "segment, a window of 20 segments, 200 ms minimum RTO (ns-2's defaults; the "
        "paper used ns-2). The window cannot fill the buffer, so every loss is a "
        "wireless one. Bit errors hit both wireless directions; with link-layer FEC "
        "the ACKs use the station's current code too."
    )
    o.append(
        "- **ELN and Snoop** live in a base-station agent "
        "(`groupwire_sim::miyoshi::station`): ELN marks duplicate ACKs for segments "
        "the station forwarded; Snoop caches segments, retransmits locally on the "
        "first duplicate ACK or its timer, and hides the duplicates it handles (at "
        "most 4 local tries per segment, then the duplicates go on, ELN-marked under "
        "Snoop+ELN). The station knows when each frame is due at the terminal (it "
        "owns the link's queue), so an ACK that comes before a copy could have "
        "arrived is not taken for a loss. The sender (`TcpConfig::eln`) retransmits "
        "an ELN-marked loss without cutting ssthresh or cwnd; timeouts still "
        "collapse the window."
    )
    o.append("")

    # --- Table 2 -------------------------------------------------------
    o.append("## Table 2: does the channel give the stated p_b and p_err?")
    o.append("")
    o.append(
        "| case | paper p_b | paper p_err | our Error-state BER | analytic p_err | "
        "measured p_err (5 × 50,000 frames) | Error-state BER that gives the paper's "
        "BCH(127,92) row | p_b it implies |"
    )
    o.append("|---|---|---|---|---|---|---|---|")
    cases = [("lower", 1), ("higher", 3)]
    for name, c in cases:
        k = f"channel{c}_"
        model = s[k + "model"]
        bad = model.split("bad=")[1]
        o.append(
            f"| {name} | {s[k + 'paper_p_b']} | {s[k + 'paper_p_err']} | {bad} | "
            f"{s[k + 'analytic_p_err']} | {s[k + 'measured_p_err']} | "
            f"{s[k + 'bad_ber_fitting_paper_fec92']} | {s[k + 'p_b_fitting_paper_fec92']} |"
        )
    o.append("")
    low, high = s["channel1_analytic_p_err"], s["channel3_analytic_p_err"]
    per_bit = [per_bit_p_err(0.006, r, 0.00015 if r == 0.05 else 0.00075) for r in (0.05, 0.007)]
    o.append(
        f"With the stated p_b, the chain gives p_err {low} and {high} for 800-bit "
        f"frames, against the paper's 0.090 and 0.445. No choice of step unit fixes "
        "both: stepping the chain once per *bit* instead (same p_b, Error-state BER "
        "from the same formula; computed exactly by `scripts/miyoshi_doc.py` with a "
        f"forward recursion over the 800 bits) gives {per_bit[0]:.4f} and {per_bit[1]:.4f}, "
        "raising the lower case past the paper's and leaving the higher one short. "
        "The paper's p_err values are instead close to the "
        f"share of frames in the Error state (analytic {s['channel2_analytic_p_err']} "
        f"and {s['channel4_analytic_p_err']} when nearly every frame in a fade is "
        "lost), and its FEC rows say the same: losing 15,903 of 50,000 frames under "
        "BCH(127, 92), which corrects 5 errors in every 127 bits, needs far more bit "
        f"errors than p_b = 0.00075 allows (at least {15903 / 50000 * 6 / 800:.4f} "
        "even if every lost frame had just one bad codeword with 6 errors). Solving for the "
        "Error-state BER that reproduces the paper's own BCH(127, 92) row gives "
        f"{s['channel3_bad_ber_fitting_paper_fec92']} (Table 4) and "
        f"{s['channel1_bad_ber_fitting_paper_fec92']} (Table 3). The run therefore "
        "shows each table twice: on the channel of the stated p_b, and on the same "
        "chain with the fitted Error-state BER (rounded to four decimals), the "
        "channel the paper's tables imply."
    )
    o.append("")

    # --- Tables 3 and 4 -------------------------------------------------
    titles = {
        1: "Table 3 (lower BER), Error-state BER from the stated p_b",
        2: "Table 3 (lower BER), Error-state BER fitted to the paper's BCH(127,92) row",
        3: "Table 4 (higher BER), Error-state BER from the stated p_b",
        4: "Table 4 (higher BER), Error-state BER fitted to the paper's BCH(127,92) row",
    }
    o.append("## Tables 3 and 4")
    o.append("")
    o.append(
        "Mean ± standard deviation over 5 seeds of 50,000 frames; every scheme sees "
        "the same errors in each run. *threshold* is the paper's switch (§4: one code "
        "stronger as soon as 2 of the last 10 frames were lost; one code weaker after "
        "10 frames with none lost, our reading of \"otherwise\"), fed by frame losses "
        "as ELN reports them. *predictive* is ours (below). *hindsight per frame* "
        "gives each frame the lightest code that survives its errors: an upper bound "
        "no causal rule reaches."
    )
    o.append("")
    for c in (1, 2, 3, 4):
        o.append(f"### {titles[c]}")
        o.append("")
        o.append(f"Channel `{s[f'channel{c}_model']}`.")
        o.append("")
        frames_table(out_dir / f"frames-{c}.csv", o)
        o.append("")
        k = f"channel{c}_"
        o.append(
            f"Best fixed: {s[k + 'best_fixed']}. Available relative to it: threshold "
            f"{ratio(s[k + 'threshold_vs_best_fixed'])}, predictive "
            f"{ratio(s[k + 'predictive_vs_best_fixed'])}, hindsight "
            f"{ratio(s[k + 'hindsight_vs_best_fixed'])}. Predictive against the paper's "
            f"own adaptive figure: {ratio(s[k + 'predictive_vs_paper_adaptive'])}."
        )
        o.append("")
    t4 = {r["scheme"]: r for r in rows(out_dir / "frames-4.csv")}
    t3 = {r["scheme"]: r for r in rows(out_dir / "frames-2.csv")}
    o.append("**The differences, row by row.**")
    o.append("")
    o.append(
        "- *No FEC.* On the stated-p_b channels we lose fewer frames than the paper "
        "(its p_err is higher than the chain gives, above). On the fitted channels "
        f"the row matches Table 4 closely ({num(t4['no FEC']['lost'])} lost against "
        f"22,242) and Table 3 less so ({num(t3['no FEC']['lost'])} against 4,461): "
        "with one Error-state rate fitted to the FEC row, nearly every frame in a "
        "fade is lost, which over-shoots Table 3's no-FEC row; Table 3's two rows "
        "cannot both come from one Error-state rate on this chain."
    )
    o.append(
        "- *Fixed codes.* At the stated p_b no code loses a frame (an Error-state "
        f"BER of 0.0014-0.001625 puts {127 * 0.0014:.2f}-{127 * 0.001625:.2f} errors in a "
        "127-bit codeword on average). On the fitted "
        f"Table 4 channel BCH(127,92) loses {num(t4['BCH(127,92)']['lost'])} (fitted "
        f"to the paper's 15,903), BCH(127,64) {num(t4['BCH(127,64)']['lost'])} "
        f"(paper 934) and BCH(127,36) {num(t4['BCH(127,36)']['lost'])} (paper 11): "
        "the stronger codes lose less here than in the paper, which suggests its "
        "errors were burstier within a frame than independent bit errors at one "
        "rate, though §5 says they were random. The available columns "
        f"agree to within a few percent ({num(t4['BCH(127,64)']['available'])} "
        "against 24,726 for BCH(127,64))."
    )
    o.append(
        "- *Adaptive.* The paper's adaptive row carries "
        f"{46706 / 45539:.3f} (Table 3) and {32564 / 27758:.3f} (Table 4) times its best "
        "fixed row's available frames (its text says 2% and 10%). Our threshold switch "
        f"does {ratio(s['channel2_threshold_vs_best_fixed'])} and "
        f"{ratio(s['channel4_threshold_vs_best_fixed'])} on the fitted channels, "
        f"{ratio(s['channel1_threshold_vs_best_fixed'])} and "
        f"{ratio(s['channel3_threshold_vs_best_fixed'])} on the stated-p_b ones: the "
        f"same direction, and more. On the fitted Table 4 channel it loses "
        f"{num(t4['adaptive (threshold)']['lost'])} frames and carries "
        f"{num(t4['adaptive (threshold)']['available'])} where the paper's loses 8,213 and "
        "carries 32,564. The paper describes its switch only by the 2-in-10 rule; "
        "when it starts a window, how it steps down and whether it measures p_err "
        "per segment or per codeword are not given, so we cannot say which detail "
        "costs it the difference."
    )
    o.append("")

    # --- Beyond: predictive and phases ------------------------------------
    o.append("## Beyond the paper: a code switch without thresholds")
    o.append("")
    o.append(
        "`PredictiveLadder` (`groupwire_proto::control::ladder`) fits a two-state "
        "Gilbert channel online to what the receiver reports per frame (lost, or the "
        "bits its decoder corrected: a link-layer decoder knows both), by a "
        "forgetting EM (expected transitions and per-state bit errors, a lost "
        "frame's unknown error count imputed as E[N | lost] so that survivors do not "
        "bias the fit low). It filters the channel's state and gives the next frame "
        "the code with the highest expected goodput over 10 frames, knowing each "
        "code's efficiency and its loss curve. A run of 3 losses the fit makes "
        "unlikely (< 1 in 1000) lifts the fitted Error-state BER at once, so a "
        "transport that backs off does not starve it of evidence."
    )
    o.append("")
    o.append(
        "**Goal 1, Tables 3-4:** at least the paper's adaptive figure. Predictive "
        f"available / paper's adaptive available: {ratio(s['channel1_predictive_vs_paper_adaptive'])}, "
        f"{ratio(s['channel2_predictive_vs_paper_adaptive'])} (Table 3, stated and fitted), "
        f"{ratio(s['channel3_predictive_vs_paper_adaptive'])}, "
        f"{ratio(s['channel4_predictive_vs_paper_adaptive'])} (Table 4). Met on all four "
        "(the stated-p_b channels are easier than the paper's, so the fitted ones are "
        "the fair comparison)."
    )
    o.append("")
    o.append(
        "**Goal 2, a channel that changes every 30 s:** within 5% of the best fixed "
        "code chosen in hindsight on every phase. Seven phases of 14,400 frames "
        "(30 s of 800-bit frames at 384 kbit/s), the switches not told of a change, "
        "5 seeds:"
    )
    o.append("")
    o.append(
        "| phase | channel | best fixed | its available | threshold | predictive | "
        "hindsight per frame | threshold / best | predictive / best |"
    )
    o.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows(out_dir / "phases.csv"):
        o.append(
            f"| {r['phase']} | `{r['channel']}` | {r['best_fixed']} | "
            f"{num(r['best_fixed_available'])} | {num(r['threshold_available'])} | "
            f"{num(r['predictive_available'])} | {num(r['hindsight_available'])} | "
            f"{ratio(r['threshold_vs_best'])} | {ratio(r['predictive_vs_best'])} |"
        )
    o.append("")
    wp, wt = s["phases_worst_predictive_vs_best_fixed"], s["phases_worst_threshold_vs_best_fixed"]
    verdict = "met" if float(wp) >= 0.95 else "missed"
    o.append(
        f"Worst phase: predictive {ratio(wp)} of the best fixed code ({verdict}), "
        f"threshold {ratio(wt)}. The threshold rule's weak phases are steady noisy "
        "channels: a clean window under a strong code sends it back to a weak one "
        "that fails, over and over, because the residual loss under a strong code "
        "says nothing about whether a weaker one would do (see the thresholds "
        "below)."
    )
    o.append("")

    # --- Figure 2 -------------------------------------------------------
    o.append("## Figure 2: TCP goodput against bit error rate")
    o.append("")
    air92 = -(-(800 + -(-800 // 92) * 35) // 8)
    o.append(
        "Independent bit errors at each BER on both wireless directions, one "
        "30-second bulk transfer (2 s warm-up not counted) per point and seed, mean "
        "of 3 seeds, payload goodput in kbit/s (the link's ceiling is "
        f"{384 * 60 / 100:.1f} without FEC and {384 * 60 / air92:.1f} with BCH(127,92), "
        f"whose parity makes a 100-byte segment {air92} bytes on the air)."
    )
    o.append("")
    o.append(f"![Figure 2]({rel}/fig2.png)")
    o.append("")
    f2 = curve_table(out_dir / "fig2-points.csv", o)
    o.append("")
    gp = {(r["ber"], r["scheme"]): float(r["goodput_kbps"]) for r in f2}
    eln_wins = [
        f"{float(b):.0e}"
        for b in dict.fromkeys(r["ber"] for r in f2)
        if gp.get((b, "eln"), 0) > 1.05 * gp.get((b, "reno"), 0) > 0
    ]
    o.append(
        f"**Shape.** The paper: FEC is best above BER 1e-4, Snoop+ELN below it. Here "
        f"FEC overtakes Snoop+ELN at BER {s['fig2_fec_beats_snoop_eln_above_ber']} "
        "(interpolated between grid points): the same shape, the crossing a little "
        "higher than the paper's. Our Snoop is a strong one (a station that knows "
        "when each frame is due retransmits a lost one on the first duplicate ACK "
        "that proves the loss, and never mistakes a late frame for a lost one); the "
        "paper's ns-2 Snoop agent is not described. ELN alone beats Reno by more than 5% at "
        f"BER {', '.join(eln_wins) or 'none of the points'}; at high BER, lost "
        "retransmissions and ACKs end in timeouts, which ELN does not change."
    )
    o.append("")

    # --- Figure 3 -------------------------------------------------------
    o.append("## Figure 3: Snoop+ELN over each code, and the thresholds")
    o.append("")
    o.append(f"![Figure 3]({rel}/fig3.png)")
    o.append("")
    curve_table(out_dir / "fig3-points.csv", o)
    o.append("")
    o.append(
        "The crossings of neighbouring curves are the switching points of the "
        "adaptive scheme (the paper's A, B, C in Figures 3 and 4). Each is given as "
        "a BER and as the segment error rate the station observes on either side "
        "(computed for 100-byte segments in that code from the binomial tail):"
    )
    o.append("")
    o.append("| threshold | below | above | BER | p_err seen under the lighter code | p_err seen under the stronger code |")
    o.append("|---|---|---|---|---|---|")
    for r in rows(out_dir / "thresholds.csv"):
        o.append(
            f"| {r['threshold']} | {r['below']} | {r['above']} | {r['ber']} | "
            f"{r['p_err_under_below']} | {r['p_err_under_above']} |"
        )
    o.append("")
    o.append(
        "Three neighbouring pairs give three crossings. The paper names four "
        "symbols (A-D) without values; with four codes there are three up-switches, "
        "so we read D as the way back down, and that is the weak point this table "
        "shows: above each crossing the stronger code's residual error rate is "
        "essentially zero, so a switch that watches only losses (ELN) can see when "
        "to climb (p_err under the lighter code above the threshold) but not when to "
        "come back. The paper's \"2 of 10\" rule climbs at p_err = 0.2, above "
        "threshold A's, and falls back on any clean window. On a steady channel "
        "between B and C that means flapping, which is where *snoop+eln+adaptive* "
        "drops far below the best code in the table. *snoop+eln+predictive* reads "
        "the decoder's corrected-bit counts, which measure the channel under any "
        "code, and stays within a few percent of the best code at every BER."
    )
    o.append("")

    # --- Window against speed ---------------------------------------------
    o.append("## The observation window against vehicle speed")
    o.append("")
    o.append(
        "Eq. 1: f_d = v f_c / c, 3 Hz per m/s at 900 MHz. Fades shorten as speed "
        "grows, so Table 2's chain (taken to hold at 5 m/s, our assumption: the "
        "paper gives no speed) is scaled: both transition probabilities multiplied "
        "by v / 5 m/s, keeping the share of time in fades. Snoop+ELN over the "
        "threshold switch, its window W frames with the climb at 2 W / 10 losses; "
        "goodput in kbit/s, mean of 3 seeds:"
    )
    o.append("")
    o.append(f"![window against speed]({rel}/windows.png)")
    o.append("")
    wrows = rows(out_dir / "windows-points.csv")
    windows = list(dict.fromkeys(r["window"] for r in wrows))
    o.append("| channel | speed (m/s) | f_d (Hz) | " + " | ".join(f"W = {w}" for w in windows) + " |")
    o.append("|---|---|---|" + "---|" * len(windows))
    keys = list(dict.fromkeys((r["channel"], r["speed_mps"], r["doppler_hz"]) for r in wrows))
    for ch, v, fd in keys:
        cells = [
            f"{float(r['goodput_kbps']):.1f}"
            for r in wrows
            if (r["channel"], r["speed_mps"]) == (ch, v)
        ]
        o.append(f"| {ch} | {float(v):g} | {float(fd):g} | " + " | ".join(cells) + " |")
    o.append("")
    frame_ms = 800 / 384
    o.append(
        f"A 100-byte frame takes {frame_ms:.1f} ms at 384 kbit/s, so a 10-frame window spans "
        f"about {10 * frame_ms:.0f} ms. At 5 m/s a fade of Table 2 lasts "
        f"{20 * frame_ms:.0f} ms (lower case) or {1 / 0.007 * frame_ms:.0f} ms (higher) on "
        "average, five times longer at 1 m/s and four times shorter at 20 m/s (the "
        "chain steps once per frame, so under a stronger code, whose frames are "
        "longer on the air, a fade also lasts longer in time: a simplification). The "
        "paper's point (§4) is that the window must be short enough to follow the "
        "fading and long enough to measure p_err; read the table for where that "
        "balance falls on each channel. Short windows switch hundreds of times in "
        "30 s (`code_switches` in `windows-points.csv`); in this model a switch "
        "costs nothing, so they are not penalized for it."
    )
    o.append("")

    # --- The switches on the tunnel -------------------------------------
    tunnel_csv = out_dir.parent / "tunnel-sim" / "settings.csv"
    if tunnel_csv.exists():
        o.append("## The same switches on the tunnel's block FEC")
        o.append("")
        o.append(
            "Both switches are generic (`groupwire_proto::control::ladder`) and drive "
            "GENEVA's block FEC as `groupwire tunnel --fec threshold` and `--fec "
            "predictive` (`groupwire_proto::control::switch`): the codes become repair "
            "windows on a ladder of 0 to 3k, and whole packets are lost. Measured by "
            "`scripts/results.sh tunnel-sim` (the tunnel's machine in the simulator, "
            "[tunnel-sim.md](tunnel-sim.md)) on the tunnel's benchmark channel: 2000 "
            "datagrams/s through a Gilbert channel with 10% loss in bursts of 4 on "
            "average, 30 s, beside GMIAD at the same k:"
        )
        o.append("")
        o.append("| setting | residual loss | overhead | mean Fwnd |")
        o.append("|---|---|---|---|")
        trows = rows(tunnel_csv)
        pick = [r for r in trows if r["fec"] in ("gmiad", "threshold", "predictive")]
        for r in pick:
            o.append(
                f"| {r['setting']} | {float(r['residual']) * 100:.3f}% | "
                f"{float(r['overhead']) * 100:.0f}% | {float(r['mean_fwnd']):.1f} |"
            )
        o.append("")
        by = {}
        for r in pick:
            by.setdefault((r["fec"], r["k"]), r)  # the first row of each kind
        g20, p20 = by.get(("gmiad", "20")), by.get(("predictive", "20"))
        g150, p150 = by.get(("gmiad", "150")), by.get(("predictive", "150"))
        if g20 and p20 and g150 and p150:
            o.append(
                "At k = 20 neither switch matches GMIAD's residual: the predictive one "
                f"leaves {float(p20['residual']) * 100:.2f}% at "
                f"{float(p20['overhead']) * 100:.0f}% overhead, GMIAD "
                f"{float(g20['residual']) * 100:.3f}% at {float(g20['overhead']) * 100:.0f}%. "
                "Its fit sees one count per 10 ms report (about 20 packets) and takes "
                "losses inside an interval as independent, so it under-rates what bursts "
                "of four do to a 20-packet block. With long blocks, which average the "
                "bursts out, it leaves "
                f"{float(p150['residual']) * 100:.3f}% at {float(p150['overhead']) * 100:.0f}% "
                f"overhead against GMIAD's {float(g150['residual']) * 100:.3f}% at "
                f"{float(g150['overhead']) * 100:.0f}%. The threshold switch, which only "
                "sees whether an interval left anything unrebuilt, stays low on the ladder "
                "and leaves percent-level residual loss at either k: a clean window steps "
                "it down to a window the channel defeats. The k = 150 rows on real sockets "
                "over loopback, beside GMIAD's, are in [tunnel.md](tunnel.md)."
            )
            o.append("")

    o.append("## Not done yet (issue 12)")
    o.append("")
    o.append(
        "- A predictive switch that knows burst lengths within a report interval "
        "(the receiver would have to report loss runs).\n"
        "- No side-by-side of the BCH decoder with the kernel's `lib/bch.c` yet (its "
        "speed against the issue's goals is in `docs/results/perf.md`).\n"
        "- A Snoop that gives its retransmissions priority over queued frames "
        "(ours queue behind them)."
    )
    o.append("")
    doc.write_text("\n".join(o))
    print(f"wrote {doc}")


if __name__ == "__main__":
    main()
