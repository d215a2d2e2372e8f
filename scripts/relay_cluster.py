#!/usr/bin/env python3
"""Measures relay nodes on NATS JetStream on loopback and writes
docs/results/relay-cluster.md (issue 17).

  scripts/relay_cluster.py docs/results/relay-cluster.md          # about 4 minutes
  scripts/relay_cluster.py docs/results/relay-cluster.md --quick  # short phases (smoke test)

GW=path/to/groupwire picks the binary (default target/release/groupwire,
built first). One nats-server (JetStream, data in a temporary directory,
from scripts/nats.sh), 1 to 3 `groupwire relay serve --nats` processes and
the load generator (`groupwire relay bench`) all share this machine. Every
number in the page comes from this run.
"""
import datetime, json, os, platform, shutil, socket, subprocess, sys, tempfile, threading, time

OUT = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "docs/results/relay-cluster.md"
QUICK = "--quick" in sys.argv
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
GW = os.environ.get("GW") or f"{TARGET}/release/groupwire"
KILLS = 3 if QUICK else 10
REPEATS = 1 if QUICK else 3
COMMANDS = []


def dur(s):
    return "2s" if QUICK else s


def note(cmd):
    """Lists `cmd` among the page's commands (once)."""
    if cmd not in COMMANDS:
        COMMANDS.append(cmd)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, limit=30):
    for _ in range(limit * 20):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not listen on {port}")


class Nats:
    def __init__(self):
        binary = subprocess.run(["scripts/nats.sh"], capture_output=True, text=True, check=True).stdout.strip()
        self.dir = tempfile.mkdtemp(prefix="gw-nats-")
        port = free_port()
        self.url = f"nats://127.0.0.1:{port}"
        self.p = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, "nats-server")

    def stop(self):
        self.p.kill()
        self.p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Relay:
    """`groupwire relay serve` on a fixed port (so it can restart there)."""

    def __init__(self, store, port=None):
        self.store = store
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.start()

    def start(self):
        note("groupwire relay serve --listen ADDR --max-conns-per-ip 0 " + " ".join(
            "URL" if a.startswith("nats://") else ("DIR" if a.startswith("/") else a) for a in self.store))
        self.p = subprocess.Popen([GW, "relay", "serve", "--listen", self.addr, "--ready-json",
                                   "--max-conns-per-ip", "0"] + self.store,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.p.stdout.readline()
        if '"ready"' not in line:
            self.p.kill()
            raise SystemExit(f"relay did not start: {line!r}")

    def cpu_sec(self):
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill(self):
        self.p.kill()
        self.p.wait()


def bench(addrs, args, relays):
    js = tempfile.mktemp(suffix=".json")
    cmd = [GW, "relay", "bench", "fanout", "--relay", ",".join(addrs), "--quiet", "--json", js] + args
    note("groupwire relay bench fanout --relay " + ",".join(f"NODE{i + 1}" for i in range(len(addrs)))
         + " " + " ".join(args))
    cpu0 = [r.cpu_sec() for r in relays]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    cpu1 = [r2.cpu_sec() for r2 in relays]
    if r.returncode != 0:
        raise SystemExit(f"bench failed: {r.stderr}")
    j = json.load(open(js))
    os.unlink(js)
    phase = j["phases"][0]
    allc = phase["classes"].get("all") or next(iter(phase["classes"].values()))
    return {"deliv": phase["deliveries_per_sec"], "p50": allc["p50_ms"], "p99": allc["p99_ms"],
            "cpu": sum(b - a for a, b in zip(cpu0, cpu1))}


def fanout_rows():
    """1, 2 and 3 nodes on one nats-server, the same offered load."""
    load = ["--groups", "20", "--members", "30", "--rate", "20", "--duration", dur("15s"), "--warmup", "3s"]
    rows = []
    for n in (1, 2, 3):
        nats = Nats()
        relays = [Relay(["--nats", nats.url]) for _ in range(n)]
        try:
            res = bench([r.addr for r in relays], load, relays)
        finally:
            for r in relays:
                r.kill()
            nats.stop()
        # The load runs at the offered rate through warm-up and measurement;
        # the CPU time covers both (and the clients' connecting and joining).
        seconds = float(dur("15s")[:-1]) + 3.0
        res["n"] = n
        res["per_cpu"] = res["deliv"] * seconds / res["cpu"] if res["cpu"] else 0.0
        rows.append(res)
    return load, rows


def store_rows():
    """One node, one group of 10, SQLite (full sync) against JetStream,
    alternating, `REPEATS` times each: loopback tails move a lot between
    runs on a shared machine."""
    load = ["--groups", "1", "--members", "10", "--rate", "200", "--duration", dur("10s"), "--warmup", "2s"]
    rows = []
    for name in ("SQLite (--sync full)", "JetStream, one nats-server") * REPEATS:
        nats = None
        data = tempfile.mkdtemp(prefix="gw-sqlite-")
        if name.startswith("SQLite"):
            relay = Relay(["--data-dir", data])
        else:
            nats = Nats()
            relay = Relay(["--nats", nats.url])
        try:
            res = bench([relay.addr], load, [relay])
        finally:
            relay.kill()
            if nats:
                nats.stop()
            shutil.rmtree(data, ignore_errors=True)
        res["name"] = name
        rows.append(res)
    return load, rows


def frame(kind, request, body=b""):
    head = bytes([1, kind, 0, 0]) + request.to_bytes(4, "big")
    return (len(head) + len(body)).to_bytes(4, "big") + head + body


def name(s):
    b = s.encode()
    return len(b).to_bytes(2, "big") + b


class Sender:
    """A relay client written from docs/relay-protocol.md: joins `group`
    as a principal on `addr` and sends an update every `period` seconds;
    reads (and credits) everything the relay sends."""

    def __init__(self, addr, group, period):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.s.sendall(frame(0x01, 1, bytes([1]) + (0).to_bytes(4, "big") + name("") + name("sender")))
        self.s.sendall(frame(0x04, 2, name(group) + bytes([1, 1, 0])))
        self.group, self.period, self.stop = group, period, False
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.send, daemon=True).start()

    def read(self):
        consumed = 0
        while not self.stop:
            try:
                b = self.s.recv(65536)
            except OSError:
                return
            if not b:
                return
            consumed += len(b)
            self.s.sendall(frame(0x0d, 0, consumed.to_bytes(8, "big")))

    def send(self):
        i = 0
        while not self.stop:
            i += 1
            payload = f"u{i}".encode()
            body = name(self.group) + (1).to_bytes(2, "big") + (0).to_bytes(8, "big") + \
                len(payload).to_bytes(4, "big") + payload
            try:
                self.s.sendall(frame(0x09, 3, body))
            except OSError:
                return
            time.sleep(self.period)


def failover_times():
    """Kill -9 the node a watcher is on, `KILLS` times: time from the kill
    to the watcher's first delivery through the other node."""
    nats = Nats()
    a, b, c = Relay(["--nats", nats.url]), Relay(["--nats", nats.url]), Relay(["--nats", nats.url])
    subprocess.run([GW, "group", "--relay", c.addr, "create", "fo"], check=True, capture_output=True)
    time.sleep(0.5)
    sender = Sender(c.addr, "fo", 0.005)
    watch = subprocess.Popen([GW, "group", "--relay", f"{a.addr},{b.addr}", "watch", "fo", "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []  # (monotonic time, line)
    lock = threading.Condition()

    def reader():
        for line in watch.stdout:
            with lock:
                lines.append((time.monotonic(), line.strip()))
                lock.notify_all()

    threading.Thread(target=reader, daemon=True).start()

    def wait_for(pred, after, limit=30):
        end = time.monotonic() + limit
        with lock:
            while True:
                for t, l in lines[after:]:
                    if pred(l):
                        return t
                if time.monotonic() > end:
                    raise SystemExit("failover: the watcher did not go on within 30 s")
                lock.wait(0.1)

    times = []
    on = a  # the watcher starts on the first address
    try:
        wait_for(lambda l: l.startswith("#"), 0)
        for _ in range(KILLS):
            time.sleep(1.0)
            with lock:
                mark = len(lines)
            t0 = time.monotonic()
            on.kill()
            recon = wait_for(lambda l: l.startswith("reconnected to"), mark)
            with lock:
                mark2 = next(i for i, (t, _) in enumerate(lines) if t >= recon)
            t1 = wait_for(lambda l: l.startswith("#"), mark2)
            times.append((t1 - t0) * 1000)
            on.start()  # back on its port; the watcher is on the other node now
            on = b if on is a else a
    finally:
        sender.stop = True
        watch.kill()
        for r in (a, b, c):
            r.kill()
        nats.stop()
    note("groupwire group --relay NODE3 create fo")
    note("groupwire group --relay NODE1,NODE2 watch fo --quiet   # kill -9 of its node, "
         f"{KILLS} times; a client of NODE3 (in this script) sends an update every 5 ms")
    return sorted(times)


def pct(xs, q):
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    if not os.environ.get("GW"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "groupwire-cli"], check=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    fan_load, fan = fanout_rows()
    store_load, store = store_rows()
    fo = failover_times()
    cores = os.cpu_count()
    load_avg = os.getloadavg()[0]
    with open(OUT, "w") as f:
        w = lambda s="": f.write(s + "\n")
        w("# Relay nodes on NATS JetStream: throughput, latency, failover")
        w()
        w(f"Produced by `scripts/relay_cluster.py{' --quick' if QUICK else ''}` on "
          f"{started:%Y-%m-%d %H:%M} UTC, {platform.machine()}, {cores} cores, "
          f"load average {load_avg:.1f} at the end (the machine is shared with other builds). "
          f"Binary: `{GW}`"
          f"{' (set by `GW`: not necessarily a release build)' if 'release' not in GW else ''}. One nats-server (JetStream, file store in a temporary "
          "directory), the relay nodes and the load generator all run on these "
          f"{cores} cores, so the nodes compete with each other and with the load "
          "generator: the numbers say what the nodes cost, not what separate "
          "machines would deliver.")
        w()
        w("Commands:")
        w()
        w("```sh")
        for c in COMMANDS:
            w(c)
        w("```")
        w()
        w("## Fan-out with 1, 2 and 3 relay nodes")
        w()
        w("Every node runs `groupwire relay serve --nats URL`; the load generator "
          "spreads its clients over the nodes round robin (so most groups have "
          "members on every node, and every node follows every group's stream). "
          f"Offered load: `{' '.join(fan_load)}`, i.e. "
          "20 groups x 30 members x 20 msg/s = 12 000 deliveries/s.")
        w()
        w("Relay CPU: user + system time of all nodes over the whole bench run "
          "(warm-up and measurement, both at the offered load, plus the clients "
          "connecting), from /proc; deliveries per CPU-second = deliveries/s x "
          "that run time / that CPU time.")
        w()
        w("| nodes | deliveries/s | p50 ms | p99 ms | relay CPU s (all nodes) | deliveries per relay CPU-second |")
        w("|---|---|---|---|---|---|")
        for r in fan:
            w(f"| {r['n']} | {r['deliv']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['cpu']:.1f} | {r['per_cpu']:.0f} |")
        w()
        busy = max(r["cpu"] / (float(dur("15s")[:-1]) + 3.0) for r in fan)
        w(f"The offered load is the same in every row and far from saturating "
          f"(the nodes together used {busy:.2f} of a core at most), so this is "
          "not a capacity test: two cores cannot hold three saturated nodes, a "
          "nats-server and the load generator.")
        w()
        w("What more machines would give, modelled from the measured cost: with "
          "n nodes, each on its own one-core machine and loaded alike, the "
          "cluster delivers about n x (deliveries per relay CPU-second of the "
          "n-node row), since each node spends that much CPU per delivery "
          "(its share of the fan-out, plus following every group's stream "
          "and publishing its clients' updates). Following costs every node "
          "the same whatever its share of the members, so the cost per "
          "delivery can grow with n. The model assumes nats-server keeps up "
          "(each update is one publish, read once by every node), which these "
          "runs do not test.")
        w()
        w("| nodes | modelled deliveries/s on n one-core machines |")
        w("|---|---|")
        for r in fan:
            w(f"| {r['n']} | {r['n'] * r['per_cpu']:.0f} |")
        w()
        w("## The latency JetStream adds per update")
        w()
        w(f"One node, `{' '.join(store_load)}`: one sender, ten members.")
        w()
        w(f"Each store {REPEATS} times, alternating; every run is a row.")
        w()
        w("| store | deliveries/s | p50 ms | p99 ms |")
        w("|---|---|---|---|")
        for r in store:
            w(f"| {r['name']} | {r['deliv']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} |")
        med = lambda xs: sorted(xs)[len(xs) // 2]
        sq = [r for r in store if r["name"].startswith("SQLite")]
        js = [r for r in store if not r["name"].startswith("SQLite")]
        d50 = med([r["p50"] for r in js]) - med([r["p50"] for r in sq])
        d99 = med([r["p99"] for r in js]) - med([r["p99"] for r in sq])
        w()
        w(f"JetStream minus SQLite, medians of the runs: {d50:+.2f} ms at p50, {d99:+.2f} ms at p99 "
          f"({'JetStream is faster' if d50 < 0 else 'JetStream is slower'} at the median here). "
          "The two are not equally durable: SQLite's `full` sync waits for the "
          "disk on each commit, while JetStream acknowledges once its store "
          "has the write and syncs to disk only every two minutes by default "
          "(docs/relay-cluster.md, Durability). What JetStream adds is a "
          "loopback round trip to nats-server per update, and the node's "
          "storage thread publishes one update at a time.")
        w()
        w("## Failover time")
        w()
        w(f"A watcher (`groupwire group --relay NODE1,NODE2 watch`) and {KILLS} "
          "`kill -9`s of the node it is on (the killed node is restarted on its "
          "port after each, so the next kill can be of the other one); a sender "
          "on a third node sends an update every 5 ms. Failover time: from "
          "the kill to the watcher's first delivery through the other node "
          "(its reconnect, `Hello`, the resumed `Join` and the first update).")
        w()
        w(f"With {len(fo)} samples the p99 (nearest rank) is the largest sample; "
          "every sample is listed below the table.")
        w()
        w(f"| kills | p50 ms | p99 ms | min ms | max ms |")
        w("|---|---|---|---|---|")
        w(f"| {len(fo)} | {pct(fo, 0.5):.1f} | {pct(fo, 0.99):.1f} | {fo[0]:.1f} | {fo[-1]:.1f} |")
        w()
        w("Samples (ms, sorted): " + ", ".join(f"{x:.1f}" for x in fo))
        w()
        w("A killed node's socket is closed by the kernel, so the watcher sees "
          "the end of its connection at once and connects to the next address "
          "without waiting (the backoff applies from the second attempt). A node "
          "that vanishes without closing (a machine lost) is noticed after two "
          "keepalive periods instead (`ClientOptions::keepalive`, 60 s by "
          "default), which these runs do not measure.")
    print(open(OUT).read())


if __name__ == "__main__":
    main()
