//! How long a connection may take over each of its parts ([`ConnLimits`]),
//! and the jitter that keeps rotated connections from closing together.

use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a connection may take over each of its parts: settings both
/// services give their HTTP listeners alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// At shutdown, how long an idle HTTP/1.1 connection may still send one
    /// request. The drain ends this plus [`DRAIN_SLACK`] after the signal.
    pub grace: Duration,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of an HTTP/2 connection: a client
    /// past it waits for one of its streams to end.
    pub max_streams: u32,
    /// From a connection's opening, or from the first byte read after the
    /// previous answer, to the end of a request's head (HTTP/1.1; for
    /// HTTP/2, to the end of the connection preface). Past it the
    /// connection is closed.
    pub header_read: Duration,
    /// From a request's head to its body's last byte. Past it the body
    /// fails to read, which the routes answer with 408.
    pub body_read: Duration,
    /// How long a connection with no request in service and none begun
    /// stays open: an idle HTTP/1.1 keep-alive connection, an HTTP/2
    /// connection with no stream (pings do not count).
    pub idle: Duration,
    /// How long an answer may wait with no byte taken by the client: a
    /// socket that accepts no write, or (HTTP/2) a flow-control window the
    /// client leaves shut while a stream is open. Past it the connection
    /// is closed, and what it held (slots of the limit, answers) is freed.
    pub write: Duration,
    /// Connection rotation: past this age (give or take [`AGE_JITTER`]) a
    /// connection is closed gracefully (HTTP/2 GOAWAY; HTTP/1.1 closed after
    /// the answer in service, or at once when idle), so that a client behind
    /// an L4 balancer reconnects and may land elsewhere. `None`: never.
    pub max_age: Option<Duration>,
    /// How long a rotated connection may take to finish what it serves.
    pub max_age_grace: Duration,
}

/// How long a connection closed gracefully (its answers handed to the
/// socket, or to QUIC, not yet delivered) waits for its client to close
/// before it is closed: closing first could drop the last answers.
pub const LINGER: Duration = Duration::from_secs(2);

/// The write-progress timeout unless set: 10 s.
pub const DEFAULT_WRITE: Duration = Duration::from_secs(10);

/// A rotated connection's age varies by up to this share either way, so
/// that connections opened together do not all close together.
pub const AGE_JITTER: f64 = 0.1;

/// `age`, give or take [`AGE_JITTER`], drawn from `seed`.
pub fn jittered(age: Duration, seed: u64) -> Duration {
    let unit = (splitmix(seed) >> 11) as f64 / (1u64 << 53) as f64;
    age.mul_f64(1.0 - AGE_JITTER + 2.0 * AGE_JITTER * unit)
}

/// SplitMix64's finaliser: any seed spread evenly over `u64`, without a
/// random-number crate or a lock (rotation jitter; user-service's replica
/// picks).
pub fn splitmix(seed: u64) -> u64 {
    let mut x = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A seed that differs per call: the clock's nanoseconds and a counter.
pub fn seed() -> u64 {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ COUNT.fetch_add(1, Ordering::Relaxed).rotate_left(32)
}

/// How long past `grace` a drain may take before the connections still
/// open are dropped.
pub const DRAIN_SLACK: Duration = Duration::from_secs(1);

impl ConnLimits {
    /// The bounds from settings in milliseconds, as both services name them
    /// (`*_SHUTDOWN_GRACE_MS`, `*_HEADER_READ_TIMEOUT_MS`,
    /// `*_BODY_READ_TIMEOUT_MS`, `*_IDLE_TIMEOUT_MS`).
    pub fn from_millis(
        grace: u64,
        max_streams: u32,
        header_read: u64,
        body_read: u64,
        idle: u64,
    ) -> Self {
        ConnLimits {
            grace: Duration::from_millis(grace),
            max_streams,
            header_read: Duration::from_millis(header_read),
            body_read: Duration::from_millis(body_read),
            idle: Duration::from_millis(idle),
            write: DEFAULT_WRITE,
            max_age: None,
            max_age_grace: Duration::ZERO,
        }
    }

    /// The defaults besides `grace` and `max_streams`: 10 s to send a
    /// request's head, 30 s for its body, 60 s idle, no rotation.
    pub fn new(grace: Duration, max_streams: u32) -> Self {
        ConnLimits {
            grace,
            max_streams,
            header_read: Duration::from_secs(10),
            body_read: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            write: DEFAULT_WRITE,
            max_age: None,
            max_age_grace: Duration::ZERO,
        }
    }

    /// The same, with answers waiting at most `write_ms` for the client to
    /// take a byte.
    pub fn with_write_timeout(self, write_ms: u64) -> Self {
        ConnLimits {
            write: Duration::from_millis(write_ms),
            ..self
        }
    }

    /// The same, with connections rotated past `max_age_ms` (0: never),
    /// given `grace_ms` to finish.
    pub fn with_max_age(self, max_age_ms: u64, grace_ms: u64) -> Self {
        ConnLimits {
            max_age: (max_age_ms > 0).then(|| Duration::from_millis(max_age_ms)),
            max_age_grace: Duration::from_millis(grace_ms),
            ..self
        }
    }
}
