use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use groupwire_proto::{Instant, Machine, Transmit, Transport};
use tokio::net::UdpSocket;

use super::*;
use crate::send::gso_run;

/// Echoes every datagram, reports it as an event, and sends what commands
/// ask; fires `Ping` events at a scripted deadline.
#[derive(Debug, Default)]
struct Echo {
    out: VecDeque<Transmit>,
    events: VecDeque<String>,
    deadline: Option<Instant>,
}

impl Echo {
    fn send(&mut self, dst: SocketAddr, data: &'static [u8]) {
        self.out.push_back(Transmit {
            dst,
            transport: Transport::Udp,
            payload: Bytes::from_static(data),
        });
    }
}

impl Machine for Echo {
    type Event = String;
    fn handle_datagram(&mut self, _now: Instant, src: SocketAddr, data: &[u8]) {
        self.events
            .push_back(String::from_utf8_lossy(data).into_owned());
        if data != b"pong" {
            self.out.push_back(Transmit {
                dst: src,
                transport: Transport::Udp,
                payload: Bytes::from_static(b"pong"),
            });
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
            self.events
                .push_back(format!("timeout at {}ms", now.as_micros() / 1000));
        }
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.out.pop_front()
    }
    fn poll_event(&mut self) -> Option<String> {
        self.events.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }
}

async fn loopback() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").await.expect("bind loopback")
}

#[tokio::test]
async fn exchanges_datagrams_between_two_drivers() {
    let clock = Clock::start();
    let (a, ha, mut ea) = Driver::new(Echo::default(), loopback().await, clock).expect("driver");
    let (b, hb, mut eb) = Driver::new(Echo::default(), loopback().await, clock).expect("driver");
    let (ta, tb) = (a.spawn(), b.spawn());
    let to = hb.local_addr();
    ha.command(move |m, _| m.send(to, b"ping"))
        .await
        .expect("running");
    let got_b = tokio::time::timeout(Duration::from_secs(5), eb.recv()).await;
    assert_eq!(got_b.expect("in time").as_deref(), Some("ping"));
    let got_a = tokio::time::timeout(Duration::from_secs(5), ea.recv()).await;
    assert_eq!(got_a.expect("in time").as_deref(), Some("pong"));
    assert_eq!(ha.stats().datagrams_sent, 1);
    assert_eq!(ha.stats().datagrams_received, 1);
    assert_eq!(ha.stats().commands, 1);
    drop((ha, hb));
    ta.await.expect("task").expect("driver ends cleanly");
    tb.await.expect("task").expect("driver ends cleanly");
}

#[tokio::test(start_paused = true)]
async fn fires_the_machine_deadline_on_tokio_time() {
    let clock = Clock::start();
    let echo = Echo {
        deadline: Some(Instant::from_millis(300)),
        ..Echo::default()
    };
    let (d, h, mut ev) = Driver::new(echo, loopback().await, clock).expect("driver");
    let task = d.spawn();
    let e = ev.recv().await.expect("an event");
    assert_eq!(e, "timeout at 300ms");
    assert_eq!(clock.now(), Instant::from_millis(300));
    // A call reads machine state at the driver's time.
    let deadline = h.call(|m, _| m.deadline).await.expect("running");
    assert_eq!(deadline, None);
    drop(h);
    let m = task.await.expect("task").expect("clean stop");
    assert!(m.out.is_empty());
}

#[tokio::test]
async fn counts_a_failed_send_as_loss_and_keeps_running() {
    let clock = Clock::start();
    let (d, h, _ev) = Driver::new(Echo::default(), loopback().await, clock).expect("driver");
    let task = d.spawn();
    // An IPv6 destination from an IPv4 socket: the OS refuses the send.
    let v6: SocketAddr = "[::1]:9".parse().expect("address");
    h.command(move |m, _| m.send(v6, b"lost"))
        .await
        .expect("running");
    // A call completes only after the previous command was drained.
    h.call(|_, _| ()).await.expect("still running");
    let s = h.stats();
    assert_eq!((s.send_errors, s.datagrams_sent), (1, 0), "{s:?}");
    drop(h);
    task.await
        .expect("task")
        .expect("a failed send is not an error");
}

#[tokio::test]
async fn keeps_running_when_the_application_drops_events() {
    let clock = Clock::start();
    let (d, h, ev) = Driver::new(Echo::default(), loopback().await, clock).expect("driver");
    drop(ev);
    let task = d.spawn();
    let peer = loopback().await;
    peer.send_to(b"hello", h.local_addr()).await.expect("send");
    let mut buf = [0u8; 16];
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), peer.recv_from(&mut buf))
        .await
        .expect("in time")
        .expect("recv");
    assert_eq!(&buf[..n], b"pong");
    h.call(|_, _| ()).await.expect("still running");
    assert_eq!(h.stats().events_dropped, 1);
    drop(h);
    task.await.expect("task").expect("clean stop");
}

fn udp(dst: SocketAddr, len: usize) -> Transmit {
    Transmit {
        dst,
        transport: Transport::Udp,
        payload: Bytes::from(vec![0u8; len]),
    }
}

#[test]
fn gso_runs_join_one_size_to_one_destination() {
    let a: SocketAddr = "127.0.0.1:1".parse().expect("address");
    let b: SocketAddr = "127.0.0.1:2".parse().expect("address");
    let ts = vec![
        udp(a, 10),
        udp(a, 10),
        udp(a, 10),
        udp(a, 4), // shorter: ends the run, inside it
        udp(a, 10),
        udp(b, 10), // another destination
        udp(b, 12), // longer
        udp(b, 12),
    ];
    let runs = |max| {
        let mut out = Vec::new();
        let mut i = 0;
        while i < ts.len() {
            let end = gso_run(&ts, i, max);
            out.push(end - i);
            i = end;
        }
        out
    };
    assert_eq!(runs(64), vec![4, 1, 1, 2]);
    assert_eq!(runs(2), vec![2, 2, 1, 1, 2]);
    assert_eq!(runs(1), vec![1; 8]);
    // No run beyond the largest UDP payload.
    let big = vec![udp(a, 30_000); 3];
    assert_eq!(gso_run(&big, 0, 64), 2);
}

/// Records what the driver sends; offers GSO of up to four segments.
#[derive(Default)]
struct Recorder {
    calls: std::sync::Mutex<Vec<(usize, usize)>>,
}

impl DatagramSocket for Recorder {
    async fn send_to(&self, data: &[u8], _dst: SocketAddr) -> io::Result<usize> {
        self.calls
            .lock()
            .expect("lock")
            .push((data.len(), data.len()));
        Ok(data.len())
    }
    async fn recv_from(&self, _buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        std::future::pending().await
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok("127.0.0.1:9".parse().expect("address"))
    }
    fn max_send_segments(&self) -> usize {
        4
    }
    async fn send_segments(&self, data: &[u8], size: usize, _dst: SocketAddr) -> io::Result<usize> {
        self.calls.lock().expect("lock").push((data.len(), size));
        Ok(data.len())
    }
}

#[tokio::test]
async fn sends_a_turns_transmits_in_gso_runs() {
    let socket = Arc::new(Recorder::default());
    let (d, h, _ev) =
        Driver::new(Echo::default(), Arc::clone(&socket), Clock::start()).expect("driver");
    let task = d.spawn();
    let to: SocketAddr = "127.0.0.1:7".parse().expect("address");
    h.command(move |m, _| {
        for _ in 0..10 {
            m.send(to, b"ping");
        }
        m.send(to, b"pong!");
    })
    .await
    .expect("running");
    h.call(|_, _| ()).await.expect("running");
    let s = h.stats();
    assert_eq!(
        (s.datagrams_sent, s.send_calls, s.bytes_sent),
        (11, 4, 45),
        "{s:?}"
    );
    drop(h);
    task.await.expect("task").expect("clean stop");
    let calls = socket.calls.lock().expect("lock").clone();
    assert_eq!(calls, vec![(16, 4), (16, 4), (8, 4), (5, 5)]);
}

/// The batched socket end to end: one command's 100 datagrams leave in GSO
/// runs where the OS has GSO and arrive as 100 datagrams, in order.
#[tokio::test]
async fn batched_sockets_carry_every_datagram_between_drivers() {
    let clock = Clock::start();
    let lo: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let sa = crate::BatchedUdpSocket::bind(lo).await.expect("bind");
    let sb = crate::BatchedUdpSocket::bind(lo).await.expect("bind");
    let gso = sa.max_send_segments() > 1;
    let (a, ha, mut ea) = Driver::new(Echo::default(), sa, clock).expect("driver");
    let (b, hb, mut eb) = Driver::new(Echo::default(), sb, clock).expect("driver");
    let (ta, tb) = (a.spawn(), b.spawn());
    let to = hb.local_addr();
    ha.command(move |m, _| {
        for _ in 0..100 {
            m.send(to, b"ping");
        }
    })
    .await
    .expect("running");
    for _ in 0..100 {
        let got = tokio::time::timeout(Duration::from_secs(5), eb.recv()).await;
        assert_eq!(got.expect("in time").as_deref(), Some("ping"));
    }
    // b answers each with a pong, from one turn per receive call.
    for _ in 0..100 {
        let got = tokio::time::timeout(Duration::from_secs(5), ea.recv()).await;
        assert_eq!(got.expect("in time").as_deref(), Some("pong"));
    }
    let s = ha.stats();
    assert_eq!(
        (s.datagrams_sent, s.datagrams_received),
        (100, 100),
        "{s:?}"
    );
    if gso {
        assert!(s.send_calls < 100, "GSO joined nothing: {s:?}");
    }
    drop((ha, hb));
    ta.await.expect("task").expect("driver ends cleanly");
    tb.await.expect("task").expect("driver ends cleanly");
}
