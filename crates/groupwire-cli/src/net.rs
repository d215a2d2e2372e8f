//! What the real-socket commands share: the runtime and how they stop.

use std::time::Duration;

use anyhow::Context;

/// A single-threaded tokio runtime: each command's loops are light, and one
/// thread leaves the machine's other cores to the peers it talks to.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Completes on Ctrl-C, or after `limit` if given.
pub(crate) async fn shutdown_signal(limit: Option<Duration>) {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handler (unusual): only --duration can stop us.
            std::future::pending::<()>().await;
        }
    };
    match limit {
        Some(d) => tokio::select! {
            () = ctrl_c => {},
            () = tokio::time::sleep(d) => {},
        },
        None => ctrl_c.await,
    }
}
