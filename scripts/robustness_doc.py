#!/usr/bin/env python3
"""Writes docs/results/robustness.md: issue 15's channel-family bench on one
page, from the pages its parts wrote.

  scripts/robustness_doc.py docs/results

Called by `scripts/results.sh robustness` after it has run the parts
(robustness-afec, robustness-tunnel, fec-codes; robustness-peers only when
asked, since it runs real processes for about a quarter of an hour). Every
table here is copied from a part's page, which names the command that made
it; nothing is computed or typed in here.
"""
import os
import re
import sys

# (page, heading of the section to copy, what it is)
PARTS = [
    ("robustness-afec", "### goals",
     "AFEC on the family: per controller, the cells meeting each of the "
     "issue's goals (band held in 85% of windows, latency and bytes against "
     "the oracle, no overshoot, recovery within 3 windows)."),
    ("robustness-tunnel", "## Summary",
     "The tunnel on the family: the target controller on the block code "
     "and on the sliding-window code, and GMIAD, against the oracle (the "
     "cheapest fixed code meeting the target within the delay budget), per "
     "residual target and delay budget."),
    ("fec-codes", "### wins",
     "The sliding-window code (RFC 8681) against the block code at equal "
     "overhead and span: per delay budget, the channels where each leaves "
     "fewer sources late."),
    ("robustness-peers", "## Per cell and target: who meets it, who is cheaper",
     "The real tunnel beside UDPspeeder and kcptun's FEC through one "
     "`groupwire emulate` hop, same traffic, same run."),
    # The same page's table for the sliding code, when its rows ran.
    ("robustness-peers", "## The same with the sliding-window code (`--fec sliding:target`)",
     "The same, judging `groupwire tunnel --fec sliding:target` (the target "
     "controller on the sliding-window code) instead of the block code."),
]


def section(text, heading):
    """The lines under `heading` up to the next heading of its level or
    higher; None if the page has no such heading."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    out = []
    for line in lines[start + 1:]:
        m = re.match(r"^(#+) ", line)
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out).strip()


def main(results):
    page = [
        "# Closed-loop loss control on any channel: the family bench",
        "",
        "Produced by `scripts/results.sh robustness`, which runs the parts "
        "below and copies their headline tables here (`scripts/robustness_doc.py`); "
        "each part's page has every table, the command that made it and how "
        "to read it. `PEERS=1 scripts/results.sh robustness` also reruns the "
        "real-socket comparison with the peers (built outside the repository "
        "by `scripts/peers.sh`).",
        "",
        "The family (`LossModel::family` in `crates/groupwire-link`, issue 15): "
        "Bernoulli 1%, 5%, 10% and 25%; Gilbert at 10% loss in mean bursts "
        "of 2, 4 and 10, and at 20% in bursts of 4; Gilbert-Elliott with loss "
        "in both states; and the time-varying presets `schedule:alternating` "
        "and `schedule:fading`. Each part states where it departs from that "
        "list and why.",
    ]
    for i, (name, heading, what) in enumerate(PARTS):
        path = os.path.join(results, name + ".md")
        again = i > 0 and PARTS[i - 1][0] == name
        if again:
            # A second section of the page before: only if it has one.
            if not os.path.exists(path):
                continue
            with open(path) as f:
                body = section(f.read(), heading)
            if body is not None:
                page += ["", f"### {name}: {heading.lstrip('#').strip()}", "", what, "", body]
            continue
        page += ["", f"## {name}", "", what, ""]
        if not os.path.exists(path):
            page.append(f"Not run yet: `scripts/results.sh {name}` writes [{name}.md]({name}.md).")
            continue
        with open(path) as f:
            body = section(f.read(), heading)
        if body is None:
            page.append(f"[{name}.md]({name}.md) has no `{heading}` section; see the page.")
            continue
        page += [body, "", f"All tables: [{name}.md]({name}.md)."]
    out = os.path.join(results, "robustness.md")
    with open(out, "w") as f:
        f.write("\n".join(page) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/results")
