#!/usr/bin/env python3
"""Runs the peers (UDPspeeder, kcptun's FEC) beside `groupwire tunnel` through
the same `groupwire emulate` hop with the same traffic (issue 15, "Measured
against the peers"), and writes docs/results/robustness-peers.md.

  eval "$(scripts/peers.sh)"                       # UDPSPEEDER_BIN, KCP_UDP_BIN
  scripts/peers_bench.py docs/results/robustness-peers.md

Called by `scripts/results.sh robustness-peers` after a release build (it
honours CARGO_TARGET_DIR, as cargo does); every number written comes from
this run. The peers' paths come from UDPSPEEDER_BIN and KCP_UDP_BIN (either
may be missing: its rows are left out, and the page says so). PEERS_CELLS
(comma-separated cell ids, e.g. "bern1,gil10b4") and PEERS_SECONDS (default
10: 20,000 datagrams) shorten a trial run; the committed page uses neither.

Every process runs on 127.0.0.1 only and is killed when its run ends or
times out.
"""
import datetime, json, os, platform, re, signal, socket, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tunnel_bench import GW, LOAD, start, start_ready  # noqa: E402  (same binaries, same start-up)

RATE, SIZE = 2000, 1000
SECONDS = float(os.environ.get("PEERS_SECONDS", "10"))
# The sink listens this long after the last datagram is sent: later
# arrivals count as lost (kcptun's ARQ can stall for longer after a burst).
SINK_TAIL = 2.0
# IPv4 + UDP headers: every ratio counts them on both sides, as tunnel.md does.
HDR = 28
UDPSPEEDER = os.environ.get("UDPSPEEDER_BIN")
KCP_UDP = os.environ.get("KCP_UDP_BIN")
# Residual-loss targets and delay budgets of the tunnel family
# (the 0.01% target is left out: 20,000 datagrams cannot resolve it).
TARGETS = [("1%", 0.01), ("0.1%", 0.001)]
BUDGETS = [("10ms", 10), ("30ms", 30), ("100ms", 100)]

# The family's tunnel cells: (id, name, --loss, two-state chain for the
# analytic block residual: p good->bad, r bad->good, loss in good, in bad).
# Gilbert loss = p / (p + r), mean burst 1 / r. schedule:alternating is left
# out: its phases last 60 s and a 20,000-datagram run spans 10 s of one.
CELLS = [
    ("bern1", "Bernoulli 1%", "bernoulli:0.01", (0.5, 0.5, 0.01, 0.01)),
    ("bern5", "Bernoulli 5%", "bernoulli:0.05", (0.5, 0.5, 0.05, 0.05)),
    ("bern10", "Bernoulli 10%", "bernoulli:0.1", (0.5, 0.5, 0.1, 0.1)),
    ("gil10b2", "Gilbert 10%, mean burst 2", "gilbert:p=0.055556,r=0.5", (0.055556, 0.5, 0.0, 1.0)),
    ("gil10b4", "Gilbert 10%, mean burst 4", "gilbert:p=0.027778,r=0.25", (0.027778, 0.25, 0.0, 1.0)),
    ("gil20b4", "Gilbert 20%, mean burst 4", "gilbert:p=0.0625,r=0.25", (0.0625, 0.25, 0.0, 1.0)),
    ("ge", "Gilbert-Elliott, 1% / 60% loss, mean bad dwell 10", "ge:p=0.01,r=0.1,good=0.01,bad=0.6",
     (0.01, 0.1, 0.01, 0.6)),
]


def chain_loss(chain):
    p, r, e0, e1 = chain
    return (r * e0 + p * e1) / (p + r)


def block_residual(k, m, chain):
    """Residual loss of full (k, m) blocks on a two-state Markov chain with a
    loss probability per state: expected lost sources in blocks with more
    than m of their k + m packets lost, over k. The same computation as
    tunnel_bench.analytic_residual, with loss in both states."""
    p, r, e0, e1 = chain
    P = [[1 - p, p], [r, 1 - r]]
    e = [e0, e1]
    d = {}  # (state, source losses, total losses) -> probability
    for s, pr in ((0, r / (p + r)), (1, p / (p + r))):
        for lost in (0, 1):
            w = e[s] if lost else 1 - e[s]
            if w > 0:
                d[(s, lost, lost)] = d.get((s, lost, lost), 0.0) + pr * w
    for i in range(1, k + m):
        nd = {}
        for (s, sl, tl), pr in d.items():
            for t in (0, 1):
                for lost in (0, 1):
                    w = P[s][t] * (e[t] if lost else 1 - e[t])
                    if w > 0:
                        key = (t, sl + (lost if i < k else 0), min(tl + lost, m + 1))
                        nd[key] = nd.get(key, 0.0) + pr * w
        d = nd
    return sum(pr * sl for (s, sl, tl), pr in d.items() if tl > m) / k


def tuned_repairs(chain, k=20, goal=0.001, cap=60):
    """The fewest repairs per k-datagram block whose analytic residual on the
    cell's chain meets goal (the tighter residual target), at most cap."""
    for m in range(1, cap + 1):
        if block_residual(k, m, chain) <= goal:
            return m
    return cap


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def target_supported():
    """Whether this groupwire tunnel has the target-residual controller
    (`--fec target --target-loss T --max-delay D`, built on another branch)."""
    h = subprocess.run([GW, "tunnel", "--help"], capture_output=True, text=True).stdout
    return "--target-loss" in h and "--max-delay" in h


def rows_for(cell, has_target):
    """The rows of one cell: (name, kind, args, judged target or None)."""
    y = tuned_repairs(cell[3])
    rows = []
    if UDPSPEEDER:
        rows += [
            ("UDPspeeder defaults", "udpspeeder", ["-f20:10"], None),
            # Tuned for the cell: mode 1 (each datagram its own shard, sent at
            # once; its README's low-latency mode), the cell's repair count for
            # 0.1% on full 20-blocks, a 12 ms timeout so 20 datagrams at
            # 2000/s fill a group, and no random padding (--disable-obscure).
            (f"UDPspeeder tuned", "udpspeeder",
             ["--mode", "1", f"-f20:{y}", "--timeout", "12", "--disable-obscure", "1"], None),
        ]
    if KCP_UDP:
        rows += [("kcptun FEC+ARQ (kcp-go, 10:3, -mode fast)", "kcp", [], None),
                 # kcptun's -mode fast3: nodelay, 10 ms interval, 30 ms minimum RTO.
                 ("kcptun FEC+ARQ (kcp-go, 10:3, -mode fast3)", "kcp", ["--nodelay", "1", "--interval", "10"], None)]
    rows.append(("groupwire tunnel defaults", "gw", [], None))
    if not has_target:
        # A tuned groupwire row until the target controller exists (left out
        # then, to keep the run near 15 minutes).
        rows.append(("groupwire tunnel, same code as UDPspeeder tuned", "gw",
                     ["--fec", f"static:{y}", "--k", "20", "--block-wait", "12ms"], None))
    if has_target:
        for tn, t in TARGETS:
            for dn, d in BUDGETS:
                rows.append((f"groupwire tunnel --target-loss {tn} --max-delay {dn}", "gw",
                             ["--fec", "target", "--target-loss", tn, "--max-delay", dn], (tn, dn)))
        if sliding_target_supported():
            # The same controller on the sliding-window code (issue 15).
            for tn, t in TARGETS:
                for dn, d in BUDGETS:
                    rows.append((f"groupwire tunnel --fec sliding:target --target-loss {tn} --max-delay {dn}",
                                 "gw", ["--fec", "sliding:target", "--target-loss", tn, "--max-delay", dn],
                                 (tn, dn, "sliding")))
    return rows


def sliding_target_supported():
    """Whether this groupwire tunnel runs the target controller on the
    sliding-window code (`--fec sliding:target`)."""
    h = subprocess.run([GW, "tunnel", "--help"], capture_output=True, text=True).stdout
    return "sliding:target" in h


class Procs:
    """Every process of one run; all are killed when the run ends."""

    def __init__(self):
        self.procs = []

    def add(self, p):
        self.procs.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def wait_bound(port, proc, what):
    """Waits until something listens on UDP port (a process without a ready
    line, UDPspeeder), at most 5 s."""
    for _ in range(100):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited: {proc.args}")
        with open("/proc/net/udp") as f:
            if any(f":{port:04X} " in l.split()[1] + " " for l in f.readlines()[1:]):
                return
        time.sleep(0.05)
    raise SystemExit(f"{what} did not bind port {port}")


def start_side(ps, kind, side, to, life, args, log):
    """One side of `kind`'s tunnel, sending on to `to`: the far side (facing
    the sink) returns the address the link sends to, the near side (facing
    the application) where the application sends."""
    far = side == "far"
    if kind == "gw":
        p, ready = start_ready([GW, "tunnel", "--listen", "127.0.0.1:0", "--forward" if far else "--peer", to,
                                "--duration", f"{life}s", "--quiet"] + args)
        ps.add(p)
        return ready["link" if far else "app"]
    if kind == "udpspeeder":
        port = free_port()
        p = ps.add(subprocess.Popen([UDPSPEEDER, "-s" if far else "-c", "-l", f"127.0.0.1:{port}", "-r", to,
                                     "--log-level", "2", "--disable-color"] + args,
                                    stdout=log, stderr=log))
        wait_bound(port, p, "UDPspeeder " + ("server" if far else "client"))
        return f"127.0.0.1:{port}"
    p = ps.add(subprocess.Popen([KCP_UDP, "server" if far else "client", "--listen", "127.0.0.1:0",
                                 "--forward" if far else "--peer", to, "--duration", str(life)] + args,
                                stdout=subprocess.PIPE, stderr=log, text=True))
    return json.loads(p.stdout.readline())["listen"]


def run(tmp, cell, kind, args):
    """app sender -> near side -> emulator (cell's loss) -> far side -> sink."""
    sink_json, emu_json = os.path.join(tmp, "sink.json"), os.path.join(tmp, "emu.json")
    life = SECONDS + SINK_TAIL - 0.5
    log = open(os.path.join(tmp, "peer.log"), "w")
    with Procs() as ps:
        sink, line = start([LOAD, "recv", "--duration", str(SECONDS + SINK_TAIL), "--json", sink_json,
                            "--deadlines-ms", ",".join(str(d) for _, d in BUDGETS)])
        ps.add(sink)
        sink_addr = line.split()[1]
        far_addr = start_side(ps, kind, "far", sink_addr, life, args, log)
        emu, ready = start_ready([GW, "emulate", "--listen", "127.0.0.1:0", "--forward", far_addr,
                                  "--loss", cell[2], "--seed", "1", "--duration", f"{life}s", "--quiet",
                                  "--stats-json", emu_json])
        ps.add(emu)
        app = start_side(ps, kind, "near", ready["listen"], life, args, log)
        time.sleep(0.3)
        sent = json.loads(subprocess.run([LOAD, "send", "--to", app, "--rate", str(RATE), "--size", str(SIZE),
                                          "--duration", str(SECONDS)],
                                         capture_output=True, text=True, check=True,
                                         timeout=SECONDS + 30).stdout)
        for p in (sink, emu):
            p.communicate(timeout=SECONDS + 30)
            if p.returncode != 0:
                raise SystemExit(f"{p.args}: exit {p.returncode}")
    sink = json.load(open(sink_json))
    emu = json.load(open(emu_json))
    n = sent["sent"]
    bare = n * (SIZE + HDR)
    wire = lambda d: (d["received_bytes"] + HDR * d["received"]) / bare
    fwd, rev = emu["forward"], emu["reverse"]
    return dict(
        sent=n, unique=sink["unique"], corrupt=sink["corrupt"], residual=1 - sink["unique"] / n,
        late={dn: 1 - sink["within_ms"][str(d)] / n for dn, d in BUDGETS},
        wire=wire(fwd), reverse=wire(rev), link_loss=fwd["lost"] / max(1, fwd["received"]),
        socket_drops=fwd["socket_drops"] + rev["socket_drops"], lat=sink["latency_us"])


def meets(r, t, d):
    return r["late"][d] <= t


def ms(us):
    return f"{us / 1000:.2f}"


def versions():
    """The peers' versions, as their binaries and sources say."""
    v = {}
    if UDPSPEEDER:
        h = subprocess.run([UDPSPEEDER, "-h"], capture_output=True, text=True)
        m = re.search(r"git version: (\S+)", h.stdout + h.stderr)
        v["UDPspeeder"] = f"UDPspeeder V2, git {m.group(1) if m else 'unknown'} (`{UDPSPEEDER}`)"
    if KCP_UDP:
        m = subprocess.run(["go", "version", "-m", KCP_UDP], capture_output=True, text=True).stdout
        kv = re.search(r"dep\s+github.com/xtaci/kcp-go/v5\s+(\S+)", m)
        rs = re.search(r"dep\s+github.com/klauspost/reedsolomon\s+(\S+)", m)
        v["kcp-go"] = (f"kcp-go {kv.group(1) if kv else 'unknown'}, klauspost/reedsolomon "
                       f"{rs.group(1) if rs else 'unknown'} (`{KCP_UDP}`, built from scripts/peers/kcp_udp)")
    return v


def machine():
    cpu = "unknown CPU"
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.system()} {platform.release()} {platform.machine()}, {cpu}, {os.cpu_count()} cores"


def main():
    # A SIGTERM (a timeout from the caller) unwinds like Ctrl-C, so every
    # run's processes are killed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = sys.argv[1] if len(sys.argv) > 1 else None
    if not out:
        raise SystemExit(__doc__)
    only = [c for c in os.environ.get("PEERS_CELLS", "").split(",") if c]
    cells = [c for c in CELLS if not only or c[0] in only]
    has_target = target_supported()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for cell in cells:
            rows = []
            for name, kind, args, judged in rows_for(cell, has_target):
                r = run(tmp, cell, kind, args)
                r.update(name=name, kind=kind, args=args, judged=judged)
                rows.append(r)
                print(f"{cell[0]} {name}: residual {r['residual']:.3%} wire {r['wire']:.3f}x "
                      f"p99 {ms(r['lat']['p99'])} ms", file=sys.stderr)
            results.append((cell, rows))
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    open(out, "w").write(page(results, has_target, commit) + "\n")
    json.dump([dict(cell=c[0], rows=rows) for c, rows in results], open(out.replace(".md", ".json"), "w"), indent=1)
    print("wrote", out, file=sys.stderr)


def page(results, has_target, commit):
    n = int(RATE * SECONDS)
    now = datetime.datetime.now(datetime.timezone.utc)
    L = ["# robustness: groupwire tunnel beside UDPspeeder and kcptun's FEC\n",
         f"Produced by `scripts/results.sh robustness-peers` on {now:%Y-%m-%d %H:%M} UTC (commit {commit}), "
         "which builds the peers outside the repository with `scripts/peers.sh` and runs "
         "`scripts/peers_bench.py docs/results/robustness-peers.md` (issue 15, \"Measured against the peers\"). "
         f"Machine: {machine()}, shared with other builds while it ran.\n",
         "Peers: " + ("; ".join(versions().values()) or "none found") + ".\n"]
    if not UDPSPEEDER:
        L.append("**UDPspeeder was not found** (`scripts/peers.sh` says why): its rows are missing.\n")
    if not KCP_UDP:
        L.append("**kcp-go was not built** (`scripts/peers.sh` says why): its rows are missing.\n")
    L += [

         "For every row, on 127.0.0.1, with the cell's loss on the data direction only (the reverse "
         "direction, which carries reports, ACKs and heartbeats, is lossless):",
         "",
         "```sh",
         "udp_load recv --deadlines-ms 10,30,100      # checking sink (crates/groupwire-cli/examples/udp_load.rs)",
         "FAR SIDE  -> SINK                            # groupwire tunnel --forward / speederv2 -s / kcp_udp server",
         "groupwire emulate --listen 127.0.0.1:0 --forward FAR --loss CELL --seed 1",
         "NEAR SIDE -> EMULATOR                        # groupwire tunnel --peer / speederv2 -c / kcp_udp client",
         f"udp_load send --to NEAR --rate {RATE} --size {SIZE} --duration {SECONDS:g}   # {n} datagrams",
         "```",
         "",
         "**residual**: 1 − distinct datagrams the sink received / sent, whenever they arrived (every datagram is "
         "checked byte for byte; the sink stops about a second after the last datagram was sent, so anything later counts as lost). **lost > 10 / 30 / 100 ms**: 1 − distinct datagrams that arrived within that "
         "one-way delay / sent, the loss an application with that delay budget sees. **wire ×**: bytes that "
         "entered the emulated hop in the data direction (each datagram's UDP payload plus 28 bytes of IP and UDP "
         "headers) over sending the datagrams bare the same way, counted by the emulator so every tool is measured "
         "alike; **reverse ×** the same for the other direction. **p50 / p99 / max**: one-way latency, "
         "application to application, of the datagrams that arrived (sender and sink on one host). The "
         "six **target** columns are the issue's residual targets and delay budgets: ✓ when the row's loss "
         "within the budget is at most the target. With 20,000 datagrams, 0.1% is 20 datagrams, and on a bursty "
         "cell a single run's count moves by a few of them from run to run.",
         "",
         "The rows: **UDPspeeder defaults** is `speederv2 -f20:10` on both sides (mode 0: datagrams packed into "
         "20 shards of up to 1250 bytes with 10 Reed-Solomon repairs, an 8 ms timeout, random padding). "
         "**UDPspeeder tuned** is set for the cell: `--mode 1` (each datagram is its own shard and is sent at "
         "once; the README's low-latency mode), `-f20:Y` with Y the fewest repairs whose analytic residual for full "
         "20-datagram blocks on the cell's chain is at most 0.1% (computed by the script, no simulation), "
         "`--timeout 12` so that a group fills with 20 datagrams at 2000/s, and `--disable-obscure 1` (no padding). "
         "**kcptun FEC+ARQ** is kcp-go, the transport and FEC of kcptun, with kcptun's defaults (10 data + 3 "
         "parity shards, `-mode fast`, windows 128/512 and 1024/1024, MTU 1350, no compression, no encryption), "
         "driven by `scripts/peers/kcp_udp` with one datagram per KCP message: kcptun's own repository holds no "
         "code any more and its module is not served by the Go proxy. It is a different kind of tool: a reliable, "
         "ordered ARQ stream with FEC in front, so it loses nothing in the end and pays in delay and in "
         "retransmissions; its residual is near 0 by construction and the delay-budget columns are what to read. "
         "**groupwire tunnel defaults** is `groupwire tunnel` with no FEC flags (GMIAD, k = 20, `--block-wait 2ms`); "
         "**same code as UDPspeeder tuned** is `--fec static:Y --k 20 --block-wait 12ms`, the tuned row's code in "
         "groupwire's framing.",
         ""]
    if has_target:
        L.append("**groupwire tunnel --target-loss T --max-delay D** rows run the target-residual controller for "
                 "each target; each is judged on its own target in the summary. **groupwire tunnel --fec "
                 "sliding:target --target-loss T --max-delay D** rows run the same controller on the "
                 "sliding-window code (RFC 8681), judged the same way, in a summary of their own.\n")
    else:
        L.append("**The target-residual rows are missing**: this `groupwire tunnel` has no `--target-loss` / "
                 "`--max-delay` (`groupwire tunnel --help`; the controller is built on another branch). Rerun "
                 "`scripts/results.sh robustness-peers` once it is merged: the script adds a row "
                 "`--fec target --target-loss T --max-delay D` for T in {1%, 0.1%} and D in {10, 30, 100} ms to "
                 "every cell and judges each on its own target. Until then the summary judges the tunnel's "
                 "defaults.\n")
    tcols = [(tn, t, dn) for tn, t in TARGETS for dn, _ in BUDGETS]
    for cell, rows in results:
        link = rows[0]["link_loss"] if rows else 0
        L.append(f"## {cell[1]}: `{cell[2]}`\n")
        L.append(f"Long-run loss {chain_loss(cell[3]):.1%} (measured on the hop in the first row: {link:.2%}); "
                 f"tuned repairs Y = {tuned_repairs(cell[3])} per 20 (analytic block residual "
                 f"{block_residual(20, tuned_repairs(cell[3]), cell[3]):.4%}).\n")
        L.append("| row | args | residual | lost > 10 / 30 / 100 ms | wire × | reverse × | p50 / p99 / max ms | "
                 + " | ".join(f"{tn} in {dn}" for tn, _, dn in tcols) + " |")
        L.append("|---|---|---|---|---|---|---|" + "---|" * len(tcols))
        for r in rows:
            lat = r["lat"]
            late = " / ".join(f"{r['late'][dn]:.3%}" for dn, _ in BUDGETS)
            marks = " | ".join("✓" if meets(r, t, dn) else "✗" for _, t, dn in tcols)
            note = " (corrupt %d)" % r["corrupt"] if r["corrupt"] else ""
            L.append(f"| {r['name']} | `{' '.join(r['args']) or '-'}` | {r['residual']:.3%}{note} | {late} | "
                     f"{r['wire']:.3f} | {r['reverse']:.3f} | {ms(lat['p50'])} / {ms(lat['p99'])} / {ms(lat['max'])} | "
                     f"{marks} |")
        drops = sum(r["socket_drops"] for r in rows)
        if drops:
            L.append(f"\nThe host's kernel dropped {drops} datagrams on the emulator's sockets over this cell's rows "
                     "(receive buffers full: the shared machine's load, not the link model).")
        L.append("")
    L += summary(results, tcols, has_target)
    L.append("Numbers vary from run to run: the loss pattern is seeded (`--seed 1`, the same for every row), the "
             "processes' timing is not, and this 2-core machine was shared with other builds, which adds "
             "latency noise to every row alike.")
    return "\n".join(L)


def summary(results, tcols, has_target):
    """The goal's tables: for the block code's target rows (or the
    defaults), and for the sliding code's target rows when they ran."""
    L = summary_of(results, tcols, has_target, None)
    if any(r["judged"] and len(r["judged"]) == 3 for _, rows in results for r in rows):
        L += summary_of(results, tcols, has_target, "sliding")
    return L


def summary_of(results, tcols, has_target, code):
    """Per cell and target: the groupwire row judged (the block code's
    target row, or with `code` "sliding" the sliding code's), the cheapest
    peer row that meets it, and whether groupwire reaches the issue's goal
    there."""
    title = ("## Per cell and target: who meets it, who is cheaper" if code is None else
             "## The same with the sliding-window code (`--fec sliding:target`)")
    L = [title + "\n",
         "The issue's goal, per cell and target: groupwire meets the target where the peer does not, or uses less "
         "overhead (wire ×) and less delay (p99) where both meet it. **groupwire** is the target row for that "
         "target when it exists, else the tunnel's defaults; **peer** is the cheapest peer row (by wire ×) that "
         "meets it, UDPspeeder's tuned row and kcptun included; **cheapest overall** is the cheapest row of the "
         "cell that meets it, whatever the tool.\n",
         "| cell | target | groupwire (row) | wire × / p99 ms | meets | peer meeting it | wire × / p99 ms | "
         "cheapest overall | goal |",
         "|---|---|---|---|---|---|---|---|---|"]
    met = total = 0
    for cell, rows in results:
        for tn, t, dn in tcols:
            want = (tn, dn) if code is None else (tn, dn, code)
            gw = next((r for r in rows if r["judged"] == want), None) if has_target else None
            gw = gw or next((r for r in rows if r["name"] == "groupwire tunnel defaults"), None)
            peers = sorted((r for r in rows if r["kind"] != "gw" and meets(r, t, dn)),
                           key=lambda r: (r["wire"], r["lat"]["p99"]))
            every = sorted((r for r in rows if meets(r, t, dn)), key=lambda r: (r["wire"], r["lat"]["p99"]))
            if gw is None:
                continue
            ok = meets(gw, t, dn)
            peer = peers[0] if peers else None
            if ok and peer is None:
                goal = "**met** (peer misses)"
            elif ok and gw["wire"] <= peer["wire"] and gw["lat"]["p99"] <= peer["lat"]["p99"]:
                goal = "**met** (cheaper and faster)"
            elif ok:
                worse = [w for w, bad in (("overhead", gw["wire"] > peer["wire"]),
                                          ("p99", gw["lat"]["p99"] > peer["lat"]["p99"])) if bad]
                goal = "missed: more " + " and ".join(worse)
            elif peer is None:
                goal = "neither meets it"
            else:
                goal = "missed: peer meets it, groupwire not"
            met += goal.startswith("**met")
            total += 1
            fmt = lambda r: f"{r['wire']:.3f} / {ms(r['lat']['p99'])}"
            L.append(f"| {cell[1]} | {tn} in {dn} | {gw['name']} | {fmt(gw)} | {'✓' if ok else '✗'} | "
                     f"{peer['name'] if peer else 'none'} | {fmt(peer) if peer else '-'} | "
                     f"{every[0]['name'] if every else 'none'} | {goal} |")
    L.append("")
    L.append(f"The goal is met in {met} of {total} cell × target pairs"
             + ("." if has_target else
                ", judging the tunnel's defaults, which state no target (the target rows are missing, see above).")
             + "\n")
    return L


if __name__ == "__main__":
    main()
