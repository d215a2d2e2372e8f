//! The socket the driver needs: send and receive datagrams, one at a time
//! or, where the OS offers it, several per system call.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use quinn_udp::{RecvMeta, UdpSocketState};
use tokio::io::Interest;

/// A datagram socket the [`Driver`](crate::Driver) can run a machine over.
///
/// Implemented for tokio's `UdpSocket` (one datagram per system call),
/// [`BatchedUdpSocket`] (several, where the OS can), and `Arc` of any
/// implementation; a test can implement it over channels or a simulated
/// network such as turmoil. Only the first three methods are required: the
/// batch methods default to one datagram at a time. `recv_from` and
/// `recv_batch` must be cancel safe: the driver's select loop drops them
/// when a command or a deadline comes first.
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

    /// Most datagrams one [`send_segments`](Self::send_segments) call sends
    /// with one system call (segmentation offload, GSO); 1 without.
    fn max_send_segments(&self) -> usize {
        1
    }
    /// Sends `data` to `dst` as datagrams of `segment_size` bytes each (the
    /// last may be shorter). Either all are handed to the OS or the call
    /// fails; the default sends them one by one with
    /// [`send_to`](Self::send_to) and stops at the first error. Returns the
    /// bytes sent.
    fn send_segments(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        async move {
            for chunk in data.chunks(segment_size.max(1)) {
                self.send_to(chunk, dst).await?;
            }
            Ok(data.len())
        }
    }
    /// Whether [`send_segments_marked`](Self::send_segments_marked) sets
    /// the traffic class it is given (false: it sends unmarked).
    fn can_mark(&self) -> bool {
        false
    }
    /// [`send_segments`](Self::send_segments) with the IP traffic-class
    /// byte `tos` (a DiffServ code point shifted left by two, ECN bits
    /// zero) on every datagram. The default ignores `tos`.
    fn send_segments_marked(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
        tos: u8,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        let _ = tos;
        self.send_segments(data, segment_size, dst)
    }
    /// Most buffers one [`recv_batch`](Self::recv_batch) call fills; 1
    /// when the socket receives one datagram per call.
    fn max_recv_batch(&self) -> usize {
        1
    }
    /// Waits for at least one datagram, then receives as many as are
    /// waiting, up to the batch's slots, into `batch` (cleared first). The
    /// default receives one with [`recv_from`](Self::recv_from).
    fn recv_batch(&self, batch: &mut RecvBatch) -> impl Future<Output = io::Result<()>> + Send {
        async move {
            batch.clear();
            let (n, src) = self.recv_from(batch.slot_mut(0)).await?;
            batch.push(0, n, n, src);
            Ok(())
        }
    }
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
    fn max_send_segments(&self) -> usize {
        S::max_send_segments(self)
    }
    fn send_segments(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        S::send_segments(self, data, segment_size, dst)
    }
    fn can_mark(&self) -> bool {
        S::can_mark(self)
    }
    fn send_segments_marked(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
        tos: u8,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        S::send_segments_marked(self, data, segment_size, dst, tos)
    }
    fn max_recv_batch(&self) -> usize {
        S::max_recv_batch(self)
    }
    fn recv_batch(&self, batch: &mut RecvBatch) -> impl Future<Output = io::Result<()>> + Send {
        S::recv_batch(self, batch)
    }
}

/// Buffers for receiving several datagrams with one system call, and the
/// datagrams the last call received.
///
/// `slots` buffers of `slot_len` bytes each. One slot holds one datagram,
/// or, with receive offload (GRO), several datagrams of one source glued
/// together, which [`push`](Self::push) splits at their `stride`.
#[derive(Debug)]
pub struct RecvBatch {
    buf: Vec<u8>,
    slot_len: usize,
    /// Source, start and end in `buf` of each datagram received.
    datagrams: Vec<(SocketAddr, usize, usize)>,
}

impl RecvBatch {
    /// `slots` buffers (at least one) of `slot_len` bytes (at least one).
    pub fn new(slots: usize, slot_len: usize) -> Self {
        let (slots, slot_len) = (slots.max(1), slot_len.max(1));
        Self {
            buf: vec![0; slots * slot_len],
            slot_len,
            datagrams: Vec::with_capacity(slots),
        }
    }

    /// How many buffers.
    pub fn slots(&self) -> usize {
        self.buf.len() / self.slot_len
    }

    /// The size of each buffer.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    /// Buffer `i` to receive into.
    ///
    /// # Panics
    /// If `i` is not below [`slots`](Self::slots).
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let start = i * self.slot_len;
        &mut self.buf[start..start + self.slot_len]
    }

    /// Forgets the datagrams received.
    pub fn clear(&mut self) {
        self.datagrams.clear();
    }

    /// Records that buffer `slot` now holds `len` bytes from `src`: one
    /// datagram, or datagrams of `stride` bytes back to back (the last may
    /// be shorter) when `stride` is below `len`. Lengths beyond the buffer
    /// are cut to it; a `stride` of 0 means one datagram.
    pub fn push(&mut self, slot: usize, len: usize, stride: usize, src: SocketAddr) {
        let start = slot * self.slot_len;
        let end = start + len.min(self.slot_len);
        let stride = if stride == 0 { len.max(1) } else { stride };
        let mut at = start;
        loop {
            let next = (at + stride).min(end);
            self.datagrams.push((src, at, next));
            at = next;
            if at >= end {
                break;
            }
        }
    }

    /// How many datagrams were received.
    pub fn len(&self) -> usize {
        self.datagrams.len()
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// The datagrams received, in order: source and payload.
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &[u8])> + '_ {
        self.datagrams
            .iter()
            .map(|&(src, start, end)| (src, &self.buf[start..end]))
    }
}

/// A tokio UDP socket that sends and receives several datagrams per system
/// call where the OS offers it, through the `quinn-udp` crate (the socket
/// layer of the quinn QUIC stack).
///
/// - **Receive:** `recvmmsg` (Linux, up to [`quinn_udp::BATCH_SIZE`]
///   datagrams per call) and receive offload (GRO: one buffer may hold
///   several datagrams of one source, split again by [`RecvBatch`]); one
///   `recvmsg` per call elsewhere.
/// - **Send:** segmentation offload (GSO, Linux and Windows): consecutive
///   datagrams of one size to one destination go down in one `sendmsg`.
///   `quinn-udp` has no `sendmmsg` (it dropped it for GSO, which moves the
///   copies and the per-datagram work into the kernel's fast path), so
///   datagrams of different sizes or destinations still cost one system
///   call each. Where GSO is missing, or the kernel refuses it at run time
///   (some NIC drivers answer `EIO`), `quinn-udp` falls back to one
///   datagram per call; the refused batch is lost and counted as such.
///
/// Outgoing ECN marks and source addresses are left to the OS. Because the
/// socket may ask for GRO, read it through this type only: a plain
/// `recv_from` on the underlying socket could see glued datagrams.
#[derive(Debug)]
pub struct BatchedUdpSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    /// Datagrams a single-datagram `recv_from` received glued (GRO) to the
    /// one it returned; handed out by the next calls.
    leftover: Mutex<VecDeque<(SocketAddr, Bytes)>>,
}

impl BatchedUdpSocket {
    /// Binds a UDP socket to `addr` and turns on batching where available.
    pub async fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::new(tokio::net::UdpSocket::bind(addr).await?)
    }

    /// [`bind`](Self::bind) without awaiting (binding a UDP socket does
    /// not block), returning the address it got too: for
    /// [`bind_with_tcp`]. Needs a tokio runtime.
    pub(crate) fn bind_now(addr: SocketAddr) -> io::Result<(Self, SocketAddr)> {
        let s = std::net::UdpSocket::bind(addr)?;
        s.set_nonblocking(true)?;
        let local = s.local_addr()?;
        Ok((Self::new(tokio::net::UdpSocket::from_std(s)?)?, local))
    }

    /// Wraps a bound tokio socket, turning on what the OS offers (GRO, the
    /// "don't fragment" flag, reception of ECN marks).
    pub fn new(io: tokio::net::UdpSocket) -> io::Result<Self> {
        let state = UdpSocketState::new((&io).into())?;
        Ok(Self {
            io,
            state,
            leftover: Mutex::new(VecDeque::new()),
        })
    }

    /// Datagrams per receive buffer with GRO (1 without).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// Sets the kernel's receive buffer size (`SO_RCVBUF`, capped by the OS).
    pub fn set_recv_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.state.set_recv_buffer_size((&self.io).into(), bytes)
    }

    /// Sets the kernel's send buffer size (`SO_SNDBUF`, capped by the OS).
    pub fn set_send_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.state.set_send_buffer_size((&self.io).into(), bytes)
    }

    /// The underlying tokio socket.
    pub fn get_ref(&self) -> &tokio::net::UdpSocket {
        &self.io
    }

    fn pop_leftover(&self) -> Option<(SocketAddr, Bytes)> {
        self.leftover
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }

    async fn send(
        &self,
        data: &[u8],
        segment_size: Option<usize>,
        dst: SocketAddr,
    ) -> io::Result<usize> {
        let transmit = quinn_udp::Transmit {
            destination: dst,
            ecn: None,
            contents: data,
            segment_size,
            src_ip: None,
        };
        self.io
            .async_io(Interest::WRITABLE, || {
                self.state.try_send((&self.io).into(), &transmit)
            })
            .await?;
        Ok(data.len())
    }
}

impl DatagramSocket for BatchedUdpSocket {
    fn send_to(
        &self,
        data: &[u8],
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        self.send(data, None, dst)
    }

    /// One datagram. A buffer that arrives with several glued together
    /// (GRO) is split: the first is returned, the others by the next calls.
    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        if let Some((src, data)) = self.pop_leftover() {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            return Ok((n, src));
        }
        let mut meta = [RecvMeta::default()];
        self.io
            .async_io(Interest::READABLE, || {
                let mut bufs = [IoSliceMut::new(buf)];
                self.state.recv((&self.io).into(), &mut bufs, &mut meta)
            })
            .await?;
        let m = meta[0];
        let len = m.len.min(buf.len());
        let first = if m.stride > 0 { m.stride.min(len) } else { len };
        if first < len {
            let mut rest = self.leftover.lock().unwrap_or_else(PoisonError::into_inner);
            for chunk in buf[first..len].chunks(m.stride) {
                rest.push_back((m.addr, Bytes::copy_from_slice(chunk)));
            }
        }
        Ok((first, m.addr))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn max_send_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn send_segments(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
    ) -> impl Future<Output = io::Result<usize>> + Send {
        let segment_size = (segment_size > 0 && segment_size < data.len()).then_some(segment_size);
        self.send(data, segment_size, dst)
    }

    #[cfg(target_os = "linux")]
    fn can_mark(&self) -> bool {
        true
    }

    /// quinn-udp writes an `IP_TOS` control message with the ECN bits on
    /// every send, which overrides a traffic class set on the socket, and
    /// takes no DSCP; so marked datagrams go out through `sendmsg` here,
    /// with their own `IP_TOS` (or `IPV6_TCLASS`) and, for several
    /// segments, `UDP_SEGMENT` (GSO) control messages. Linux only.
    #[cfg(target_os = "linux")]
    async fn send_segments_marked(
        &self,
        data: &[u8],
        segment_size: usize,
        dst: SocketAddr,
        tos: u8,
    ) -> io::Result<usize> {
        let v6 = self.io.local_addr()?.is_ipv6();
        let mut ctrl = Vec::with_capacity(64);
        let (level, kind) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        push_cmsg(
            &mut ctrl,
            level,
            kind,
            &libc::c_int::from(tos).to_ne_bytes(),
        );
        if segment_size > 0 && segment_size < data.len() {
            let seg = u16::try_from(segment_size).map_err(io::Error::other)?;
            push_cmsg(
                &mut ctrl,
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                &seg.to_ne_bytes(),
            );
        }
        let addr = socket2::SockAddr::from(dst);
        self.io
            .async_io(Interest::WRITABLE, || {
                // Built per try: the header holds raw pointers (not Send).
                let bufs = [io::IoSlice::new(data)];
                let msg = socket2::MsgHdr::new()
                    .with_addr(&addr)
                    .with_buffers(&bufs)
                    .with_control(&ctrl);
                socket2::SockRef::from(&self.io).sendmsg(&msg, 0)
            })
            .await
    }

    fn max_recv_batch(&self) -> usize {
        quinn_udp::BATCH_SIZE
    }

    async fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<()> {
        batch.clear();
        // Datagrams a `recv_from` left behind come first, one per call.
        if let Some((src, data)) = self.pop_leftover() {
            let n = data.len().min(batch.slot_len());
            batch.slot_mut(0)[..n].copy_from_slice(&data[..n]);
            batch.push(0, n, n, src);
            return Ok(());
        }
        let slots = batch.slots().min(quinn_udp::BATCH_SIZE);
        let slot_len = batch.slot_len();
        let mut meta = [RecvMeta::default(); quinn_udp::BATCH_SIZE];
        let n = self
            .io
            .async_io(Interest::READABLE, || {
                let mut bufs: Vec<IoSliceMut<'_>> = batch
                    .buf
                    .chunks_mut(slot_len)
                    .take(slots)
                    .map(IoSliceMut::new)
                    .collect();
                self.state
                    .recv((&self.io).into(), &mut bufs, &mut meta[..slots])
            })
            .await?;
        for (i, m) in meta[..n].iter().enumerate() {
            batch.push(i, m.len, m.stride, m.addr);
        }
        Ok(())
    }
}

/// Appends one control message (`cmsghdr`: a `size_t` length, the level
/// and type as `int`s, then the data, padded to `size_t` alignment), as
/// `CMSG_SPACE` lays it out on Linux.
#[cfg(target_os = "linux")]
fn push_cmsg(out: &mut Vec<u8>, level: libc::c_int, kind: libc::c_int, data: &[u8]) {
    let align = std::mem::size_of::<usize>();
    let header = std::mem::size_of::<libc::cmsghdr>();
    let len = header + data.len();
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&level.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.resize(out.len() + header - align - 8, 0);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(align), 0);
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

/// Binds a UDP socket (with `udp`, which returns it and the address it
/// got) and a TCP listener on the same port, for endpoints that take both
/// at one address (the session, Reliable Blast UDP, the emulator's TCP
/// relay). With port 0 the OS picks the UDP port, and another process's
/// TCP socket may already hold that port: the pair is then tried again
/// (up to 16 times). A fixed port is tried once.
pub(crate) async fn bind_with_tcp<U>(
    addr: SocketAddr,
    mut udp: impl FnMut(SocketAddr) -> io::Result<(U, SocketAddr)>,
) -> io::Result<(U, tokio::net::TcpListener)> {
    let tries = if addr.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let (u, local) = udp(addr)?;
        match tokio::net::TcpListener::bind(local).await {
            Ok(l) => return Ok((u, l)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port free for both TCP and UDP")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Another process's TCP socket on the port UDP was given: a picked
    /// port is tried again, a fixed one fails at once.
    #[tokio::test]
    async fn a_udp_port_whose_tcp_twin_is_taken_is_picked_again() {
        let held = std::net::TcpListener::bind(addr(0)).unwrap();
        let taken = held.local_addr().unwrap();
        let mut calls = 0;
        let (udp, tcp) = bind_with_tcp(addr(0), |at| {
            calls += 1;
            BatchedUdpSocket::bind_now(if calls == 1 { taken } else { at })
        })
        .await
        .unwrap();
        assert_eq!(calls, 2);
        let port = udp.local_addr().unwrap().port();
        assert_ne!(port, taken.port());
        assert_eq!(tcp.local_addr().unwrap().port(), port);

        let mut calls = 0;
        let err = bind_with_tcp(taken, |at| {
            calls += 1;
            BatchedUdpSocket::bind_now(at)
        })
        .await
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(calls, 1);
    }

    #[test]
    fn recv_batch_splits_glued_datagrams_at_their_stride() {
        let mut b = RecvBatch::new(2, 16);
        b.slot_mut(0)[..10].copy_from_slice(b"aaaabbbbcc");
        b.slot_mut(1)[..3].copy_from_slice(b"xyz");
        b.push(0, 10, 4, addr(1));
        b.push(1, 3, 3, addr(2));
        let got: Vec<(SocketAddr, &[u8])> = b.iter().collect();
        assert_eq!(
            got,
            vec![
                (addr(1), &b"aaaa"[..]),
                (addr(1), &b"bbbb"[..]),
                (addr(1), &b"cc"[..]),
                (addr(2), &b"xyz"[..]),
            ]
        );
        b.clear();
        assert!(b.is_empty());
        // An empty datagram is still a datagram.
        b.push(0, 0, 0, addr(3));
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![(addr(3), &b""[..])]);
    }

    /// Many datagrams of one size sent with GSO arrive as many datagrams,
    /// in order, whether read in batches or one by one.
    #[tokio::test]
    async fn batched_sockets_send_and_receive_segments_over_loopback() {
        let lo = addr(0);
        let tx = BatchedUdpSocket::bind(lo).await.expect("bind");
        let rx = BatchedUdpSocket::bind(lo).await.expect("bind");
        let rx_plain = BatchedUdpSocket::bind(lo).await.expect("bind");
        let dst = rx.local_addr().expect("bound");
        let segs = tx.max_send_segments().clamp(1, 8);
        let data: Vec<u8> = (0..segs * 10 + 3).map(|i| (i % 251) as u8).collect();
        for to in [dst, rx_plain.local_addr().expect("bound")] {
            let n = tx.send_segments(&data, 10, to).await.expect("send");
            assert_eq!(n, data.len());
        }
        let expected: Vec<&[u8]> = data.chunks(10).collect();
        let mut got = Vec::new();
        let mut batch = RecvBatch::new(rx.max_recv_batch(), 65_536);
        while got.len() < expected.len() {
            let r =
                tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv_batch(&mut batch));
            r.await.expect("in time").expect("recv");
            got.extend(batch.iter().map(|(_, d)| d.to_vec()));
        }
        assert_eq!(got, expected);
        let mut buf = [0u8; 65_536];
        for want in &expected {
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                rx_plain.recv_from(&mut buf),
            );
            let (n, src) = r.await.expect("in time").expect("recv");
            assert_eq!((&buf[..n], src), (*want, tx.local_addr().expect("bound")));
        }
    }
}
