//! The relay over TLS on loopback: TCP inside TLS (`tls://`) and `wss://`
//! with a CA and a server certificate made at run time, a client that
//! trusts another CA, and tokens that never travel in clear.

use bytes::Bytes;
use groupwire_relay::auth::{self, Claims};
use groupwire_relay::frame::{ActivityMode, Role};
use groupwire_relay::tls::{ClientTls, ServerTls};
use groupwire_relay::{
    ClientError, ClientEvent, ClientOptions, PlaintextToken, RelayClient, RelayHandle, ServerConfig,
};
use tokio::io::AsyncReadExt;

/// Generous: a loaded 2-core machine is slow at handshakes, never stuck.
mod common;
use common::in_time;

/// A CA and a server certificate it signed (for `localhost`, 127.0.0.1
/// and ::1 unless other names are given), all PEM.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(ca_name: &str) -> Self {
        Self::with_names(ca_name, &["localhost", "127.0.0.1", "::1"])
    }

    fn with_names(ca_name: &str, names: &[&str]) -> Self {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA");
        let key = rcgen::KeyPair::generate().expect("server key");
        let params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .expect("params");
        let cert = params.signed_by(&key, &ca).expect("server certificate");
        Self {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn client(&self) -> ClientTls {
        ClientTls::from_ca_pem(self.ca_pem.as_bytes()).expect("CA parses")
    }
}

const SECRET: &[u8] = b"tls-test-secret";

fn token() -> String {
    auth::mint(
        "k",
        SECRET,
        &Claims {
            expires_unix: groupwire_relay::client::wall_micros() / 1_000_000 + 3600,
            ..Claims::anyone()
        },
    )
    .expect("mint")
}

/// A relay with TLS on both listeners and token authentication.
async fn tls_relay(pki: &Pki) -> RelayHandle {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().expect("addr"));
    cfg.ws = Some("127.0.0.1:0".parse().expect("addr"));
    cfg.tls = Some(
        ServerTls::from_pem(pki.cert_pem.as_bytes(), pki.key_pem.as_bytes()).expect("identity"),
    );
    cfg.core.auth_keys = Some(auth::Keys::single("k", SECRET).expect("key"));
    groupwire_relay::server::start(cfg)
        .await
        .expect("relay starts")
}

fn ws_port(r: &RelayHandle) -> u16 {
    r.ws_addr().expect("ws listener").port()
}

/// Creates a group, joins it as two members over `url_a` and `url_b`, and
/// checks that an update sent by one reaches both, in order.
async fn round_trip(url_a: &str, url_b: &str, opts: &ClientOptions) {
    let (a, mut ea) = RelayClient::connect_url(url_a, opts.clone())
        .await
        .unwrap_or_else(|e| panic!("{url_a}: {e}"));
    let (b, mut eb) = RelayClient::connect_url(url_b, opts.clone())
        .await
        .unwrap_or_else(|e| panic!("{url_b}: {e}"));
    a.create_group("doc", "text", 4, Bytes::from_static(b"v0"))
        .await
        .expect("create");
    for c in [&a, &b] {
        c.join("doc", Role::Principal, ActivityMode::Active, false)
            .await
            .expect("join");
    }
    let s1 = a
        .send("doc", 1, Bytes::from_static(b"from a"))
        .await
        .expect("send");
    let s2 = b
        .send("doc", 1, Bytes::from(vec![7u8; 100_000]))
        .await
        .expect("send a large update");
    assert_eq!((s1, s2), (1, 2));
    for ev in [&mut ea, &mut eb] {
        let mut got = Vec::new();
        while got.len() < 2 {
            match ev.recv().await.expect("event") {
                ClientEvent::Deliver(d) => got.push((d.seq, d.payload.len())),
                ClientEvent::Closed(e) => panic!("closed: {e:?}"),
                _ => {}
            }
        }
        assert_eq!(got, vec![(1, 6), (2, 100_000)]);
    }
}

#[tokio::test]
async fn tcp_inside_tls_and_wss_carry_the_protocol() {
    in_time(async {
        let pki = Pki::new("groupwire test CA");
        let r = tls_relay(&pki).await;
        let opts = ClientOptions::new("m").token(&token()).tls(pki.client());
        let tls = format!("tls://127.0.0.1:{}", r.local_addr().port());
        let wss = format!("wss://127.0.0.1:{}/", ws_port(&r));
        let wss_name = format!("wss://localhost:{}/any/path", ws_port(&r));
        // TCP+TLS with TCP+TLS, then a WSS member with a TCP+TLS member
        // (by DNS name too): one group, one order, whatever the transport.
        round_trip(&tls, &tls, &opts).await;
        let (admin, _e) = RelayClient::connect_url(&tls, opts.clone())
            .await
            .expect("connect");
        admin.delete_group("doc").await.expect("delete");
        round_trip(&wss, &wss_name, &opts).await;
        admin.delete_group("doc").await.expect("delete");
        round_trip(&wss, &tls, &opts).await;
        assert_eq!(r.stats().await.auth_failures, 0);
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_client_that_trusts_another_ca_fails_with_a_clear_error() {
    in_time(async {
        let pki = Pki::new("groupwire test CA");
        let other = Pki::new("someone else's CA");
        let r = tls_relay(&pki).await;
        let opts = ClientOptions::new("m").token(&token()).tls(other.client());
        for url in [
            format!("tls://127.0.0.1:{}", r.local_addr().port()),
            format!("wss://127.0.0.1:{}/", ws_port(&r)),
        ] {
            match RelayClient::connect_url(&url, opts.clone()).await {
                Err(ClientError::Connect(m)) => {
                    assert!(
                        m.contains("TLS handshake") && m.contains("certificate"),
                        "{url}: {m}"
                    );
                    assert!(m.contains("UnknownIssuer"), "{url}: {m}");
                }
                other => panic!("{url}: {:?}", other.map(|_| ())),
            }
        }
        // Mozilla's roots do not vouch for a private CA either.
        let public = ClientOptions::new("m")
            .token(&token())
            .tls(ClientTls::webpki_roots());
        let url = format!("tls://localhost:{}", r.local_addr().port());
        match RelayClient::connect_url(&url, public).await {
            Err(ClientError::Connect(m)) => assert!(m.contains("UnknownIssuer"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        // A certificate from the trusted CA, for another name.
        let elsewhere = Pki::with_names("groupwire test CA", &["relay.invalid"]);
        let r2 = tls_relay(&elsewhere).await;
        let url = format!("tls://127.0.0.1:{}", r2.local_addr().port());
        match RelayClient::connect_url(&url, opts.clone().tls(elsewhere.client())).await {
            Err(ClientError::Connect(m)) => assert!(m.contains("not valid for name"), "{m}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
        r2.shutdown().await;
        assert_eq!(
            r.stats().await.auth_failures,
            0,
            "no token reached the relay"
        );
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_tls_relay_has_no_plaintext_listener() {
    in_time(async {
        let pki = Pki::new("groupwire test CA");
        let r = tls_relay(&pki).await;
        // A plaintext client's Hello is not a TLS ClientHello: the relay
        // ends the connection without reading a frame, on both listeners.
        let opts = ClientOptions::new("m").token(&token());
        let err = RelayClient::connect(r.local_addr(), opts.clone())
            .await
            .expect_err("plaintext TCP to a TLS listener");
        assert!(
            err.to_string()
                .contains("answered with TLS: connect with tls://"),
            "{err}"
        );
        let err = RelayClient::connect_ws(&format!("ws://127.0.0.1:{}/", ws_port(&r)), opts)
            .await
            .expect_err("ws:// to a wss listener");
        assert!(matches!(err, ClientError::Connect(_)), "{err}");
        let stats = r.stats().await;
        assert_eq!(stats.auth_failures, 0, "no token was read in clear");
        r.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn a_client_sends_no_token_in_clear_unless_allowed() {
    in_time(async {
        // A bare listener records every byte a client sends it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            let _ = s.read_to_end(&mut got).await;
            got
        });
        let opts = ClientOptions::new("m")
            .token("secret-token")
            .plaintext_token(PlaintextToken::Never);
        let err = RelayClient::connect(addr, opts).await.expect_err("refused");
        assert_eq!(err, ClientError::PlaintextToken);
        assert!(err.to_string().contains("tls://"), "{err}");
        let got = server.await.expect("server task");
        assert!(got.is_empty(), "the client sent {} bytes", got.len());
    })
    .await;
}

#[test]
fn bad_pem_is_a_clear_error() {
    let pki = Pki::new("groupwire test CA");
    let e = ServerTls::from_pem(b"not pem", pki.key_pem.as_bytes()).expect_err("no cert");
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let e = ServerTls::from_pem(pki.cert_pem.as_bytes(), b"").expect_err("no key");
    assert!(e.to_string().contains("private key"), "{e}");
    // A key that is not the certificate's.
    let other = Pki::new("other");
    let e = ServerTls::from_pem(pki.cert_pem.as_bytes(), other.key_pem.as_bytes())
        .expect_err("mismatched key");
    assert!(e.to_string().contains("TLS configuration"), "{e}");
    assert!(ClientTls::from_ca_pem(b"").is_err());
}
