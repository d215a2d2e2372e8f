#!/usr/bin/env python3
"""Bulk transfers on real sockets, side by side with kernel TCP (iperf3).

  scripts/bulk_bench.py docs/results/bulk-real.md

Called by `scripts/results.sh bulk-real` after a release build; every
number written comes from this run. Each case moves a file with
`groupwire bulk send/recv` (Reliable Blast UDP at a fixed and an adaptive
rate, striped TCP) and measures kernel TCP with iperf3 (one flow with
default buffers, and -P 8) on the same path in the same run:

- a lossless loopback path (raw speed, no emulator);
- Leigh et al.'s long fat path through `groupwire emulate shell` (the
  sender in a network namespace whose packets cross the simulator's link
  models through TUN devices): 100 Mbit/s each way, 75 ms each way
  (150 ms RTT), a 1000-packet drop-tail queue, and 0.1% or 1% random loss
  on the data direction.

Needs root (the shell's namespace), iperf3 (installed by scripts/iperf3.sh)
and about 12 minutes. Set SIZE_MB to change the 200 MB payload.

UDT (Gu & Grossman's UDP-based data transfer, the peer issue 14 names) is
measured too when UDT_DIR names a UDT4 build: a directory with
app/sendfile, app/recvfile and src/libudt.so. It is never part of this
repository; to build one outside it (UDT4 from any of its GitHub mirrors,
e.g. alanyee/udt, which builds with today's g++ as it is):

  git clone https://github.com/alanyee/udt /opt/udt && make -C /opt/udt os=LINUX arch=AMD64
  UDT_DIR=/opt/udt scripts/results.sh bulk-real

UDT's sendfile is the server holding the file and recvfile the client
fetching it, so for UDT the data crosses the shell's reverse link: its
rows put the random loss there (--reverse-loss) instead of on the forward
link, the same path otherwise.
"""
import datetime, json, os, shutil, subprocess, sys, tempfile, time

TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
GW = os.path.join(TARGET, "release", "groupwire")
SIZE = int(os.environ.get("SIZE_MB", "200")) * 1_000_000
# Kernel TCP runs are bounded in time (a single flow at 1% loss and 150 ms
# would need half an hour for 200 MB); iperf3 reports its rate.
IPERF_SECONDS = 20
# Striped TCP at 1% loss moves a smaller file for the same reason.
STRIPED_SIZE_AT = {"1%": 40_000_000}
PORT = 7700
# This host's default congestion control (striped TCP and iperf3 use it
# unless told otherwise); CUBIC rows are measured beside it.
DEFAULT_CC = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
IPERF_PORT = 5201

PATHS = [
    # (name, shell link args or None for plain loopback, RBUDP fixed rates
    #  (the paper's "just below the available bandwidth", at two margins),
    #  adaptive start rate)
    ("loopback, lossless", None, ["3Gbit/s"], "10Gbit/s"),
    ("100 Mbit/s, 150 ms RTT, 0.1% loss",
     ["--rate", "100Mbit/s", "--delay", "75ms", "--queue", "1000", "--loss", "bernoulli:0.001"],
     ["95Mbit/s", "99Mbit/s"], "200Mbit/s"),
    ("100 Mbit/s, 150 ms RTT, 1% loss",
     ["--rate", "100Mbit/s", "--delay", "75ms", "--queue", "1000", "--loss", "bernoulli:0.01"],
     ["95Mbit/s", "99Mbit/s"], "200Mbit/s"),
]


def run(args, timeout=600, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def in_path(link, inner):
    """The command `inner` (a shell string) run as the sender: in an
    emulated shell when `link` is given, else directly with the host at
    127.0.0.1."""
    if link is None:
        return ["sh", "-c", inner.replace("$GROUPWIRE_SHELL_HOST", "127.0.0.1")]
    return [GW, "emulate", "shell", "--quiet", *link, "--", "sh", "-c", inner]


def gw_bulk(tmp, link, src, via_args, size):
    """One `groupwire bulk` transfer; returns the sender's report."""
    out = os.path.join(tmp, "out.bin")
    stats = os.path.join(tmp, "send.json")
    for f in (out, stats):
        if os.path.exists(f):
            os.remove(f)
    recv = subprocess.Popen(
        [GW, "bulk", "recv", "--listen", f"0.0.0.0:{PORT}", "--out", out, "--quiet",
         "--ready-json", "--timeout", "60s", *recv_via(via_args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    json.loads(recv.stdout.readline())
    cmd = (f"{GW} bulk send {src} --to $GROUPWIRE_SHELL_HOST:{PORT} --quiet "
           f"--stats-json {stats} {' '.join(via_args)}")
    t0 = time.monotonic()
    sent = run(in_path(link, cmd), timeout=900)
    wall = time.monotonic() - t0
    _, rerr = recv.communicate(timeout=120)
    if sent.returncode != 0 or recv.returncode != 0:
        raise SystemExit(f"bulk {via_args}: send exit {sent.returncode}: {sent.stderr}\n"
                         f"recv exit {recv.returncode}: {rerr}")
    with open(stats) as f:
        r = json.load(f)
    if os.path.getsize(out) != size:
        raise SystemExit(f"bulk {via_args}: {os.path.getsize(out)} bytes arrived of {size}")
    r["wall"] = wall
    return r


def recv_via(via_args):
    """The receiver's --via for a sender's arguments."""
    via = via_args[via_args.index("--via") + 1] if "--via" in via_args else "rbudp"
    return ["--via", "rbudp" if via == "rbudp" else "tcp"]


def iperf(link, streams, cc=None):
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(IPERF_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    cmd = f"iperf3 -c $GROUPWIRE_SHELL_HOST -p {IPERF_PORT} -P {streams} -t {IPERF_SECONDS} -J"
    if cc:
        cmd += f" -C {cc}"
    r = run(in_path(link, cmd), timeout=IPERF_SECONDS + 120)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
    if r.returncode != 0:
        raise SystemExit(f"iperf3 -P {streams}: exit {r.returncode}: {r.stdout[-500:]} {r.stderr}")
    end = json.loads(r.stdout)["end"]
    return end["sum_received"]["bits_per_second"], end["sum_received"]["bytes"]


UDT_DIR = os.environ.get("UDT_DIR")
UDT_PORT = 9000


def has_udt():
    return bool(UDT_DIR) and all(
        os.path.exists(os.path.join(UDT_DIR, f))
        for f in ("app/sendfile", "app/recvfile", "src/libudt.so"))


def udt(tmp, link, src, size):
    """One UDT4 transfer of `src`: sendfile serving it on the host,
    recvfile fetching it through the path (loss on the data direction);
    returns the rate over recvfile's whole run (connect included)."""
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(UDT_DIR, "src"))
    server = subprocess.Popen([os.path.join(UDT_DIR, "app/sendfile"), str(UDT_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        time.sleep(0.5)
        out = os.path.join(tmp, "udt.bin")
        if os.path.exists(out):
            os.remove(out)
        if link:
            # The data flows host -> shell: move the loss to that direction.
            at = link.index("--loss")
            link = link[:at] + ["--reverse-loss", link[at + 1]] + link[at + 2:]
        inner = (f"export LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']}; "
                 f"t0=$(date +%s.%N); {os.path.join(UDT_DIR, 'app/recvfile')} "
                 f"$GROUPWIRE_SHELL_HOST {UDT_PORT} {src} {out} >/dev/null && "
                 f"t1=$(date +%s.%N) && echo $t0 $t1")
        r = run(in_path(link, inner), timeout=600)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) != size:
            raise SystemExit(f"udt: exit {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")
        t0, t1 = map(float, r.stdout.split()[-2:])
        return size * 8 / (t1 - t0), t1 - t0
    finally:
        server.kill()
        server.wait()


def has_striped():
    return "striped" in run([GW, "bulk", "send", "--help"]).stdout


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out_md = sys.argv[1]
    # The commit whose build runs (read before anything can move HEAD).
    commit = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    iperf3 = run(["scripts/iperf3.sh"]).stdout.strip()
    if not iperf3:
        raise SystemExit("iperf3 is missing and could not be installed (scripts/iperf3.sh)")
    tmp = tempfile.mkdtemp(prefix="gw-bulk-")
    try:
        sizes = {SIZE}
        sizes.update(STRIPED_SIZE_AT.values())
        files = {}
        for s in sorted(sizes):
            path = os.path.join(tmp, f"payload-{s}.bin")
            with open(path, "wb") as f:
                left = s
                while left:
                    n = min(left, 1 << 22)
                    f.write(os.urandom(n))
                    left -= n
            files[s] = path
        striped = has_striped()
        rows = []
        for name, link, fixed_rates, start in PATHS:
            loss = name.rsplit(", ", 1)[-1].split(" ")[0]
            cases = [(f"groupwire RBUDP, fixed {fixed}", ["--via", "rbudp", "--rate", fixed], SIZE)
                     for fixed in fixed_rates]
            cases.append((f"groupwire RBUDP, adaptive from {start}",
                          ["--via", "rbudp", "--rate", start, "--adaptive"], SIZE))
            if striped and link:
                # N and buffers from the path's bandwidth-delay product.
                ssize = STRIPED_SIZE_AT.get(loss, SIZE)
                cases.append(("groupwire striped TCP, N from the BDP",
                              ["--via", "striped", "--rate", "100Mbit/s", "--rtt", "150ms"], ssize))
            elif striped:
                cases.append(("groupwire striped TCP", ["--via", "striped:4"], SIZE))
            for label, via_args, size in cases:
                print(f"{name}: {label} ...", file=sys.stderr, flush=True)
                r = gw_bulk(tmp, link, files[size], via_args, size)
                if "streams" in r:
                    label += f" ({r['streams']} connections)"
                rows.append((name, label, size, r["effective_bps"],
                             str(r.get("nak_rounds", "")) if "rbudp" in via_args else "",
                             f"{r['seconds']:.1f}"))
            if has_udt():
                label = "UDT4 sendfile/recvfile (built outside the repository)"
                print(f"{name}: {label} ...", file=sys.stderr, flush=True)
                bps, secs = udt(tmp, link, files[SIZE], SIZE)
                rows.append((name, label, SIZE, bps, "", f"{secs:.1f}"))
            for streams, cc in [(1, None), (1, "cubic"), (8, "cubic")]:
                label = (f"kernel TCP ({cc or DEFAULT_CC}), "
                         + ("one flow, default buffers (iperf3 -P 1)" if streams == 1
                            else f"{streams} flows (iperf3 -P {streams})"))
                print(f"{name}: {label} ...", file=sys.stderr, flush=True)
                bps, nbytes = iperf(link, streams, cc)
                rows.append((name, label, nbytes, bps, "", f"{IPERF_SECONDS} (bounded)"))
        write(out_md, rows, striped, commit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write(path, rows, striped, commit):
    lines = [
        "# Bulk transfers on real sockets, beside kernel TCP",
        "",
        "Produced by `scripts/results.sh bulk-real` (which runs `scripts/bulk_bench.py`) "
        f"on {datetime.date.today()} at commit {commit}, on this project's 2-core machine, "
        "sender and receiver on the same host.",
        "",
        "Each row moved its payload once in the same run. The emulated paths put the sender in "
        "a network namespace behind `groupwire emulate shell` (the simulator's link models on "
        "TUN devices, in userspace): 100 Mbit/s each way, 75 ms each way, a 1000-packet "
        "drop-tail queue, and random loss on the data direction. Effective rate: payload bits "
        "over the whole transfer (groupwire: from the sender's first message to the receiver's "
        "confirmation of the BLAKE3 hash, as its `--stats-json` reports; iperf3: its received "
        f"rate over a {IPERF_SECONDS} s run, since one kernel flow at 1% loss would need "
        "far longer than a bench can wait for the whole payload).",
        "",
        f"Kernel TCP on this host defaults to {DEFAULT_CC.upper()} (`net.ipv4.tcp_congestion_control`), "
        "which groupwire's striped TCP also uses. "
        + ("BBR paces to the bottleneck's rate and does not take random loss for congestion, "
           "so one BBR flow keeps most of a lossy link; the paper's TCP (and CUBIC, the default "
           "on most hosts) halves or cuts its window at each loss, so the CUBIC rows show what "
           "the paper's LFN problem looks like on today's loss-based TCP. "
           if DEFAULT_CC == "bbr" else "")
        + "The LFN table of the simulator ([bulk.md](bulk.md)) models loss-based TCP.",
        "",
        "| path | mechanism | payload (MB) | effective rate (Mbit/s) | NAK rounds | seconds |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, label, size, bps, naks, secs in rows:
        lines.append(f"| {name} | {label} | {size / 1e6:.1f} | {bps / 1e6:.1f} | {naks} | {secs} |")
    lines += [""]
    if not striped:
        lines += ["Striped TCP is not in this build's `groupwire bulk send`; its rows are missing.", ""]
    if has_udt():
        lines += [
            "UDT4 (Gu & Grossman's UDP-based data transfer, with its own rate-based congestion "
            f"control) was built outside the repository from `{UDT_DIR}` (how: the docstring of "
            "`scripts/bulk_bench.py`); its rate is the file's bits over `recvfile`'s whole run, "
            "connection set-up included. Its `sendfile` serves the file, so on the emulated "
            "paths its data crossed the reverse link, where its rows put the same random loss.",
            "",
            "Not compared: Tsunami UDP (no package or buildable source reachable here).",
            "",
        ]
    else:
        lines += [
            "Not compared: UDT's `sendfile`/`recvfile` (set UDT_DIR to a UDT4 build to add its "
            "rows; see `scripts/bulk_bench.py`) and Tsunami UDP (no package or buildable source "
            "reachable here).",
            "",
        ]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
