#!/usr/bin/env python3
"""Pools `groupwire sim run tele-immersion` runs over several seeds.

Usage: tele_immersion_seeds.py DIR...  (one `--out` directory per seed,
given in seed order from seed 1: the header names them so)

Prints, as markdown:

- per datagram channel, each policy's share of windows meeting the QoS
  and its overhead, averaged over the seeds, with the best fixed choice
  by that average (highest share, then least overhead), the rule of the
  single-seed goal table applied to the pooled means;
- for the model run, the windows that missed the QoS per minute of the
  path's schedule, summed over the seeds, beside the same for that
  channel's best fixed choice (from each run's qos_CHANNEL.csv, whose
  10 s points are shares of 1 s windows);
- for the reliable channels (edits, bulk), each run's mean and p99
  delivery latency, averaged over the seeds: what striping the bulk
  channel (the model's choice on a lossy path) buys them both.

Only the standard library: the numbers are the runs' own CSV files.
"""

import csv
import sys
from collections import defaultdict

CHANNELS = ("telepointer", "state", "camera")
RELIABLE = ("edits", "bulk")


def read_channels(d, fields=("qos_met", "overhead")):
    """{channel: {run: (fields...)}} from channels.csv."""
    rows = defaultdict(dict)
    with open(f"{d}/channels.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[r["channel"]][r["run"]] = tuple(float(r[k]) for k in fields)
    return rows


def read_series(d, channel):
    """{series: {t: share met}} from qos_CHANNEL.csv."""
    out = defaultdict(dict)
    with open(f"{d}/qos_{channel}.csv", newline="") as f:
        for r in csv.DictReader(f):
            out[r["series"]][int(float(r["t"]))] = float(r["value"])
    return out


def main(dirs):
    runs = [read_channels(d) for d in dirs]
    n = len(runs)
    print(f"Means over {n} seeds (`--seed 1` to `--seed {n}`).")
    print()
    print("| channel | model met | model overhead | heuristic met | best fixed (mean) | its met | its overhead | model meets it | model's met per seed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ch in CHANNELS:
        names = sorted(set().union(*(r[ch].keys() for r in runs)))

        def mean(run, i):
            return sum(r[ch][run][i] for r in runs) / n

        fixed = [k for k in names if k.startswith("fixed:")]
        best = max(fixed, key=lambda k: (mean(k, 0), -mean(k, 1)))
        ok = mean("model", 0) >= mean(best, 0) - 1e-12 and mean("model", 1) <= mean(best, 1) + 1e-12
        seeds = " ".join(f"{r[ch]['model'][0]:.3f}" for r in runs)
        print(
            f"| {ch} | {mean('model', 0):.4f} | {mean('model', 1):.3f} | {mean('heuristic', 0):.4f} "
            f"| {best} | {mean(best, 0):.4f} | {mean(best, 1):.3f} | {str(ok).lower()} | {seeds} |"
        )
    print()
    print("Windows missing the QoS, summed over the seeds, per minute of the path "
          "(minute 1: 0.1% random loss from the 10 s warm-up on; 2: 2% random, 40 ms; "
          "3: Gilbert 8% in bursts of 4, 4 Mbit/s, 40 ms; 4: 0.5% random). "
          "`best fixed` is each seed's own best fixed run, as in its goal table:")
    print()
    print("| channel | run | minute 1 | minute 2 | minute 3 | minute 4 |")
    print("|---|---|---|---|---|---|")
    for ch in CHANNELS:
        totals = {"model": [0.0] * 4, "best fixed": [0.0] * 4}
        for d in dirs:
            series = read_series(d, ch)
            fixed = next((k for k in series if k.startswith("fixed:")), None)
            for label, key in (("model", "model"), ("best fixed", fixed)):
                for t, share in series.get(key, {}).items():
                    m = min(t // 60, 3)
                    totals[label][m] += round((1.0 - share) * 10)
        for label, t in totals.items():
            print(f"| {ch} | {label} | " + " | ".join(f"{x:.0f}" for x in t) + " |")
    print()
    print("The reliable channels' delivery latency (ms), means over the seeds of each "
          "run's mean and p99; `stationary` is the model on the stationary path "
          "(2% random loss):")
    print()
    print("| channel | run | mean ms | p99 ms |")
    print("|---|---|---|---|")
    lat = [read_channels(d, ("mean_ms", "p99_ms")) for d in dirs]
    for ch in RELIABLE:
        for run in ("model", "heuristic", "fixed:reliable", "stationary"):
            vals = [r[ch][run] for r in lat if run in r.get(ch, {})]
            if len(vals) != n:
                continue
            mean = sum(v[0] for v in vals) / n
            p99 = sum(v[1] for v in vals) / n
            print(f"| {ch} | {run} | {mean:.0f} | {p99:.0f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
