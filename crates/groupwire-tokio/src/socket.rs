//! The socket the driver needs: send and receive datagrams, nothing more.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

/// A datagram socket the [`Driver`](crate::Driver) can run a machine over.
///
/// Implemented for tokio's `UdpSocket` (and `Arc` of any implementation);
/// a test can implement it over channels or a simulated network such as
/// turmoil. `recv_from` must be cancel safe: the driver's select loop drops
/// it when a command or a deadline comes first.
pub trait DatagramSocket: Send + Sync + 'static {
    /// Sends one datagram to `dst`; returns the bytes sent.
    fn send_to(
        &self,
        data: &[u8],
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send;
    /// Receives one datagram into `buf`: its length and source.
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send;
    /// The address the socket is bound to.
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl DatagramSocket for tokio::net::UdpSocket {
    fn send_to(
        &self,
        data: &[u8],
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        tokio::net::UdpSocket::send_to(self, data, dst)
    }
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send {
        tokio::net::UdpSocket::recv_from(self, buf)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        tokio::net::UdpSocket::local_addr(self)
    }
}

impl<S: DatagramSocket> DatagramSocket for Arc<S> {
    fn send_to(
        &self,
        data: &[u8],
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        S::send_to(self, data, dst)
    }
    fn recv_from(
        &self,
        buf: &mut [u8],
    ) -> impl Future<Output = io::Result<(usize, SocketAddr)>> + Send {
        S::recv_from(self, buf)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        S::local_addr(self)
    }
}

/// Whether a receive error only means that some datagram was lost, so the
/// driver should carry on: an ICMP "port unreachable" for an earlier send
/// (reported as `ConnectionReset` on Windows, `ConnectionRefused` on Linux),
/// an unreachable network or host, or an interrupted call.
pub fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
    )
}
