//! The shutdown signal both services stop on: Ctrl-C or SIGTERM.

use std::future::Future;

/// Completes on Ctrl-C or SIGTERM, whichever comes first. A signal whose
/// handler cannot be installed is logged and waited for no longer: the
/// service goes on serving and stops on the other one (a service that
/// stopped because it could not listen for a signal would be a strange
/// way to fail).
pub async fn shutdown_signal() {
    first_of(ctrl_c(), sigterm()).await;
}

async fn ctrl_c() -> std::io::Result<()> {
    tokio::signal::ctrl_c().await
}

#[cfg(unix)]
async fn sigterm() -> std::io::Result<()> {
    let mut s = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    s.recv().await;
    Ok(())
}

#[cfg(not(unix))]
async fn sigterm() -> std::io::Result<()> {
    std::future::pending().await
}

/// Completes when either signal future completes with `Ok`; one that fails
/// is logged and counts as never coming.
async fn first_of(
    ctrl_c: impl Future<Output = std::io::Result<()>>,
    term: impl Future<Output = std::io::Result<()>>,
) {
    let ctrl_c = async {
        if let Err(e) = ctrl_c.await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C: stopping on SIGTERM only");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        if let Err(e) = term.await {
            tracing::error!(error = %e, "cannot listen for SIGTERM: stopping on Ctrl-C only");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn failed() -> std::future::Ready<std::io::Result<()>> {
        std::future::ready(Err(std::io::Error::other("no handler")))
    }

    #[tokio::test]
    async fn a_signal_that_cannot_be_listened_for_does_not_stop_the_service() {
        // Ctrl-C's handler failed and SIGTERM has not come: still serving.
        let waiting = tokio::time::timeout(
            Duration::from_millis(200),
            first_of(failed(), std::future::pending()),
        )
        .await;
        assert!(waiting.is_err(), "stopped without a signal");
        // The same the other way round.
        let waiting = tokio::time::timeout(
            Duration::from_millis(200),
            first_of(std::future::pending(), failed()),
        )
        .await;
        assert!(waiting.is_err(), "stopped without a signal");
        // And the other signal still stops it.
        tokio::time::timeout(
            Duration::from_secs(5),
            first_of(failed(), std::future::ready(Ok(()))),
        )
        .await
        .expect("SIGTERM stops it");
    }
}
