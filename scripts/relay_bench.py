#!/usr/bin/env python3
"""Measures `groupwire relay` on loopback and writes docs/results/relay.md.

  scripts/relay_bench.py docs/results/relay.md            # everything, about 20 minutes
  scripts/relay_bench.py docs/results/relay.md --quick    # short phases (smoke test)

Called by `scripts/results.sh relay` after a release build. The relay runs
as its own process pinned to CPU 0 (`taskset -c 0`), the load generator
(`groupwire relay bench`) on CPU 1. Each scenario runs against a fresh
relay with its priorities (the paper's adaptive server) and against one
with `--equal-priorities` (the paper's non-QoS server). nats-server, from
scripts/nats.sh, is the fan-out yardstick. Every number in the page comes
from this run; the paper's numbers are quoted from its text.
"""
import csv, datetime, json, os, platform, shutil, subprocess, sys, tempfile

GW = "target/release/groupwire"
OUT = sys.argv[1] if len(sys.argv) > 1 else "docs/results/relay.md"
QUICK = "--quick" in sys.argv
PLOTS = os.path.splitext(OUT)[0]
MODES = [("adaptive", []), ("equal", ["--equal-priorities"])]
COMMANDS = []
# Loopback latency tails on this 2-core machine move a lot between runs
# (the host's other tenants, CPU frequency); the isolation and chat goals
# are judged on the median of this many runs, each shown.
REPEATS = 1 if "--quick" in sys.argv else 3
# Isolation: firehose messages/s. 5000 (250 000 deliveries/s of 1000 B) is
# what the bench's one core can read, so latencies are the relay's; 20000
# (1 million offered) saturates both cores, and then they include the
# bench's own queueing.
FIREHOSE_RATES = [5000, 20000]
# Bytes in flight to a client are head-of-line delay for its next message;
# the isolation clients ask for small send windows, as latency-sensitive
# clients should (the relay's default is 256 KiB).
ISO_WINDOW = "32768"


def dur(s):
    return "2s" if QUICK else s


def start_relay(extra, cpus="0"):
    # Every bench client comes from 127.0.0.1: no per-address limit.
    args = ["taskset", "-c", cpus, GW, "relay", "serve", "--memory", "--listen", "127.0.0.1:0",
            "--max-conns-per-ip", "0", "--ready-json"] + extra
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    try:
        return p, json.loads(line)["tcp"]
    except (json.JSONDecodeError, KeyError):
        p.kill()
        raise SystemExit(f"relay did not start: {line!r}")


def start_nats():
    binary = subprocess.run(["scripts/nats.sh"], capture_output=True, text=True, check=True).stdout.strip()
    port = "17422"
    p = subprocess.Popen(["taskset", "-c", "0", binary, "-a", "127.0.0.1", "-p", port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import socket, time
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    ver = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    return p, f"127.0.0.1:{port}", ver


def stop(p):
    p.kill()
    p.wait()


def bench(tmp, name, relay_extra, args, target="relay", cpus="0"):
    """Runs one bench against a fresh relay (or nats-server); returns its JSON and series CSV rows."""
    if target == "nats":
        p, addr, _ = start_nats()
    else:
        p, addr = start_relay(relay_extra, cpus)
    js, sc = os.path.join(tmp, name + ".json"), os.path.join(tmp, name + ".csv")
    cmd = [GW, "relay", "bench"] + args + ["--relay", addr, "--relay-pid", str(p.pid), "--quiet",
                                            "--json", js, "--series-csv", sc]
    if target == "nats":
        cmd += ["--target", "nats"]
    shown_relay = "nats-server -a 127.0.0.1" if target == "nats" else \
        " ".join(["groupwire relay serve --memory --max-conns-per-ip 0"] + relay_extra)
    COMMANDS.append(f"taskset -c {cpus} {shown_relay} & taskset -c 1 groupwire relay bench "
                    + " ".join(args) + (" --target nats" if target == "nats" else "") + " --relay-pid PID")
    try:
        r = subprocess.run(["taskset", "-c", "1"] + cmd, capture_output=True, text=True, timeout=900)
    finally:
        stop(p)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    sys.stderr.write(r.stdout)
    rows = list(csv.DictReader(open(sc))) if os.path.exists(sc) else []
    return json.load(open(js)), rows


# The fan-out loads. Broadcast at 50 and 100 msg/s leaves both servers
# below one core, so deliveries per CPU-second compare their costs; at 500
# and 1000 both use all of theirs, and per CPU-second is just what gets
# through. The chat goal is judged on CHAT's row.
CHAT = "chat 1000 x 10, 5 msg/s per group"
# The same chat with a tenth of the groups: both servers nearly idle, so
# its p99 is the floor the bench and this machine measure at all.
FLOOR = "chat 100 x 10, 5 msg/s per group"
FAN = [(f"broadcast 1 x 1000, {r} msg/s", ["--groups", "1", "--members", "1000", "--rate", str(r)])
       for r in (50, 100, 500, 1000)] + \
      [(FLOOR, ["--groups", "100", "--members", "10", "--rate", "5"]),
       (CHAT, ["--groups", "1000", "--members", "10", "--rate", "5"]),
       ("chat 1000 x 10, 20 msg/s per group", ["--groups", "1000", "--members", "10", "--rate", "20"])]
CHAT_ROW = [label for label, _ in FAN].index(CHAT)
FLOOR_ROW = [label for label, _ in FAN].index(FLOOR)
# Goals of issue 17: deliveries per server CPU-second against nats-server
# on the same load, and the chat-like p99.
PER_CPU_GOAL = 2.0
# The relay with one worker thread, and with two on both cores (the bench
# still on CPU 1: the relay gets what the bench leaves of it), on these loads.
THREADS = [("threads1", "relay --threads 1", ["--threads", "1"], "0"),
           ("threads2", "relay --threads 2, CPUs 0-1", ["--threads", "2"], "0,1")]
THREAD_LOADS = ["broadcast 1 x 1000, 1000 msg/s", CHAT]
CHAT_P99_GOAL_MS = 2.0


def median_run(runs):
    """The run with the median p99 (all deliveries) of several, with every run's p99."""
    p99 = lambda r: cls(r[0]["phases"][0], "all").get("p99_ms") or 0.0
    ordered = sorted(runs, key=p99)
    j, rows = ordered[len(ordered) // 2]
    j["all_p99_ms"] = [p99(r) for r in runs]
    return j, rows


def ms(x):
    return f"{x:.2f}" if x is not None else "-"


def late(phase):
    """The share of a phase's sends the bench itself sent over 1.5 ms late."""
    sends = phase.get("sends") or 0
    return f"{100 * phase.get('sends_late', 0) / sends:.1f}%" if sends else "-"


def cls(phase, c):
    return phase["classes"].get(c, {})


def cells(c, keys=("p50_ms", "p99_ms", "max_ms")):
    """A class's latency summary as table cells."""
    return " | ".join(ms(c.get(k)) for k in keys)


def by_mode(res, key, classes):
    """For each relay of MODES: its mode, the summaries of `classes` in the
    first phase of its `key` run, and that run's latency series."""
    for mode, _ in MODES:
        j, series = res[(key, mode)]
        p = j["phases"][0]
        yield mode, [cls(p, c) for c in classes], series


def main():
    os.makedirs(PLOTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="relaybench")
    res = {}
    # Fig. 5, 6, 7: the paper's setups.
    for mode, extra in MODES:
        res[("burst", mode)] = bench(tmp, f"burst-{mode}", extra,
                                     ["burst", "--duration", dur("20s"), "--warmup", "2s"])
        res[("group-size", mode)] = bench(tmp, f"gs-{mode}", extra,
                                          ["group-size", "--sizes", "2,10,20,50,100,200,500",
                                           "--duration", dur("5s"), "--warmup", "1s"])
        res[("roles", mode)] = bench(tmp, f"roles-{mode}", extra,
                                     ["roles", "--duration", dur("20s"), "--warmup", "2s"])
        # Fig. 5 and 7 with the relay saturated: the same groups next to a
        # fan-out load the relay cannot keep up with, so queues form.
    for rate in FIREHOSE_RATES:
        for k in range(REPEATS):
            for mode, extra in MODES:
                res[("isolation", rate, mode, k)] = bench(
                    tmp, f"iso{rate}-{mode}-{k}", extra,
                    ["isolation", "--members", "50", "--firehose-rate", str(rate),
                     "--window", ISO_WINDOW, "--duration", dur("10s"), "--warmup", "2s"])
    for mode, extra in MODES:
        res[("slow", mode)] = bench(tmp, f"slow-{mode}", extra,
                                    ["slow-member", "--members", "1000", "--duration", dur("10s"),
                                     "--warmup", "3s"])
    fan = FAN
    for i, (label, args) in enumerate(fan):
        for mode, extra in MODES + [("nats", None)]:
            # The chat goal is judged on a median: repeat that row.
            runs = REPEATS if i == CHAT_ROW and mode != "nats" else 1
            res[("fanout", i, mode)] = median_run([bench(
                tmp, f"fan{i}-{mode}-{k}", extra or [],
                ["fanout"] + args + ["--duration", dur("10s"), "--warmup", "3s"],
                target="nats" if mode == "nats" else "relay") for k in range(runs)])
        if label in THREAD_LOADS:
            for mode, _, extra, cpus in THREADS:
                res[("fanout", i, mode)] = bench(
                    tmp, f"fan{i}-{mode}", extra,
                    ["fanout"] + args + ["--duration", dur("10s"), "--warmup", "3s"], cpus=cpus)
    nats_ver = start_nats()
    stop(nats_ver[0])
    write(res, fan, nats_ver[2], tmp)
    shutil.rmtree(tmp)


def figure(tmp, name, fields, rows, **kw):
    """Writes `rows` to a CSV, plots it to PLOTS/NAME.png and returns the page's image lines."""
    csvfile = os.path.join(tmp, f"{name}.csv")
    with open(csvfile, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    plot(csvfile, f"{PLOTS}/{name}.png", **kw)
    return ["", f"![{name}]({os.path.basename(PLOTS)}/{name}.png)", ""]


def latency_figure(tmp, name, fields, rows, split, title):
    """`figure` of each message's latency against its number, one series
    per value of the field `split`."""
    return figure(tmp, name, fields, rows, x="msg", y="latency_ms", split=split, points=True,
                  title=title, x_label="message", y_label="latency (ms)")


def plot(csvfile, png, **kw):
    args = [GW, "plot", "--csv", csvfile, "--out", png]
    for k, v in kw.items():
        if v is True:
            args.append("--" + k.replace("_", "-"))
        else:
            args += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run(args, check=True)


def write(res, fan, nats_ver, tmp):
    L = []
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    L += ["# relay: the paper's figures and throughput on loopback", "",
          "Produced by `scripts/results.sh relay` (`scripts/relay_bench.py`) on "
          f"{datetime.date.today()}, {cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}. "
          "The relay (`groupwire relay serve --memory`) runs pinned to CPU 0, the load "
          "generator (`groupwire relay bench`) to CPU 1; both on 127.0.0.1. Every scenario "
          "runs twice on fresh relays: **adaptive** is the relay as shipped (group and member "
          "priorities, burst demotion, aging: Litiu & Prakash §4), **equal** is "
          "`--equal-priorities`, the paper's non-QoS server. Latency is one way, from send to "
          "receipt, for every receiver (HdrHistogram); publishers are open loop. A message "
          "counts from its *scheduled* send time when the server held its publisher up (a "
          "write that had to wait for the server to read, after the message was due: "
          "coordinated omission), and from when it went out otherwise: the bench's own timer "
          "(tokio's 1 ms wheel wakes a publisher up to about 2 ms late) is not the server's "
          "latency, and *bench late* in the throughput table is the share of sends that went "
          "out over 1.5 ms late for the bench's own reasons.", "",
          "**Setup differences from the paper (§5).** The paper's server was Java on a Sun "
          "Sparc 20 with clients on Sparcs across a 1999 LAN, and measured the round trip "
          "seen by the sending client; ours is Rust on loopback with one core for the relay "
          "and one for all clients, and measures one way to every member. The paper's "
          "latencies are dominated by its thread scheduling (their §5.2); at its loads our "
          "relay is almost idle, so priorities only show once queues form, which is what the "
          "isolation, slow-member and saturated fan-out runs add. At the paper's loads, "
          "differences of a millisecond or two between the modes' medians are within the "
          "run-to-run variation of one relay binary (a re-run of the same scenario moves a "
          "group's median by that much), so read Figs. 5-7 by their tails. `--memory` storage: "
          "updates are not written to SQLite (the shipped default), so these are the "
          "scheduler's and the network path's costs, not the disk's; the memory engine runs "
          "inside the relay's core task, where SQLite has a thread of its own. "
          "Priorities apply where the relay's work is scarce: input is taken at the priority "
          "of the groups a client is principal in (§4.5), output queue by queue (§4.5, §4.6).", ""]

    # Fig. 5
    L += ["## Fig. 5: a chat group next to bursts of 5 x 40 KB", "",
          "Two groups of 6; in one, a member sends 5 messages/s of 200 B; in the other, a "
          "member sends 5 x 40 000 B every 2 s. The paper gives this result as a plot only "
          "(the adaptive server's chat latency is lower and steadier than the non-QoS "
          "server's); its text has no numbers.", "",
          "| relay | chat p50 ms | chat p99 ms | chat max ms | image p50 ms | image p99 ms |",
          "|---|---|---|---|---|---|"]
    rows = []
    for mode, (c, im), series in by_mode(res, "burst", ("chat", "image")):
        L.append(f"| {mode} | {cells(c)} | {cells(im, ('p50_ms', 'p99_ms'))} |")
        rows += [dict(r, mode=mode) for r in series]
    L += latency_figure(tmp, "fig5", ["mode", "probe", "msg", "t_s", "latency_ms"], rows, "mode",
                        "Fig. 5: chat sender's latency (own messages) during 40 KB bursts")

    # Fig. 6
    L += ["## Fig. 6: a 2-member high-priority group while another grows", "",
          "Both groups have one sender at 5 messages/s of 200 B; the small group has "
          "priority 6, the growing one 2 (ignored by the equal relay). The paper (plot only) "
          "finds the non-QoS server's latency growing about linearly with the other group's "
          "size for *both* groups, and the adaptive server protecting the small group. Its "
          "§5.4 quotes round trips of about 150 ms for 1 client and 1400 ms for 100 clients "
          "before tuning, 22 ms and 200 ms after.", "",
          "| size of the other group | small mean ms (adaptive) | small mean ms (equal) | "
          "large mean ms (adaptive) | large mean ms (equal) | large p99 ms (adaptive) | large p99 ms (equal) |",
          "|---|---|---|---|---|---|---|"]
    f6rows = []
    ga, ge = res[("group-size", "adaptive")][0], res[("group-size", "equal")][0]
    for pa, pe in zip(ga["phases"], ge["phases"]):
        n = int(pa["params"]["size"])
        L.append(f"| {n} | {ms(cls(pa, 'small').get('mean_ms'))} | {ms(cls(pe, 'small').get('mean_ms'))} "
                 f"| {ms(cls(pa, 'large').get('mean_ms'))} | {ms(cls(pe, 'large').get('mean_ms'))} "
                 f"| {ms(cls(pa, 'large').get('p99_ms'))} | {ms(cls(pe, 'large').get('p99_ms'))} |")
        for mode, p in (("adaptive", pa), ("equal", pe)):
            f6rows.append({"mode": mode, "size": n, "small": cls(p, "small").get("mean_ms"),
                           "large": cls(p, "large").get("mean_ms")})
    L += figure(tmp, "fig6", ["mode", "size", "small", "large"], f6rows,
                x="size", y="small,large", split="mode", points=True,
                title="Fig. 6: mean latency vs the size of the other group",
                x_label="members in the growing group", y_label="mean latency (ms)")

    # Fig. 7
    L += ["## Fig. 7: high- and low-priority members of one 20-member group", "",
          "One sender at 3 messages/s of 200 B; the other 19 members alternate between high "
          "priority (principal, active) and low (observer, passive).", "",
          "| relay | high p50 ms | high p99 ms | high max ms | low p50 ms | low p99 ms | low max ms | paper (round trip) |",
          "|---|---|---|---|---|---|---|---|"]
    paper7 = {"adaptive": "high 150-300 ms, low 250-400 ms", "equal": "150-400 ms"}
    rows = []
    for mode, (h, lo), series in by_mode(res, "roles", ("high", "low")):
        L.append(f"| {mode} | {cells(h)} | {cells(lo)} | {paper7[mode]} |")
        rows += [dict(r, probe=f"{mode}: {r['probe']}") for r in series]
    L += latency_figure(tmp, "fig7", ["probe", "msg", "t_s", "latency_ms"], rows, "probe",
                        "Fig. 7: latency of a high- and a low-priority member")

    # Isolation
    L += ["## Isolation: 20 low-rate groups next to a firehose", "",
          "50 clients, each in one firehose group (one sender, 1000 B messages) and in 20 "
          "low-rate groups (one sender each, 5 messages/s of 200 B). Each client asks for a "
          f"{int(ISO_WINDOW) // 1024} KiB send window (bytes in flight are head-of-line delay "
          "for the next message). Goal: the low-rate groups' p99 with the firehose within 2x "
          "of their p99 without it. Two firehose rates: 5000 messages/s (250 000 deliveries/s, "
          "what the bench's one core can read: the latencies are the relay's) and 20 000 "
          "(1 million offered: more than either core carries, so latencies also include the "
          "bench's own queueing). Each setting runs "
          f"{REPEATS} times, alternating relays; the verdict is on the median ratio.", "",
          "| firehose msg/s | relay | low-rate p99 ms, unloaded | low-rate p99 ms, firehose on | ratio | firehose deliveries/s | resyncs | clients dropped | relay RSS max MiB |",
          "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for rate in FIREHOSE_RATES:
        for mode, _ in MODES:
            ratios = []
            for k in range(REPEATS):
                j = res[("isolation", rate, mode, k)][0]
                u, l = j["phases"][0], j["phases"][1]
                pu, pl = cls(u, "low-rate").get("p99_ms"), cls(l, "low-rate").get("p99_ms")
                ratio = pl / pu if pu and pl else None
                fh = cls(l, "firehose").get("count", 0) / l["seconds"]
                if fh > 0 and ratio is not None:
                    ratios.append(ratio)
                rss = f"{l['relay_rss_max_kib'] / 1024:.1f}" if l.get("relay_rss_max_kib") else "-"
                shown = f"{ratio:.1f}x" if ratio is not None else "-"
                if fh == 0:
                    shown += " (no firehose traffic: not a measurement)"
                L.append(f"| {rate} | {mode} | {ms(pu)} | {ms(pl)} | {shown} | {fh:.0f} "
                         f"| {l['resyncs']} | {l['disconnects']} | {rss} |")
            med = sorted(ratios)[len(ratios) // 2] if ratios else None
            verdicts.append((rate, mode, med, len(ratios)))
    L.append("")
    for rate, mode, med, n in verdicts:
        L.append(f"- {rate} msg/s, {mode}: median ratio "
                 + (f"{med:.1f}x over {n} runs: {'met' if med <= 2 else 'missed'}." if med is not None
                    else "not measured (no run carried firehose traffic)."))
    L.append("")

    # Slow member
    L += ["## Slow member: one of 1000 reads at 10 KB/s", "",
          "One group of 1000; one sender at 20 messages/s of 1000 B (20 000 deliveries/s, "
          "about 21 KB/s to each member). In the second phase one member reads only "
          "10 000 B/s. Goal: the other members' p99 moves by at most 20%, and the relay's "
          "memory (VmRSS from /proc/PID/status, sampled every 250 ms) stays bounded.", "",
          "| relay | others p99 ms, all fast | others p99 ms, one slow | change | goal (<= 20%) | relay RSS max MiB, all fast | relay RSS max MiB, one slow | slow member's p50 ms |",
          "|---|---|---|---|---|---|---|---|"]
    for mode, _ in MODES:
        j = res[("slow", mode)][0]
        a, b = j["phases"][0], j["phases"][1]
        pa, pb = cls(a, "others").get("p99_ms"), cls(b, "others").get("p99_ms")
        ch = (pb - pa) / pa if pa and pb else None
        rss = lambda p: f"{p['relay_rss_max_kib'] / 1024:.1f}" if p.get("relay_rss_max_kib") else "-"
        L.append(f"| {mode} | {ms(pa)} | {ms(pb)} | {ch * 100:+.0f}% | {'met' if ch is not None and ch <= 0.2 else 'missed'} "
                 f"| {rss(a)} | {rss(b)} | {ms(cls(b, 'slow').get('p50_ms'))} |")
    L.append("")

    # Throughput
    L += ["## Throughput: fan-out deliveries per second", "",
          f"Each row offers the load in its name for 10 s (after 3 s of warm-up). "
          f"*relay CPU* is the relay process's utime + stime over the phase (/proc/PID/stat) "
          f"divided by its length; *per CPU-s* is deliveries per relay CPU-second. "
          f"nats-server ({nats_ver}) gets the same clients, subjects for groups, driven by "
          f"the same bench over NATS's text protocol (`--target nats`; a minimal PUB/SUB/MSG "
          f"client in the bench, not the async-nats crate). *vs nats* is the row's per CPU-s "
          f"over nats-server's on the same load. *relay --threads 1* runs the relay's runtime "
          f"with one worker thread instead of one per CPU (two); *relay --threads 2, CPUs 0-1* "
          f"lets its two threads use both cores while the bench stays on CPU 1, so the relay "
          f"gets what the bench leaves (its CPU can pass 100%). Goals: at least {PER_CPU_GOAL:g}x nats-server's "
          f"deliveries per server CPU-second, and p99 under {CHAT_P99_GOAL_MS:g} ms for the "
          f"chat-like case. Where both servers use all of their core (100%), per CPU-s is only "
          f"what gets through, and the bench's one core reads about 1 million deliveries/s: "
          f"the rows below one core compare costs.", "",
          "| load | server | deliveries/s | p50 ms | p99 ms | p99.9 ms | relay CPU | per CPU-s | vs nats | bench CPU | bench late |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    per_cpu = lambda i, m: res[("fanout", i, m)][0]["phases"][0].get("deliveries_per_relay_cpu_sec")
    ratios = {}
    names = {"adaptive": "relay", "equal": "relay --equal-priorities", "nats": "nats-server"}
    names.update({mode: name for mode, name, _, _ in THREADS})
    for i, (label, _) in enumerate(fan):
        for mode in ("adaptive", "equal", "nats") + tuple(m for m, _, _, _ in THREADS):
            if ("fanout", i, mode) not in res:
                continue
            p = res[("fanout", i, mode)][0]["phases"][0]
            c = cls(p, "all")
            server = names[mode]
            pct = lambda x: f"{x * 100:.0f}%" if x is not None else "-"
            per, base = per_cpu(i, mode), per_cpu(i, "nats")
            ratio = per / base if per and base else None
            ratios[(i, mode)] = ratio
            vs = "" if mode == "nats" else (f"{ratio:.2f}x" if ratio else "-")
            L.append(f"| {label} | {server} | {p['deliveries_per_sec']:.0f} | {ms(c.get('p50_ms'))} "
                     f"| {ms(c.get('p99_ms'))} | {ms(c.get('p999_ms'))} | {pct(p.get('relay_cpu_util'))} "
                     f"| {per:.0f} | {vs} | {pct(p.get('bench_cpu_util'))} | {late(p)} |" if per else
                     f"| {label} | {server} | {p['deliveries_per_sec']:.0f} | - | - | - | - | - | - | - | - |")
    met = [label for i, (label, _) in enumerate(fan) if (ratios[(i, "adaptive")] or 0) >= PER_CPU_GOAL]
    missed = [f"{label} ({ratios[(i, 'adaptive')]:.2f}x)" if ratios[(i, "adaptive")] else label
              for i, (label, _) in enumerate(fan) if (ratios[(i, "adaptive")] or 0) < PER_CPU_GOAL]
    chat_p99 = {m: cls(res[("fanout", CHAT_ROW, m)][0]["phases"][0], "all").get("p99_ms") for m in ("adaptive", "equal")}
    floor_p99 = {m: cls(res[("fanout", FLOOR_ROW, m)][0]["phases"][0], "all").get("p99_ms")
                 for m in ("adaptive", "nats")}
    chat_all = {m: ", ".join(ms(x) for x in res[("fanout", CHAT_ROW, m)][0].get("all_p99_ms", []))
                for m in ("adaptive", "equal")}
    L += ["",
          f"- Per CPU-second goal (at least {PER_CPU_GOAL:g}x nats-server, relay as shipped): "
          f"met on {', '.join(met) or 'no load'}; missed on {', '.join(missed) or 'no load'}.",
          f"- Chat-like goal (p99 < {CHAT_P99_GOAL_MS:g} ms at 1000 x 10, 5 msg/s per group; the row "
          f"shown is the median of {REPEATS} runs by p99, whose p99s were adaptive "
          f"{chat_all['adaptive']} ms and equal {chat_all['equal']} ms): "
          f"adaptive {ms(chat_p99['adaptive'])} ms, equal {ms(chat_p99['equal'])} ms: "
          f"{'met' if chat_p99['adaptive'] is not None and chat_p99['adaptive'] < CHAT_P99_GOAL_MS else 'missed'}. "
          f"The floor: with a tenth of the groups ({FLOOR}), where both servers are nearly idle, "
          f"p99 is relay {ms(floor_p99['adaptive'])} ms and nats-server {ms(floor_p99['nats'])} ms: "
          f"what the bench on this machine measures at all.", ""]

    L += ["## Commands", "", "Each line is one run (the script starts and kills each server; PID is "
          "the server's process id):", "", "```sh"] + COMMANDS + ["```", ""]
    with open(OUT, "w") as f:
        f.write("\n".join(L))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
