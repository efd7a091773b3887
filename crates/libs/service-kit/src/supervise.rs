//! Running a service's listeners together: the signal stops them all, and
//! so does the first one to end, so that a failed listener never leaves the
//! others serving a half-working service.

use std::future::Future;
use std::pin::Pin;

use anyhow::Context as _;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// One listener's server: its name (for errors) and its future, which ends
/// once `stop` is cancelled and its connections have drained.
pub type Server = (
    &'static str,
    Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
);

/// Runs every server until all have ended. `shutdown` cancels `stop`; so
/// does any server that ends, with an error or not. Returns the first
/// error (a panic counts as one).
pub async fn supervise(
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop: CancellationToken,
    servers: Vec<Server>,
) -> anyhow::Result<()> {
    let watcher = tokio::spawn({
        let stop = stop.clone();
        async move {
            tokio::select! {
                () = shutdown => {
                    tracing::info!("shutting down: draining requests in flight");
                    stop.cancel();
                }
                () = stop.cancelled() => {}
            }
        }
    });
    let mut running = JoinSet::new();
    for (name, server) in servers {
        let stop = stop.clone();
        running.spawn(async move {
            let r = server.await.with_context(|| format!("serving {name}"));
            if let Err(e) = &r {
                tracing::error!(
                    error = format!("{e:#}"),
                    "a listener failed: stopping the others"
                );
            }
            stop.cancel();
            r
        });
    }
    let mut first = None;
    while let Some(joined) = running.join_next().await {
        let r = joined.context("a listener panicked").and_then(|r| r);
        if let Err(e) = r {
            stop.cancel();
            first.get_or_insert(e);
        }
    }
    watcher.abort();
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_first_listener_to_fail_stops_the_others_whichever_it_is() {
        let stop = CancellationToken::new();
        let waits = |stop: CancellationToken| -> Server {
            (
                "waits",
                Box::pin(async move {
                    stop.cancelled().await;
                    Ok(())
                }),
            )
        };
        // The failing one is last in the list: the others are stopped all
        // the same, and its error is the answer.
        let servers = vec![
            waits(stop.clone()),
            waits(stop.clone()),
            (
                "fails",
                Box::pin(async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    anyhow::bail!("bind went away")
                }) as Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
            ),
        ];
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            supervise(std::future::pending(), stop, servers),
        )
        .await
        .expect("every listener stopped");
        let e = r.expect_err("the failure is the answer");
        assert!(
            format!("{e:#}").contains("serving fails: bind went away"),
            "{e:#}"
        );
    }

    #[tokio::test]
    async fn the_signal_stops_every_listener_and_all_is_well() {
        let stop = CancellationToken::new();
        let servers: Vec<Server> = (0..3)
            .map(|_| {
                let stop = stop.clone();
                (
                    "waits",
                    Box::pin(async move {
                        stop.cancelled().await;
                        Ok(())
                    })
                        as Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
                )
            })
            .collect();
        tokio::time::timeout(
            Duration::from_secs(5),
            supervise(std::future::ready(()), stop, servers),
        )
        .await
        .expect("stopped")
        .expect("no error");
    }
}
