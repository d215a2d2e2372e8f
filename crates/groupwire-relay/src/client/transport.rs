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
//! A connection is a [`FrameReader`] and a [`FrameWriter`] (the writer runs
//! in its own task), so the request and event logic in the parent module
//! never looks at which transport it drives.

use std::io;

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::ClientError;
use crate::frame::{self, FrameDecoder};

type WsStream = WebSocketStream<MaybeTlsStream<TcpStream>>;

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
#[derive(Debug)]
pub(super) enum FrameReader {
    /// A TCP stream and the decoder that cuts it into frames.
    Tcp {
        /// The socket.
        rd: OwnedReadHalf,
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
                if let Some(f) = decoder
                    .next_frame()
                    .map_err(|e| ReadError::Protocol(e.to_string()))?
                {
                    return Ok(f);
                }
                match rd.read_buf(decoder.buffer_mut()).await {
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

/// The sending half of a connection.
#[derive(Debug)]
pub(super) enum FrameWriter {
    /// A TCP stream.
    Tcp(OwnedWriteHalf),
    /// A WebSocket's outgoing messages.
    Ws(SplitSink<WsStream, Message>),
}

impl FrameWriter {
    /// Sends one whole frame (length prefix included): its bytes on TCP,
    /// one binary message on WebSocket.
    pub(super) async fn send(&mut self, frame: Bytes) -> io::Result<()> {
        match self {
            FrameWriter::Tcp(wr) => wr.write_all(&frame).await,
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

/// Connects to `addr` over TCP.
pub(super) async fn connect_tcp(
    addr: impl tokio::net::ToSocketAddrs,
    max_frame: usize,
) -> Result<(FrameReader, FrameWriter), ClientError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| ClientError::Connect(e.to_string()))?;
    // Requests are small and latency matters more than segment count.
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    Ok((
        FrameReader::Tcp {
            rd,
            decoder: FrameDecoder::new(max_frame),
        },
        FrameWriter::Tcp(wr),
    ))
}

/// Opens a WebSocket to `url` (`ws://host:port/path`); the HTTP upgrade
/// is done when this returns.
pub(super) async fn connect_ws(
    url: &str,
    max_frame: usize,
) -> Result<(FrameReader, FrameWriter), ClientError> {
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
    match request.uri().scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("ws") => {}
        Some(s) if s.eq_ignore_ascii_case("wss") => {
            return Err(invalid(
                "wss:// (TLS) is not supported by this client; use ws://".into(),
            ));
        }
        _ => return Err(invalid("expected a ws:// URL".into())),
    }
    // The relay's frames are one WebSocket frame each (tungstenite does
    // not fragment), so both caps are the frame cap: a larger message is
    // refused before it is buffered.
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_frame))
        .max_frame_size(Some(max_frame));
    let (ws, _response) = tokio_tungstenite::connect_async_with_config(request, Some(config), true)
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
    Ok((FrameReader::Ws { source, max_frame }, FrameWriter::Ws(sink)))
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
