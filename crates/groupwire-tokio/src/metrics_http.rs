//! `--metrics ADDR`: the channels' measures in the Prometheus text format
//! ([`groupwire_metrics::prometheus_text`]) at `GET /metrics`, for a
//! Prometheus server (or `curl`) to scrape while a command runs.
//!
//! The command publishes a new text once a second ([`MetricsPublisher`]);
//! the endpoint serves the latest. HTTP/1.1 by hyper; at most
//! [`MAX_CONNECTIONS`] at once, each given [`HEADER_TIMEOUT`] to send its
//! request, so a slow or idle client holds no more than a slot.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use groupwire_metrics::{ChannelSnapshot, prometheus_text};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::debug;

/// Connections served at once; more wait in the listen backlog.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a client has to send its request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The Prometheus exposition format's content type.
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where the command puts the latest measures.
#[derive(Clone, Debug)]
pub struct MetricsPublisher(Arc<watch::Sender<String>>);

impl MetricsPublisher {
    /// Replaces what `/metrics` serves with these channels' measures.
    pub fn publish(&self, channels: &[ChannelSnapshot]) {
        self.0.send_replace(prometheus_text(channels));
    }
}

/// An HTTP endpoint serving the latest published measures.
#[derive(Debug)]
pub struct MetricsEndpoint {
    listener: TcpListener,
    text: watch::Receiver<String>,
}

impl MetricsEndpoint {
    /// Binds `addr` (port 0 for any free port). Serves an empty text until
    /// the first [`MetricsPublisher::publish`].
    pub async fn bind(addr: SocketAddr) -> io::Result<(Self, MetricsPublisher)> {
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            io::Error::new(e.kind(), format!("cannot serve metrics on {addr}: {e}"))
        })?;
        let (tx, text) = watch::channel(String::new());
        Ok((Self { listener, text }, MetricsPublisher(Arc::new(tx))))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => return,
                p = Arc::clone(&slots).acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => return,
                a = self.listener.accept() => match a {
                    Ok(a) => a,
                    Err(e) => {
                        debug!(error = %e, "metrics: accept failed");
                        continue;
                    }
                },
            };
            let text = self.text.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let service = hyper::service::service_fn(move |req| {
                    let body = text.borrow().clone();
                    async move { Ok::<_, std::convert::Infallible>(respond(&req, body)) }
                });
                let served = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(e) = served {
                    debug!(%peer, error = %e, "metrics: connection ended with an error");
                }
            });
        }
    }
}

/// `GET /metrics` (or `HEAD`): the text; any other path 404, any other
/// method 405.
fn respond(req: &Request<Incoming>, text: String) -> Response<Full<Bytes>> {
    let status = match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/metrics") => StatusCode::OK,
        (&Method::GET | &Method::HEAD, _) => StatusCode::NOT_FOUND,
        _ => StatusCode::METHOD_NOT_ALLOWED,
    };
    let body = if status == StatusCode::OK {
        text
    } else {
        format!("{status}: groupwire serves GET /metrics\n")
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    resp
}

#[cfg(test)]
mod tests {
    use groupwire_metrics::{ChannelMeter, LatencyKind, Path};
    use groupwire_proto::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_the_latest_published_text_and_nothing_else() {
        let (ep, publisher) = MetricsEndpoint::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = ep.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(ep.run(async {
            let _ = stopped.await;
        }));
        let mut m = ChannelMeter::new("tunnel xor:3", LatencyKind::OneWay, Instant::ZERO);
        m.delivered(0, Path::Arrived, Some(Duration::from_millis(3)));
        publisher.publish(&[m.snapshot(Instant::from_millis(1000))]);
        let ok = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(
            ok.contains(
                r#"groupwire_channel_delivered_total{channel="tunnel xor:3",path="arrived"} 1"#
            ),
            "{ok}"
        );
        let missing = get(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = get(
            addr,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let junk = get(addr, "\x16\x03\x01 not http\r\n\r\n").await;
        assert!(
            junk.is_empty() || junk.starts_with("HTTP/1.1 400"),
            "{junk}"
        );
        stop.send(()).unwrap();
        server.await.unwrap();
    }
}
