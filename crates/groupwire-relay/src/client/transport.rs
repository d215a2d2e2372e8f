//! The two byte transports under [`RelayClient`](super::RelayClient).
//!
//! Both carry the same frames (`docs/relay-protocol.md`, "Transports"):
//!
//! - **TCP**: a byte stream; a [`FrameDecoder`] cuts it at the length
//!   prefixes.
//! - **WebSocket**: one binary message holds exactly one frame, prefix
//!   included. A message that is not exactly one frame is a protocol error,
//!   as it is for the relay.
//!
//! Either runs over plain TCP or inside TLS ([`ClientTls`]): `tls://` and
//! `wss://`.
//!
//! A connection is a [`FrameReader`] and a [`FrameWriter`] (the writer runs
//! in its own task), so the request and event logic in the parent module
//! never looks at which transport it drives.

use std::fmt;
use std::io;

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use super::ClientError;
use crate::frame::{self, FrameDecoder};
use crate::tls::ClientTls;

/// A byte stream to the relay: a TCP socket, or TLS over one.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type WsStream = WebSocketStream<Box<dyn Io>>;

/// A connected transport, before `Hello`.
pub(super) struct Connection {
    /// Frames in.
    pub(super) reader: FrameReader,
    /// Frames out.
    pub(super) writer: FrameWriter,
    /// Whether the bytes travel inside TLS.
    pub(super) encrypted: bool,
    /// Whether the relay's address is a loopback address (the bytes never
    /// leave the host).
    pub(super) loopback: bool,
}

/// Why [`FrameReader::next_frame`] returned no frame. Every variant ends
/// the connection.
#[derive(Debug)]
pub(super) enum ReadError {
    /// The relay closed the connection.
    Closed,
    /// The socket failed.
    Io(String),
    /// The relay sent something that is not a frame we accept.
    Protocol(String),
}

impl ReadError {
    /// The error a connect attempt reports when the `Welcome` does not come.
    pub(super) fn into_connect_error(self) -> ClientError {
        match self {
            ReadError::Closed => ClientError::Closed,
            ReadError::Io(e) => ClientError::Connect(e),
            ReadError::Protocol(e) => ClientError::Unexpected(e),
        }
    }

    /// The error an established connection reports in
    /// [`ClientEvent::Closed`](super::ClientEvent::Closed): none for a
    /// close or a broken socket (as for any lost connection).
    pub(super) fn into_fatal(self) -> Option<ClientError> {
        match self {
            ReadError::Closed | ReadError::Io(_) => None,
            ReadError::Protocol(e) => Some(ClientError::Unexpected(e)),
        }
    }
}

/// The receiving half of a connection.
pub(super) enum FrameReader {
    /// A TCP stream (plain or TLS) and the decoder that cuts it into frames.
    Tcp {
        /// The socket's read half.
        rd: Box<dyn AsyncRead + Send + Unpin>,
        /// Bytes read but not yet returned as frames.
        decoder: FrameDecoder,
    },
    /// A WebSocket's incoming messages.
    Ws {
        /// The messages.
        source: SplitStream<WsStream>,
        /// The largest frame accepted.
        max_frame: usize,
    },
}

impl FrameReader {
    /// The next whole frame (length prefix included), at most the
    /// `max_frame` this reader was built with.
    ///
    /// Cancel-safe: a dropped call loses no bytes, so the caller may
    /// `select!` on it.
    pub(super) async fn next_frame(&mut self) -> Result<Bytes, ReadError> {
        match self {
            FrameReader::Tcp { rd, decoder } => loop {
                let next = decoder.next_frame().map_err(|e| {
                    if looks_like_tls(decoder.buffer_mut()) {
                        ReadError::Protocol(
                            "the relay answered with TLS: connect with tls://host:port".into(),
                        )
                    } else {
                        ReadError::Protocol(e.to_string())
                    }
                })?;
                if let Some(f) = next {
                    return Ok(f);
                }
                match rd.read_buf(decoder.read_buffer()).await {
                    Ok(0) => return Err(ReadError::Closed),
                    Ok(_) => {}
                    Err(e) => return Err(ReadError::Io(e.to_string())),
                }
            },
            FrameReader::Ws { source, max_frame } => loop {
                // Each `next()` is cancel-safe and everything after it is
                // synchronous, so the loop is too.
                let bytes = match source.next().await {
                    Some(Ok(Message::Binary(b))) => b,
                    // tungstenite answers pings itself.
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(_))) => {
                        return Err(ReadError::Protocol(
                            "the relay sent a WebSocket text message".into(),
                        ));
                    }
                    Some(Ok(Message::Close(_))) | None => return Err(ReadError::Closed),
                    Some(Err(e)) => return Err(ws_read_error(e, *max_frame)),
                };
                return match frame::frame_len(&bytes, *max_frame) {
                    Ok(Some(len)) if len == bytes.len() => Ok(bytes),
                    Err(e) => Err(ReadError::Protocol(e.to_string())),
                    Ok(_) => Err(ReadError::Protocol(format!(
                        "a WebSocket message of {} bytes is not exactly one frame",
                        bytes.len()
                    ))),
                };
            },
        }
    }
}

impl fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameReader::Tcp { .. } => f.write_str("FrameReader::Tcp"),
            FrameReader::Ws { .. } => f.write_str("FrameReader::Ws"),
        }
    }
}

/// The sending half of a connection.
pub(super) enum FrameWriter {
    /// A TCP stream (plain or TLS).
    Tcp(Box<dyn AsyncWrite + Send + Unpin>),
    /// A WebSocket's outgoing messages.
    Ws(SplitSink<WsStream, Message>),
}

impl FrameWriter {
    /// Sends one whole frame (length prefix included): its bytes on TCP,
    /// one binary message on WebSocket.
    pub(super) async fn send(&mut self, frame: Bytes) -> io::Result<()> {
        match self {
            // Flush: TLS keeps what the socket could not take yet.
            FrameWriter::Tcp(wr) => {
                wr.write_all(&frame).await?;
                wr.flush().await
            }
            FrameWriter::Ws(sink) => sink
                .send(Message::Binary(frame))
                .await
                .map_err(ws_write_error),
        }
    }

    /// Ends the connection politely: a TCP FIN, or a WebSocket close
    /// message. The relay handles either as a leave of every group.
    pub(super) async fn close(&mut self) {
        match self {
            FrameWriter::Tcp(wr) => {
                let _ = wr.shutdown().await;
            }
            FrameWriter::Ws(sink) => {
                let _ = sink.close().await;
            }
        }
    }
}

impl fmt::Debug for FrameWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameWriter::Tcp(_) => f.write_str("FrameWriter::Tcp"),
            FrameWriter::Ws(_) => f.write_str("FrameWriter::Ws"),
        }
    }
}

/// Opens a TCP connection; `loopback` says whether the peer is a loopback
/// address.
async fn tcp(addr: impl tokio::net::ToSocketAddrs) -> Result<(TcpStream, bool), ClientError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| ClientError::Connect(e.to_string()))?;
    // Requests are small and latency matters more than segment count.
    let _ = stream.set_nodelay(true);
    let loopback = stream.peer_addr().is_ok_and(|a| a.ip().is_loopback());
    Ok((stream, loopback))
}

/// Connects to `addr` over TCP, inside TLS if `tls` is given (`host` is
/// the name the relay's certificate must carry).
pub(super) async fn connect_tcp(
    addr: impl tokio::net::ToSocketAddrs,
    tls: Option<(&ClientTls, &str)>,
    max_frame: usize,
) -> Result<Connection, ClientError> {
    let (stream, loopback) = tcp(addr).await?;
    let decoder = FrameDecoder::new(max_frame);
    let (reader, writer, encrypted) = match tls {
        None => {
            let (rd, wr) = stream.into_split();
            (
                FrameReader::Tcp {
                    rd: Box::new(rd),
                    decoder,
                },
                FrameWriter::Tcp(Box::new(wr)),
                false,
            )
        }
        Some((tls, host)) => {
            let stream = tls
                .connect(host, stream)
                .await
                .map_err(ClientError::Connect)?;
            let (rd, wr) = tokio::io::split(stream);
            (
                FrameReader::Tcp {
                    rd: Box::new(rd),
                    decoder,
                },
                FrameWriter::Tcp(Box::new(wr)),
                true,
            )
        }
    };
    Ok(Connection {
        reader,
        writer,
        encrypted,
        loopback,
    })
}

/// Opens a WebSocket to `url` (`ws://host:port/path`, or `wss://` inside
/// TLS with the roots in `tls`); the HTTP upgrade is done when this
/// returns.
pub(super) async fn connect_ws(
    url: &str,
    tls: &ClientTls,
    max_frame: usize,
) -> Result<Connection, ClientError> {
    let invalid = |reason: String| ClientError::InvalidAddress {
        addr: url.to_owned(),
        reason,
    };
    let request = url.into_client_request().map_err(|e| {
        invalid(match e {
            tungstenite::Error::HttpFormat(e) => format!("not a URL ({e})"),
            e => e.to_string(),
        })
    })?;
    let encrypted = match request.uri().scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("ws") => false,
        Some(s) if s.eq_ignore_ascii_case("wss") => true,
        _ => return Err(invalid("expected a ws:// or wss:// URL".into())),
    };
    let host = request
        .uri()
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("no host".into()))?
        .to_owned();
    let port = request
        .uri()
        .port_u16()
        .unwrap_or(if encrypted { 443 } else { 80 });
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(&host);
    let (stream, loopback) = tcp((bare, port)).await?;
    let stream: Box<dyn Io> = if encrypted {
        Box::new(
            tls.connect(&host, stream)
                .await
                .map_err(ClientError::Connect)?,
        )
    } else {
        Box::new(stream)
    };
    // The relay's frames are one WebSocket frame each (tungstenite does
    // not fragment), so both caps are the frame cap: a larger message is
    // refused before it is buffered.
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_frame))
        .max_frame_size(Some(max_frame));
    let (ws, _response) = tokio_tungstenite::client_async_with_config(request, stream, Some(config))
        .await
        .map_err(|e| {
            ClientError::Connect(match e {
                tungstenite::Error::Io(e) => e.to_string(),
                tungstenite::Error::Http(r) => format!(
                    "WebSocket handshake with {url}: the server answered HTTP {} instead of switching protocols",
                    r.status()
                ),
                e => format!("WebSocket handshake with {url}: {e}"),
            })
        })?;
    let (sink, source) = ws.split();
    Ok(Connection {
        reader: FrameReader::Ws { source, max_frame },
        writer: FrameWriter::Ws(sink),
        encrypted,
        loopback,
    })
}

/// Whether `bytes` start like a TLS record (RFC 8446 §5.1: content type
/// alert or handshake, legacy version 3.x), as when a plaintext client
/// reaches a relay's TLS listener: the relay's alert would otherwise read
/// as a frame of hundreds of megabytes.
fn looks_like_tls(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, 0x00..=0x04, ..])
}

fn ws_read_error(e: tungstenite::Error, max_frame: usize) -> ReadError {
    use tungstenite::error::ProtocolError;
    match e {
        tungstenite::Error::ConnectionClosed
        | tungstenite::Error::AlreadyClosed
        | tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => {
            ReadError::Closed
        }
        tungstenite::Error::Io(e) => ReadError::Io(e.to_string()),
        tungstenite::Error::Capacity(e) => ReadError::Protocol(format!(
            "a WebSocket message exceeds the frame cap of {max_frame} bytes ({e})"
        )),
        e => ReadError::Protocol(format!("WebSocket: {e}")),
    }
}

fn ws_write_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        e => io::Error::other(e),
    }
}
