//! `docs/relay-protocol.md` is enough to write a client: a raw-socket
//! client written from the document alone (its own frame writer and
//! reader, no `groupwire_relay::frame`) checks, one test per statement,
//! what the document promises against `groupwire relay serve`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

// Kinds, from the tables "Client to relay" and "Relay to client".
const HELLO: u8 = 0x01;
const CREATE_GROUP: u8 = 0x02;
const DELETE_GROUP: u8 = 0x03;
const JOIN: u8 = 0x04;
const SEND: u8 = 0x09;
const LOCK_RELEASE: u8 = 0x0c;
const CREDIT: u8 = 0x0d;
const PING: u8 = 0x0e;
const WELCOME: u8 = 0x40;
const OK: u8 = 0x41;
const SENT: u8 = 0x42;
const JOINED: u8 = 0x43;
const DELIVER: u8 = 0x44;
const GROUP_DELETED: u8 = 0x47;
const ERROR: u8 = 0x49;
const PONG: u8 = 0x4a;
// Roles and modes.
const PRINCIPAL: u8 = 1;
const OBSERVER: u8 = 2;
const ACTIVE: u8 = 1;

/// How long any read waits: generous, a loaded machine is slow.
const PATIENCE: Duration = Duration::from_secs(30);

/// A body under construction, with the document's field encodings.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// `str` and `name`: u16 length, then UTF-8.
    fn str(self, s: &str) -> Self {
        let mut b = self.u16(u16::try_from(s.len()).expect("short"));
        b.0.extend_from_slice(s.as_bytes());
        b
    }
    /// `blob`: u32 length, then bytes.
    fn blob(self, v: &[u8]) -> Self {
        let mut b = self.u32(u32::try_from(v.len()).expect("short"));
        b.0.extend_from_slice(v);
        b
    }
}

/// A whole frame: length (bytes after it), version 1, kind, flags 0,
/// request id, body.
fn frame(kind: u8, request: u32, body: Body) -> Vec<u8> {
    let mut f = Vec::with_capacity(12 + body.0.len());
    f.extend_from_slice(&(8 + u32::try_from(body.0.len()).expect("short")).to_be_bytes());
    f.extend_from_slice(&[1, kind, 0, 0]);
    f.extend_from_slice(&request.to_be_bytes());
    f.extend_from_slice(&body.0);
    f
}

/// A frame from the relay.
#[derive(Debug)]
struct In {
    kind: u8,
    request: u32,
    body: Vec<u8>,
    /// Whole frame, length prefix included (what `Credit` counts).
    len: u64,
}

/// Reads a body's fields in order.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take(2).try_into().expect("2"))
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take(4).try_into().expect("4"))
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take(8).try_into().expect("8"))
    }
    fn str(&mut self) -> String {
        let n = usize::from(self.u16());
        String::from_utf8(self.take(n).to_vec()).expect("UTF-8")
    }
    fn blob(&mut self) -> Vec<u8> {
        let n = self.u32() as usize;
        self.take(n).to_vec()
    }
}

/// A client speaking only what the document says.
struct Client {
    s: TcpStream,
    /// Bytes of frames received so far, `Welcome` included.
    received: u64,
    /// The client id from `Welcome`.
    id: u64,
}

impl Client {
    fn connect(addr: &str) -> Self {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        Self {
            s,
            received: 0,
            id: 0,
        }
    }

    /// Connects and says Hello; returns the first frame back.
    fn hello(addr: &str, name: &str, window: u32, token: &str) -> (Self, In) {
        let mut c = Self::connect(addr);
        c.send(
            HELLO,
            1,
            Body::default().u8(1).u32(window).str(token).str(name),
        );
        let f = c.recv().expect("an answer to Hello");
        if f.kind == WELCOME {
            let mut b = Fields(&f.body);
            let _version = b.u8();
            c.id = b.u64();
        }
        (c, f)
    }

    fn welcomed(addr: &str, name: &str) -> Self {
        let (c, f) = Self::hello(addr, name, 0, "");
        assert_eq!(f.kind, WELCOME, "{f:?}");
        c
    }

    fn send(&mut self, kind: u8, request: u32, body: Body) {
        self.s
            .write_all(&frame(kind, request, body))
            .expect("write");
    }

    /// The next frame, or `None` if the relay closed or nothing came
    /// within the read timeout.
    fn recv(&mut self) -> Option<In> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).ok()?;
        let n = u32::from_be_bytes(len) as usize;
        let mut rest = vec![0u8; n];
        self.s.read_exact(&mut rest).ok()?;
        self.received += 4 + n as u64;
        Some(In {
            kind: rest[1],
            request: u32::from_be_bytes(rest[4..8].try_into().expect("4")),
            body: rest[8..].to_vec(),
            len: 4 + n as u64,
        })
    }

    /// Frames until one of `kind` (0: any) or an error answers `request`,
    /// with the frames before it.
    fn until(&mut self, kind: u8, request: u32) -> Vec<In> {
        let mut seen = Vec::new();
        loop {
            let f = self
                .recv()
                .unwrap_or_else(|| panic!("no frame {kind:#x} for {request}: {seen:?}"));
            let done = f.request == request && (kind == 0 || f.kind == kind || f.kind == ERROR);
            seen.push(f);
            if done {
                return seen;
            }
        }
    }

    /// Sends a request and returns its reply.
    fn request(&mut self, kind: u8, request: u32, body: Body) -> In {
        self.send(kind, request, body);
        let mut frames = self.until(0, request);
        frames.pop().expect("one")
    }

    fn create(&mut self, group: &str) -> In {
        self.request(
            CREATE_GROUP,
            100,
            Body::default().str(group).str("t").u8(4).blob(b""),
        )
    }

    fn join(&mut self, group: &str, role: u8, watch: bool) -> Vec<In> {
        self.send(
            JOIN,
            101,
            Body::default()
                .str(group)
                .u8(role)
                .u8(ACTIVE)
                .u8(u8::from(watch)),
        );
        self.until(JOINED, 101)
    }

    /// Frames up to the first that answers `request`, whatever its kind.
    fn until_any(&mut self, request: u32) -> Vec<In> {
        self.until(0, request)
    }
}

/// An error frame's code.
fn error_code(f: &In) -> Option<u16> {
    (f.kind == ERROR).then(|| Fields(&f.body).u16())
}

mod common;
use common::Relay;

/// `groupwire relay serve --memory` on a free port, killed on drop.
fn relay(extra: &[&str]) -> Relay {
    Relay::start(&[&["--memory"], extra].concat())
}

/// A token as "Tokens" describes it.
/// A token as the protocol doc's "Tokens" section says to mint one: a
/// compact JWT, HS256 over `B64(header) "." B64(payload)`, the key id being
/// the secret file's name without extension (here `secret`), `exp` far in
/// the future so no clock is read.
fn token(key: &[u8], role: &str) -> String {
    let header = r#"{"alg":"HS256","typ":"JWT","kid":"secret"}"#;
    let payload = format!(
        r#"{{"sub":"t","iat":1795000000,"exp":4102444800,"groups":["*"],"role":"{role}","max_priority":10}}"#
    );
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(payload)
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(signed.as_bytes());
    let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{signed}.{sig}")
}

fn secret_file(dir: &Path, text: &str) -> String {
    let p = dir.join("secret");
    std::fs::write(&p, text).expect("write secret");
    p.to_str().expect("UTF-8 path").to_owned()
}

#[test]
fn welcome_counts_toward_the_credit() {
    let r = relay(&[]);
    let mut c = Client::welcomed(&r.addr, "c");
    let welcome = c.received;
    // Crediting exactly the Welcome's bytes is fine...
    c.send(CREDIT, 0, Body::default().u64(welcome));
    let pong = c.request(PING, 2, Body::default().u64(42));
    assert_eq!(pong.kind, PONG, "{pong:?}");
    // ...and so is everything received, Pong included; one byte more is not.
    c.send(CREDIT, 0, Body::default().u64(c.received + 1));
    let f = c.recv().expect("an error");
    assert_eq!(error_code(&f), Some(16), "PROTOCOL_VIOLATION: {f:?}");
    assert!(c.recv().is_none(), "then the relay closes");
}

#[test]
fn a_window_may_be_exceeded_by_one_frame() {
    let r = relay(&[]);
    let mut p = Client::welcomed(&r.addr, "p");
    assert_eq!(p.create("w").kind, OK);
    p.join("w", PRINCIPAL, false);
    // The smallest window, 4 KiB, and a reader that never credits.
    let (mut o, f) = Client::hello(&r.addr, "o", 4096, "");
    assert_eq!(f.kind, WELCOME);
    let granted = {
        let mut b = Fields(&f.body);
        let _ = (b.u8(), b.u64(), b.u32());
        u64::from(b.u32())
    };
    assert_eq!(granted, 4096);
    o.join("w", OBSERVER, false);
    for i in 0..3u32 {
        p.request(
            SEND,
            10 + i,
            Body::default().str("w").u16(1).u64(0).blob(&[7; 3000]),
        );
    }
    // Two 3 KB deliveries fit (the second past the window), not three.
    o.s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut delivers = 0;
    let mut last = 0;
    while let Some(f) = o.recv() {
        if f.kind == DELIVER {
            delivers += 1;
        }
        last = f.len;
    }
    assert_eq!(delivers, 2, "received {} bytes", o.received);
    assert!(o.received > granted, "past the window: {}", o.received);
    assert!(o.received - last < granted, "by one frame: {}", o.received);
    // Credit opens it again.
    o.s.set_read_timeout(Some(PATIENCE)).expect("timeout");
    o.send(CREDIT, 0, Body::default().u64(o.received));
    let f = o.recv().expect("the third delivery");
    assert_eq!(f.kind, DELIVER);
}

#[test]
fn the_hmac_key_is_the_secret_files_text_trimmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(dir.path(), "  s3cret \n");
    let r = relay(&["--auth-secret-file", &secret]);
    let (_c, f) = Client::hello(&r.addr, "a", 0, &token(b"s3cret", "principal"));
    assert_eq!(f.kind, WELCOME, "{f:?}");
    let (_c, f) = Client::hello(&r.addr, "b", 0, &token(b"  s3cret \n", "principal"));
    assert_eq!(error_code(&f), Some(4), "UNAUTHORIZED: {f:?}");
}

#[test]
fn create_group_needs_the_principal_role() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = secret_file(dir.path(), "k");
    let r = relay(&["--auth-secret-file", &secret]);
    let observer = token(b"k", "observer");
    let (mut o, f) = Client::hello(&r.addr, "o", 0, &observer);
    assert_eq!(f.kind, WELCOME);
    assert_eq!(error_code(&o.create("g")), Some(5), "FORBIDDEN");
    let principal = token(b"k", "principal");
    let (mut p, f) = Client::hello(&r.addr, "p", 0, &principal);
    assert_eq!(f.kind, WELCOME);
    assert_eq!(p.create("g").kind, OK);
}

#[test]
fn sent_precedes_the_senders_own_deliver() {
    let r = relay(&[]);
    let mut c = Client::welcomed(&r.addr, "c");
    c.create("g");
    c.join("g", PRINCIPAL, false);
    for i in 0..20u32 {
        c.send(
            SEND,
            1000 + i,
            Body::default().str("g").u16(1).u64(0).blob(b"x"),
        );
    }
    let mut sent = std::collections::BTreeMap::new();
    let mut delivered = 0;
    while delivered < 20 {
        let f = c.recv().expect("frames");
        match f.kind {
            SENT => {
                let mut b = Fields(&f.body);
                let _ = b.str();
                sent.insert(b.u64(), f.request);
            }
            DELIVER => {
                let mut b = Fields(&f.body);
                let _ = b.str();
                let seq = b.u64();
                assert!(sent.contains_key(&seq), "Deliver {seq} before its Sent");
                delivered += 1;
            }
            other => panic!("unexpected kind {other:#x}"),
        }
    }
}

#[test]
fn joined_includes_the_joiner() {
    let r = relay(&[]);
    let mut a = Client::welcomed(&r.addr, "a");
    a.create("g");
    a.join("g", PRINCIPAL, false);
    let mut b = Client::welcomed(&r.addr, "bee");
    let joined = b.join("g", OBSERVER, false).pop().expect("Joined");
    let mut f = Fields(&joined.body);
    let (_group, _type, _ck, _head, _state) = (f.str(), f.str(), f.u64(), f.u64(), f.blob());
    let members: Vec<(u64, String)> = (0..f.u32())
        .map(|_| {
            let m = (f.u64(), f.str());
            let _ = (f.u8(), f.u8());
            m
        })
        .collect();
    assert!(members.contains(&(b.id, "bee".into())), "{members:?}");
    assert!(members.contains(&(a.id, "a".into())), "{members:?}");
}

#[test]
fn an_empty_client_name_is_allowed() {
    let r = relay(&[]);
    let mut c = Client::welcomed(&r.addr, "");
    c.create("g");
    let joined = c.join("g", PRINCIPAL, false).pop().expect("Joined");
    assert_eq!(joined.kind, JOINED);
}

#[test]
fn the_deleting_member_gets_group_deleted_before_its_ok() {
    let r = relay(&[]);
    let mut c = Client::welcomed(&r.addr, "c");
    c.create("g");
    c.join("g", PRINCIPAL, false);
    c.send(DELETE_GROUP, 7, Body::default().str("g"));
    let frames = c.until_any(7);
    let kinds: Vec<(u8, u32)> = frames.iter().map(|f| (f.kind, f.request)).collect();
    assert_eq!(kinds, vec![(GROUP_DELETED, 0), (OK, 7)]);
}

#[test]
fn error_codes_are_the_ones_the_table_names() {
    let r = relay(&[]);
    let mut c = Client::welcomed(&r.addr, "c");
    let mut o = Client::welcomed(&r.addr, "o");
    let code = |f: In| {
        let mut b = Fields(&f.body);
        assert_eq!(f.kind, ERROR, "{f:?}");
        let code = b.u16();
        assert!(!b.str().is_empty(), "a message");
        code
    };
    assert_eq!(
        code(c.request(JOIN, 1, Body::default().str("nope").u8(1).u8(1).u8(0))),
        6
    );
    c.create("g");
    assert_eq!(code(c.create("g")), 7);
    assert_eq!(
        code(c.request(SEND, 2, Body::default().str("g").u16(0).u64(0).blob(b""))),
        8
    );
    assert_eq!(
        code(c.request(SEND, 3, Body::default().str("none").u16(0).u64(0).blob(b""))),
        8
    );
    c.join("g", PRINCIPAL, false);
    assert_eq!(
        code(c.request(JOIN, 4, Body::default().str("g").u8(1).u8(1).u8(0))),
        9
    );
    assert_eq!(
        code(c.request(LOCK_RELEASE, 5, Body::default().str("g").str("pen"))),
        10
    );
    assert_eq!(code(c.create("")), 18);
    o.join("g", OBSERVER, false);
    assert_eq!(
        code(o.request(SEND, 6, Body::default().str("g").u16(0).u64(0).blob(b""))),
        5
    );
}
