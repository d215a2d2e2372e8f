//! Shared by the CLI's integration tests: `groupwire` commands as
//! processes on free loopback ports (the relay, tunnels, emulators).
#![allow(
    dead_code,
    reason = "each test binary uses its own part of this module"
)]

pub(crate) mod gst;

use std::io::{BufRead, BufReader, Lines, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use serde_json::Value;

/// A relay process, killed (SIGKILL, by its own handle) when dropped.
pub(crate) struct Relay {
    /// The process.
    pub(crate) child: Child,
    /// The TCP address from its first line, `relay listening on ADDR`.
    pub(crate) addr: String,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Relay {
    /// `groupwire relay serve --listen 127.0.0.1:0 ARGS...`, its stderr
    /// discarded, or written to `relay<N>.log` in the directory
    /// `$GW_TEST_RELAY_LOGS` names (N counts the relays this test process
    /// started).
    pub(crate) fn start(args: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_groupwire"));
        cmd.args(["relay", "serve", "--listen", "127.0.0.1:0"])
            .args(args);
        match std::env::var_os("GW_TEST_RELAY_LOGS") {
            Some(dir) => {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static STARTED: AtomicUsize = AtomicUsize::new(0);
                let n = STARTED.fetch_add(1, Ordering::Relaxed);
                let path = Path::new(&dir).join(format!("relay{n}.log"));
                cmd.stderr(std::fs::File::create(path).expect("a relay log file"));
            }
            None => {
                cmd.stderr(Stdio::null());
            }
        }
        Self::spawn(&mut cmd)
    }

    /// Runs `cmd`, a relay (perhaps behind a shell) that prints
    /// `relay listening on ADDR` first on stdout.
    pub(crate) fn spawn(cmd: &mut Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("the relay starts");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut relay = Self {
            child,
            addr: String::new(),
            stdout,
        };
        let line = relay.next_line();
        relay.addr = line
            .trim()
            .strip_prefix("relay listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        relay
    }

    /// The next line the relay prints on stdout.
    pub(crate) fn next_line(&mut self) -> String {
        self.stdout
            .next()
            .expect("a line from the relay")
            .expect("utf-8")
    }

    /// `kill -9`, and waits for it to be gone.
    pub(crate) fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `groupwire tunnel` or `emulate` and its ready line.
pub(crate) struct Proc {
    /// The process.
    pub(crate) child: Child,
    /// Its `--ready-json` line.
    pub(crate) ready: Value,
    stdout: BufReader<ChildStdout>,
}

/// Starts `groupwire ARGS... --ready-json` and reads its ready line.
pub(crate) fn spawn(args: &[&str]) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_groupwire"))
        .args(args)
        .arg("--ready-json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("groupwire starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a ready line");
    let ready = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{args:?}: {line:?}: {e}"));
    Proc {
        child,
        ready,
        stdout,
    }
}

impl Proc {
    /// The address under `key` of the ready line (`app`, `link`, `listen`),
    /// on loopback.
    pub(crate) fn addr(&self, key: &str) -> SocketAddr {
        let a: SocketAddr = self.ready[key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key} in {}", self.ready))
            .parse()
            .expect("an address");
        SocketAddr::from(([127, 0, 0, 1], a.port()))
    }

    /// Waits for it to exit; returns the rest of its stdout and its stderr.
    pub(crate) fn finish(mut self) -> (String, String) {
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .expect("piped")
            .read_to_string(&mut err)
            .expect("stderr");
        let mut out = String::new();
        self.stdout.read_to_string(&mut out).expect("stdout");
        let status = self.child.wait().expect("exits");
        assert!(status.success(), "{}: {err}", self.ready);
        assert!(!err.contains("panicked"), "{err}");
        (out, err)
    }
}

/// `groupwire CMD --listen 127.0.0.1:0 FLAG TO ARGS... --ready-json`: a
/// command listening on a free loopback port and sending on to `to`.
fn spawn_toward(cmd: &str, flag: &str, to: SocketAddr, args: &[&str]) -> Proc {
    let to = to.to_string();
    let mut all = vec![cmd, "--listen", "127.0.0.1:0", flag, &to];
    all.extend_from_slice(args);
    spawn(&all)
}

/// A tunnel's far side: `groupwire tunnel --listen 127.0.0.1:0 --forward
/// APP ARGS...`, handing what it rebuilds to the application at `app`.
pub(crate) fn tunnel_forwarding(app: SocketAddr, args: &[&str]) -> Proc {
    spawn_toward("tunnel", "--forward", app, args)
}

/// A tunnel's near side: `groupwire tunnel --listen 127.0.0.1:0 --peer
/// PEER ARGS...`, taking the application's datagrams at its `app` address.
pub(crate) fn tunnel_to_peer(peer: SocketAddr, args: &[&str]) -> Proc {
    spawn_toward("tunnel", "--peer", peer, args)
}

/// A link emulator: `groupwire emulate --listen 127.0.0.1:0 --forward TO
/// ARGS...`.
pub(crate) fn emulate_to(to: SocketAddr, args: &[&str]) -> Proc {
    spawn_toward("emulate", "--forward", to, args)
}

/// A temporary path as a command-line argument.
pub(crate) fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8")
}

/// A `--stats-json` file.
pub(crate) fn stats(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("stats json")).expect("json")
}
