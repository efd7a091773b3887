//! How the REST listeners log a failed answer: a server error at ERROR as
//! tower-http does, except a 501 (the client's mistake) at DEBUG, and a
//! flood of 503s once a second with a count.

use std::time::Duration;

/// 501 Not Implemented: the client asked for something this server does
/// not do (a compression, a method form). It is the client's mistake, not a
/// failure of the server: neither an error on the span nor an ERROR log.
pub(crate) fn asked_for_the_unimplemented(status: http::StatusCode) -> bool {
    status == http::StatusCode::NOT_IMPLEMENTED
}

/// One log line a second for a kind of event, counting the ones not logged.
pub struct Throttle {
    last: std::sync::Mutex<Option<std::time::Instant>>,
    skipped: std::sync::atomic::AtomicU64,
}

impl Throttle {
    pub const fn new() -> Throttle {
        Throttle {
            last: std::sync::Mutex::new(None),
            skipped: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `Some(events not logged since the last line)` when this one is to
    /// be logged: the first, and then one a second at most.
    pub fn admit(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let now = std::time::Instant::now();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        *last = Some(now);
        Some(self.skipped.swap(0, Ordering::Relaxed))
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new()
    }
}

/// The 503s of the REST listeners.
static UNAVAILABLE_LOG: Throttle = Throttle::new();

/// tower-http's `on_failure` for the REST listeners: a server error logged
/// at ERROR as tower-http does, except a 501 ([`asked_for_the_unimplemented`]),
/// logged at DEBUG, and a 503 (shed, or the store down), logged once a
/// second at most with the count of those not logged.
#[derive(Debug, Clone, Copy, Default)]
pub struct OnHttpFailure;

impl tower_http::trace::OnFailure<tower_http::classify::ServerErrorsFailureClass>
    for OnHttpFailure
{
    fn on_failure(
        &mut self,
        class: tower_http::classify::ServerErrorsFailureClass,
        latency: Duration,
        _span: &tracing::Span,
    ) {
        use tower_http::classify::ServerErrorsFailureClass as C;
        let ms = latency.as_millis();
        match class {
            C::StatusCode(s) if asked_for_the_unimplemented(s) => {
                tracing::debug!(
                    status = s.as_u16(),
                    latency_ms = ms,
                    "the client asked for what this server does not implement"
                );
            }
            // Shed, or the store down: under a flood, one line a second
            // saying how many, rather than one per request.
            C::StatusCode(s) if s == http::StatusCode::SERVICE_UNAVAILABLE => {
                if let Some(more) = UNAVAILABLE_LOG.admit() {
                    tracing::error!(
                        classification = %s,
                        latency_ms = ms,
                        not_logged_since = more,
                        "response failed (at most one such line a second)"
                    );
                }
            }
            C::StatusCode(s) => {
                tracing::error!(classification = %s, latency_ms = ms, "response failed");
            }
            C::Error(e) => tracing::error!(classification = %e, latency_ms = ms, "response failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// The level of every event logged while `f` runs.
    fn levels_logged(f: impl FnOnce()) -> Vec<tracing::Level> {
        #[derive(Clone, Default)]
        struct Levels(Arc<Mutex<Vec<tracing::Level>>>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Levels {
            fn on_event(
                &self,
                e: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(*e.metadata().level());
            }
        }
        let seen = Levels::default();
        let sub = tracing_subscriber::registry().with(seen.clone());
        tracing::subscriber::with_default(sub, f);
        seen.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    #[test]
    fn a_flood_of_503s_is_logged_once_a_second_with_the_count() {
        use tower_http::classify::ServerErrorsFailureClass as C;
        use tower_http::trace::OnFailure as _;
        let span = tracing::Span::none();
        let ms = Duration::from_millis(1);
        let first = levels_logged(|| {
            for _ in 0..1000 {
                OnHttpFailure.on_failure(
                    C::StatusCode(http::StatusCode::SERVICE_UNAVAILABLE),
                    ms,
                    &span,
                );
            }
        });
        // Another test of this binary may have logged the second's line.
        assert!(first.len() <= 1, "{} lines for 1,000 503s", first.len());
        let t = Throttle::new();
        assert_eq!(t.admit(), Some(0));
        assert_eq!((0..50).filter_map(|_| t.admit()).count(), 0);
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(t.admit(), Some(50));
    }

    #[test]
    fn a_501_is_logged_as_the_clients_mistake_and_a_500_as_an_error() {
        use tower_http::classify::ServerErrorsFailureClass as C;
        use tower_http::trace::OnFailure as _;
        let span = tracing::Span::none();
        let ms = Duration::from_millis(3);
        let at = |class| levels_logged(|| OnHttpFailure.on_failure(class, ms, &span));
        assert_eq!(
            at(C::StatusCode(http::StatusCode::NOT_IMPLEMENTED)),
            [tracing::Level::DEBUG]
        );
        assert_eq!(
            at(C::StatusCode(http::StatusCode::INTERNAL_SERVER_ERROR)),
            [tracing::Level::ERROR]
        );
        assert_eq!(
            at(C::StatusCode(http::StatusCode::SERVICE_UNAVAILABLE)),
            [tracing::Level::ERROR]
        );
    }
}
