#!/usr/bin/env python3
"""Markdown comparison of ns-3 and groupwire tcp-dumbbell results.

Usage: compare.py DIR [DIR ...]

Reads every *.json in the given directories (later directories override
earlier ones for the same cell). Each file holds one summary object as
written by validation/ns3/build/dumbbell (last stdout line) or by
`groupwire sim run tcp-dumbbell` (summary.json). Files whose name contains
"speed" belong to the speed benchmark; all others to the validation grid.

Prints markdown on stdout (no header: run.sh adds one). Standard library only.
"""

import json
import math
import os
import sys

FLAG_THRESHOLD = 0.10  # relative difference that gets a flag


def load(dirs):
    cells = {}  # (kind, rate_bps, rtt_ms, flows) -> {"ns-3": obj, "groupwire": obj}
    for d in dirs:
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(d, name)
            try:
                with open(path) as f:
                    text = f.read().strip()
                try:
                    obj = json.loads(text)
                except ValueError:
                    # A log with the JSON object on its last line.
                    obj = json.loads(text.splitlines()[-1] if text else "")
            except (OSError, ValueError, IndexError) as e:
                print(f"compare.py: skipping {path}: {e}", file=sys.stderr)
                continue
            sim = obj.get("simulator")
            if sim not in ("ns-3", "groupwire"):
                print(f"compare.py: skipping {path}: simulator={sim!r}", file=sys.stderr)
                continue
            kind = "speed" if "speed" in name else "grid"
            key = (kind, int(obj["rate_bps"]), float(obj["rtt_ms"]), int(obj["flows"]))
            cells.setdefault(key, {})[sim] = obj
    return cells


def rate_str(bps):
    if bps % 1_000_000_000 == 0:
        return f"{bps // 1_000_000_000} Gbit/s"
    if bps % 1_000_000 == 0:
        return f"{bps // 1_000_000} Mbit/s"
    return f"{bps} bit/s"


def num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt(x, spec):
    return format(x, spec) if num(x) else "—"


def ratio(gw, ns):
    """groupwire / ns-3, or None."""
    if not (num(gw) and num(ns)):
        return None
    if ns == 0:
        return 1.0 if gw == 0 else math.inf
    return gw / ns


def fmt_ratio(r):
    if r is None:
        return "—"
    if math.isinf(r):
        return "∞"
    return f"{r:.3f}"


def differs(r):
    return r is not None and (math.isinf(r) or abs(r - 1.0) > FLAG_THRESHOLD)


def events_per_s(o):
    if not o:
        return None
    ev, wall = o.get("events"), o.get("wall_seconds")
    if num(ev) and num(wall) and wall > 0:
        return ev / wall
    return None


def get(o, k):
    return o.get(k) if o else None


def grid_table(cells):
    keys = sorted(k for k in cells if k[0] == "grid")
    if not keys:
        return "_No grid results found._\n"
    out = []
    out.append(
        "| Bottleneck | RTT | Flows | Queue (pkts) "
        "| Goodput ns-3 (Mbit/s) | Goodput gw (Mbit/s) | gw/ns-3 "
        "| Loss ns-3 | Loss gw | gw/ns-3 "
        "| Jain ns-3 | Jain gw "
        "| Wall ns-3 (s) | Wall gw (s) | Events/s ns-3 | Events/s gw | Speed-up (ns-3 wall / gw wall) "
        "| Flags |"
    )
    out.append("|" + "---|" * 18)
    for key in keys:
        _, rate, rtt, flows = key
        ns = cells[key].get("ns-3")
        gw = cells[key].get("groupwire")
        flags = []
        thr_r = ratio(get(gw, "throughput_bps"), get(ns, "throughput_bps"))
        loss_r = ratio(get(gw, "bottleneck_loss_rate"), get(ns, "bottleneck_loss_rate"))
        jain_r = ratio(get(gw, "jain_fairness"), get(ns, "jain_fairness"))
        if differs(thr_r):
            flags.append("goodput")
        if differs(loss_r):
            flags.append("loss")
        if differs(jain_r):
            flags.append("Jain")
        if ns and gw and ns.get("queue_packets") != gw.get("queue_packets"):
            flags.append("queue size differs")
        if not ns:
            flags.append("no ns-3 result")
        if not gw:
            flags.append("no groupwire result")
        speed = ratio(get(ns, "wall_seconds"), get(gw, "wall_seconds"))
        q = get(ns, "queue_packets") if ns else get(gw, "queue_packets")
        mbit = lambda o: (o["throughput_bps"] / 1e6) if o and num(o.get("throughput_bps")) else None
        evs_ns, evs_gw = events_per_s(ns), events_per_s(gw)
        flag_text = ("⚠ " + ", ".join(flags)) if flags else "ok"
        out.append(
            f"| {rate_str(rate)} | {rtt:g} ms | {flows} | {q if q is not None else '—'} "
            f"| {fmt(mbit(ns), '.2f')} | {fmt(mbit(gw), '.2f')} | {fmt_ratio(thr_r)} "
            f"| {fmt(get(ns, 'bottleneck_loss_rate'), '.5f')} | {fmt(get(gw, 'bottleneck_loss_rate'), '.5f')} "
            f"| {fmt_ratio(loss_r)} "
            f"| {fmt(get(ns, 'jain_fairness'), '.3f')} | {fmt(get(gw, 'jain_fairness'), '.3f')} "
            f"| {fmt(get(ns, 'wall_seconds'), '.2f')} | {fmt(get(gw, 'wall_seconds'), '.2f')} "
            f"| {fmt(evs_ns, '.3g')} | {fmt(evs_gw, '.3g')} | {fmt_ratio(speed)} "
            f"| {flag_text} |"
        )
    return "\n".join(out) + "\n"


def speed_table(cells):
    keys = sorted(k for k in cells if k[0] == "speed")
    if not keys:
        return "_No speed benchmark results found._\n"
    out = []
    out.append(
        "| Scenario | Simulator | Simulated s | Wall s | CPU s | Events | Events/s (wall) "
        "| Simulated s per wall s | Goodput (Mbit/s) |"
    )
    out.append("|" + "---|" * 9)
    notes = []
    for key in keys:
        _, rate, rtt, flows = key
        for sim in ("ns-3", "groupwire"):
            o = cells[key].get(sim)
            scen = f"{rate_str(rate)}, RTT {rtt:g} ms, {flows} flows"
            if not o:
                out.append(f"| {scen} | {sim} | — | — | — | — | — | — | — |")
                continue
            dur, wall = o.get("duration_s"), o.get("wall_seconds")
            simrate = dur / wall if num(dur) and num(wall) and wall > 0 else None
            ev = o.get("events")
            out.append(
                f"| {scen} | {sim} | {fmt(dur, 'g')} | {fmt(wall, '.2f')} "
                f"| {fmt(o.get('cpu_seconds'), '.2f')} "
                f"| {ev if num(ev) else '—'} | {fmt(events_per_s(o), '.3g')} "
                f"| {fmt(simrate, '.3f')} "
                f"| {fmt(o['throughput_bps'] / 1e6 if num(o.get('throughput_bps')) else None, '.2f')} |"
            )
        ns, gw = cells[key].get("ns-3"), cells[key].get("groupwire")
        sp = ratio(get(ns, "wall_seconds"), get(gw, "wall_seconds"))
        cpu_sp = ratio(get(ns, "cpu_seconds"), get(gw, "cpu_seconds"))
        if cpu_sp is not None:
            notes.append(
                f"CPU-time speed-up for {rate_str(rate)}, RTT {rtt:g} ms, {flows} flows: "
                f"**{fmt_ratio(cpu_sp)}×** (ns-3 CPU s / groupwire CPU s; less sensitive "
                "to other load on the machine than wall time)."
            )
        if sp is not None:
            notes.append(
                f"Speed-up for {rate_str(rate)}, RTT {rtt:g} ms, {flows} flows: "
                f"groupwire is **{fmt_ratio(sp)}×** ns-3 (ns-3 wall time / groupwire wall time). "
                "Event counts are not directly comparable: each simulator defines its own events."
            )
    return "\n".join(out + [""] + notes) + "\n"


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cells = load(argv[1:])
    print("## Validation grid\n")
    print(
        "Goodput is application bytes delivered in the measurement window "
        "(after warm-up), summed over flows. Loss is bottleneck queue drops / "
        "packets arriving at the bottleneck queue in the window. Ratios are "
        f"groupwire / ns-3; ⚠ marks a relative difference above {FLAG_THRESHOLD:.0%}. "
        "Wall time is the simulator's run loop only (no setup, no build).\n"
    )
    print(grid_table(cells))
    print("## Speed\n")
    print(speed_table(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
