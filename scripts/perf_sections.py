"""The marked sections of docs/results/perf.md: each benchmark script
rewrites its own section, between `<!-- NAME:begin ... -->` and
`<!-- NAME:end -->`, and leaves the others as they are."""

import os
import re


def replace_section(out, name, lines):
    """Writes `lines` (the section's lines, markers included) over the
    section called `name` of the file `out`, or appends it."""
    section = "\n".join(lines) + "\n"
    text = open(out).read() if os.path.exists(out) else "# Performance\n"
    pat = re.compile(rf"<!-- {re.escape(name)}:begin.*?<!-- {re.escape(name)}:end -->\n?", re.S)
    text = pat.sub(lambda _: section, text) if pat.search(text) else text.rstrip("\n") + "\n\n" + section
    with open(out, "w") as f:
        f.write(text)
