//! Two classes of service for connections, on two threads of different OS
//! priority.
//!
//! The core task and the tasks of connections that keep up run on the
//! runtime [`start`](super::start) was called on: the *interactive*
//! class. The tasks of every other connection run on a runtime of the
//! relay's own, one thread at a lower OS priority
//! ([`ServerConfig::background_nice`](super::ServerConfig::background_nice)):
//! the *background* class. A connection is in the background
//!
//! - before its `Hello` is accepted: accepts, TLS handshakes, HTTP
//!   upgrades, silent and half-open connections, garbage;
//! - after a fatal error: writing it, and the lingering close that reads
//!   what the client still sends (an oversized frame's body);
//! - while it does not keep up: its send window is full, its writer is
//!   backed up, or the relay stopped reading it (backpressure), so it
//!   could not take more now anyway (slow readers, clients that do not
//!   read their replies).
//!
//! Why threads: tokio has no task priorities. On one core, a hundred
//! slow readers crediting at once put a hundred reads and writes in the
//! one run queue ahead of a member's next frame, with the relay at a
//! sixth of a core (`docs/results/reliability.md`, fourth round, has the
//! numbers with and without this thread). With the hostile work on a thread of
//! lower priority, the kernel runs the interactive thread as soon as a
//! member's frame wakes it, the way Corona runs its Client Receiver and
//! Sender threads at the priority of their groups (Litiu & Prakash §4.5):
//! here the priority of a connection's standing.
//!
//! The core task decides the class ([`Class::set`]); a connection's tasks
//! move at their next wake-up ([`Placement::spawn`]). The sockets stay
//! registered with the interactive runtime's I/O driver (they were
//! accepted there), which wakes a background task as it wakes any other:
//! what moves is the reading, writing and parsing, not the readiness.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::{AbortHandle, Abortable};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

/// The class of connections that keep up (and of the core task).
pub(super) const INTERACTIVE: u8 = 0;
/// The class of connections that do not, or not yet (module docs).
pub(super) const BACKGROUND: u8 = 1;

/// A connection's class: written by the core task, read by the
/// connection's tasks each time they are polled.
#[derive(Debug)]
pub(super) struct Class(AtomicU8);

impl Class {
    /// A new connection: in the background until its `Hello` is accepted.
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self(AtomicU8::new(BACKGROUND)))
    }

    pub(super) fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, class: u8) {
        self.0.store(class, Ordering::Relaxed);
    }
}

/// Where a connection's tasks run: a runtime handle per class.
#[derive(Clone, Debug)]
pub(super) struct Placement {
    handles: Arc<[Handle; 2]>,
    /// `false` when both classes are the same runtime (no background
    /// thread): tasks never move.
    split: bool,
}

impl Placement {
    /// The relay's placement: its background runtime (`nice`: the OS
    /// priority of its thread; `None`: no background thread, every task
    /// on the current runtime) and the owner that stops it when dropped.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub(super) fn start(nice: Option<i32>) -> std::io::Result<(Self, Option<Background>)> {
        let here = Handle::current();
        let Some(nice) = nice else {
            return Ok((
                Self {
                    handles: Arc::new([here.clone(), here]),
                    split: false,
                },
                None,
            ));
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relay-background")
            .on_thread_start(move || lower_priority(nice))
            .enable_all()
            .build()?;
        let bg = rt.handle().clone();
        Ok((
            Self {
                handles: Arc::new([here, bg]),
                split: true,
            },
            Some(Background(Some(rt))),
        ))
    }

    /// Runs `fut` on the runtime of `class`'s class, moving it whenever
    /// that changes: when it is woken and the class says another runtime,
    /// it is handed, unfinished, to a new task there, whose first poll
    /// re-registers every waker it waits on (sockets, channels, timers)
    /// with that task.
    pub(super) fn spawn<F>(&self, class: &Arc<Class>, fut: F) -> Placed
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (done_tx, done) = oneshot::channel();
        let (abort, reg) = AbortHandle::new_pair();
        let fut = Abortable::new(
            async move {
                fut.await;
                let _ = done_tx.send(());
            },
            reg,
        );
        let moving = Moving {
            fut: Box::pin(fut.map(drop)),
            class: class.clone(),
            placement: self.clone(),
        };
        let here = if self.split { class.get() } else { INTERACTIVE };
        self.handles[usize::from(here)].spawn(Hop {
            task: Some(moving),
            here,
        });
        Placed { done, abort }
    }
}

/// Owns the background runtime: stops it (without waiting for its tasks,
/// so it may be dropped inside the relay's own runtime) when dropped.
#[derive(Debug)]
pub(super) struct Background(Option<Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// A placed task: whether it has finished, and a way to stop it.
#[derive(Debug)]
pub(super) struct Placed {
    done: oneshot::Receiver<()>,
    abort: AbortHandle,
}

impl Placed {
    /// Waits until the task finished (or was stopped, or its runtime
    /// went away).
    pub(super) async fn finished(&mut self) {
        let _ = (&mut self.done).await;
    }

    /// Stops the task at its next poll.
    pub(super) fn abort(&self) {
        self.abort.abort();
    }
}

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Moving {
    fut: BoxedTask,
    class: Arc<Class>,
    placement: Placement,
}

/// The task a placed future runs in, on the runtime of class `here`.
struct Hop {
    task: Option<Moving>,
    here: u8,
}

impl Future for Hop {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let here = self.here;
        let Some(t) = self.task.as_mut() else {
            return Poll::Ready(());
        };
        let want = t.class.get();
        if t.placement.split && want != here {
            // Moved, not finished: this task ends and a new one polls the
            // same future on the other runtime. If that runtime is shut
            // down, the future is dropped, as at any runtime's shutdown.
            let t = self.task.take().expect("looked at above");
            let h = t.placement.handles[usize::from(want)].clone();
            h.spawn(Self {
                task: Some(t),
                here: want,
            });
            return Poll::Ready(());
        }
        let r = t.fut.as_mut().poll(cx);
        if t.placement.split && here == BACKGROUND {
            yield_to_interactive();
        }
        r
    }
}

/// Lets the interactive thread run now if it is waiting for the CPU,
/// after every poll of a background task.
///
/// A lower priority alone does not do it: under the kernel's EEVDF
/// scheduler, a thread that has just been picked keeps the CPU until it
/// has used its time slice (about a millisecond) before a woken thread of
/// higher priority may preempt it ("run to parity"). With a hundred slow
/// readers crediting, the interactive thread woke behind the background
/// thread 332 times in 30 s for more than 0.2 ms each, 0.4 ms on average
/// (`perf sched` on `examples/relay_hostile.rs --isolate --kinds slow`).
/// Yielding gives up the rest of that slice, so a member's frame waits
/// for one background poll at most. With nothing else runnable the call
/// returns at once; the background work itself only waits for threads
/// the kernel would run first anyway.
fn yield_to_interactive() {
    std::thread::yield_now();
}

/// Lowers the calling thread's OS priority to `nice` (Linux: per thread).
/// A failure is logged, not fatal: the relay then works as with one class.
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    {
        let tid = rustix::thread::gettid();
        if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
            tracing::warn!(error = %e, nice, "relay could not lower its background thread's priority");
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Elsewhere `setpriority` sets the whole process's priority, not
        // the thread's: leave it.
        let _ = nice;
        tracing::debug!("relay background thread at the process's priority (not Linux)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The name of the thread the current task runs on.
    fn thread_name() -> String {
        std::thread::current().name().unwrap_or_default().to_owned()
    }

    type Seen = tokio::sync::mpsc::UnboundedReceiver<(i32, String)>;

    /// Wakes the task once it waits (`parked`), so that this is a new
    /// wake-up and not a message it finds on its way back to waiting;
    /// what it counted and where it ran.
    async fn step(
        tx: &tokio::sync::mpsc::UnboundedSender<()>,
        parked: &tokio::sync::Notify,
        seen: &mut Seen,
    ) -> (i32, String) {
        tokio::time::timeout(Duration::from_secs(10), parked.notified())
            .await
            .expect("the task waits");
        tx.send(()).expect("the task runs");
        tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await
            .expect("the task answers")
            .expect("the task runs")
    }

    #[tokio::test]
    async fn a_task_moves_to_its_class_at_its_next_wakeup_and_keeps_its_state() {
        let (placement, bg) = Placement::start(Some(0)).expect("a runtime");
        let class = Class::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let parked = Arc::new(tokio::sync::Notify::new());
        let waits = parked.clone();
        let mut task = placement.spawn(&class, async move {
            let mut n = 0;
            let mut next = |cx: &mut Context<'_>| {
                let r = rx.poll_recv(cx);
                if r.is_pending() {
                    waits.notify_one();
                }
                r
            };
            while std::future::poll_fn(&mut next).await.is_some() {
                n += 1;
                let _ = seen_tx.send((n, thread_name()));
            }
        });
        assert_eq!(
            step(&tx, &parked, &mut seen).await,
            (1, "relay-background".to_owned())
        );
        class.set(INTERACTIVE);
        let (n, name) = step(&tx, &parked, &mut seen).await;
        assert_eq!(n, 2, "the same future, its count kept");
        assert_ne!(name, "relay-background");
        class.set(BACKGROUND);
        assert_eq!(
            step(&tx, &parked, &mut seen).await,
            (3, "relay-background".to_owned())
        );
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), task.finished())
            .await
            .expect("it finishes once its channel closes");
        drop(bg);
    }

    #[tokio::test]
    async fn an_aborted_task_finishes_and_a_stopped_runtime_drops_its_tasks() {
        let (placement, bg) = Placement::start(Some(0)).expect("a runtime");
        let class = Class::new();
        let mut stuck = placement.spawn(&class, std::future::pending());
        stuck.abort();
        tokio::time::timeout(Duration::from_secs(10), stuck.finished())
            .await
            .expect("aborted");
        let mut left = placement.spawn(&class, std::future::pending());
        drop(bg);
        tokio::time::timeout(Duration::from_secs(10), left.finished())
            .await
            .expect("dropped with its runtime");
        // Spawning after the runtime stopped is no panic either.
        let mut late = placement.spawn(&class, std::future::pending());
        tokio::time::timeout(Duration::from_secs(10), late.finished())
            .await
            .expect("dropped at once");
    }

    #[tokio::test]
    async fn without_a_background_thread_nothing_moves() {
        let (placement, bg) = Placement::start(None).expect("no runtime needed");
        assert!(bg.is_none());
        let class = Class::new();
        let (tx, rx) = oneshot::channel();
        let mut t = placement.spawn(&class, async move {
            let _ = tx.send(thread_name());
        });
        t.finished().await;
        assert_ne!(rx.await.expect("ran"), "relay-background");
    }
}
