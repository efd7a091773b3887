//! Floods of bad connections, for both services' flood tests: many
//! connections that send nothing, trickle a request, or announce a large
//! frame and stop. Bounded in count and time; the caller checks what the
//! service did meanwhile.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

pub mod quic;

/// What each connection of a flood sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Nothing at all.
    Idle,
    /// `first`, then one more byte of an endless header line every tick.
    Trickle { first: &'static [u8] },
    /// A raw-TCP length announcing `bytes`, and one byte of it.
    LargeFrame { bytes: u32 },
    /// A raw-TCP length announcing `bytes`, and all of it but the last
    /// byte: a frame the server must hold, or refuse, almost whole.
    AlmostWholeFrame { bytes: u32 },
    /// The HTTP/2 preface and SETTINGS, then a HEADERS frame announcing a
    /// 200-byte head, one byte of it every tick.
    H2HeadTrickle,
    /// The HTTP/2 preface and SETTINGS, then no call, a PING every tick.
    H2Pinging,
}

const H2_OPENING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
const H2_PING: &[u8] = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingping";

impl Kind {
    /// What a connection of this kind sends every tick of [`trickle`].
    fn tick(self) -> &'static [u8] {
        match self {
            Kind::H2Pinging => H2_PING,
            Kind::H2HeadTrickle => b"\x40",
            _ => b"a",
        }
    }
}

/// `n` connections of `kind` to `addr`, opened one after another (the
/// ones the server refuses are kept too: they cost the client nothing).
pub async fn open(addr: SocketAddr, n: usize, kind: Kind) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    // One buffer for every connection: the client's memory stays flat, so
    // growth measured in this process is the server's.
    let frame: Vec<u8> = match kind {
        Kind::Idle => Vec::new(),
        Kind::Trickle { first } => first.to_vec(),
        Kind::LargeFrame { bytes } => [&bytes.to_be_bytes()[..], &[7]].concat(),
        Kind::AlmostWholeFrame { bytes } => {
            let mut f = bytes.to_be_bytes().to_vec();
            f.resize(4 + bytes.saturating_sub(1) as usize, 7);
            f
        }
        Kind::H2HeadTrickle => [H2_OPENING, &[0, 0, 200, 0x1, 0x4, 0, 0, 0, 1]].concat(),
        Kind::H2Pinging => H2_OPENING.to_vec(),
    };
    for _ in 0..n {
        let Ok(mut c) = TcpStream::connect(addr).await else {
            continue;
        };
        // A server that refuses the frame closes: bounded, and skipped.
        let sent = tokio::time::timeout(Duration::from_secs(2), c.write_all(&frame)).await;
        if !frame.is_empty() && !matches!(sent, Ok(Ok(()))) {
            continue;
        }
        conns.push(c);
    }
    conns
}

/// One more tick of `kind` on every connection (a byte of a head, a PING),
/// `ticks` times, `every` apart. Connections the server closed are skipped.
pub async fn trickle(conns: &mut [TcpStream], kind: Kind, ticks: usize, every: Duration) {
    for _ in 0..ticks {
        for c in conns.iter_mut() {
            let _ = tokio::time::timeout(Duration::from_millis(50), c.write_all(kind.tick())).await;
        }
        tokio::time::sleep(every).await;
    }
}

/// The most a flood may grow the process, in MiB.
pub const MAX_GROWTH_MIB: u64 = 64;

/// Each flood of `floods` in turn, `n` connections each (a trickle goes on
/// for a second): while it is on, the process must have grown by under
/// [`MAX_GROWTH_MIB`] since the start and `good(listener)` must pass on the
/// flooded listener. The connections are closed before the next flood.
pub async fn each_kind<F, Fut>(floods: &[(&'static str, SocketAddr, Kind)], n: usize, good: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let baseline = rss_kib();
    for &(listener, addr, kind) in floods {
        let mut conns = open(addr, n, kind).await;
        if matches!(
            kind,
            Kind::Trickle { .. } | Kind::H2HeadTrickle | Kind::H2Pinging
        ) {
            trickle(&mut conns, kind, 5, Duration::from_millis(200)).await;
        } else {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let grown_mib = rss_kib().saturating_sub(baseline) / 1024;
        assert!(
            grown_mib < MAX_GROWTH_MIB,
            "{listener} {kind:?}: RSS grew by {grown_mib} MiB with {} connections",
            conns.len()
        );
        good(listener).await;
        drop(conns);
        // Let the server see them go before the next kind.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Reads until the server closes `c`, failing the test if it has not by
/// `within`; returns what the server sent.
pub async fn closed_within(c: &mut TcpStream, within: Duration) -> Vec<u8> {
    use tokio::io::AsyncReadExt as _;
    let mut got = Vec::new();
    tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server closes the connection in time");
    got
}

/// This process's resident memory, in KiB (the services under test run in
/// it).
pub fn rss_kib() -> u64 {
    rss_kib_of("self")
}

/// The resident memory of process `pid` (a number, or `self`), in KiB. A
/// process whose memory cannot be read fails the test: a growth measured
/// from nothing would pass whatever happened.
pub fn rss_kib_of(pid: &str) -> u64 {
    status_kib(pid, "VmRSS")
}

/// The most resident memory process `pid` has had, in KiB: since it began,
/// or since [`reset_peak_rss`].
pub fn peak_rss_kib_of(pid: &str) -> u64 {
    status_kib(pid, "VmHWM")
}

/// Makes the peak of process `pid`'s resident memory its present one
/// (Linux's `clear_refs` 5), so [`peak_rss_kib_of`] sees the peak from now.
pub fn reset_peak_rss(pid: &str) {
    let path = format!("/proc/{pid}/clear_refs");
    std::fs::write(&path, "5").unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// A `kB` line of `/proc/{pid}/status`.
fn status_kib(pid: &str, field: &str) -> u64 {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{path} has no {field} line"))
}

/// Bad clients held open against a service while it is told to stop: a
/// REST head trickled a byte every 50 ms, an idle keep-alive connection
/// (one `/healthz` answered), and a silent gRPC connection.
pub struct BadClients {
    trickler: tokio::task::JoinHandle<()>,
    _idle: TcpStream,
    _silent: TcpStream,
}

impl BadClients {
    /// Connects them to `rest` and `grpc` (`host:port`).
    pub async fn connect(rest: &str, grpc: &str) -> BadClients {
        use tokio::io::AsyncReadExt as _;
        let mut trickle = TcpStream::connect(rest).await.expect("REST connects");
        trickle
            .write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .expect("writes");
        let mut idle = TcpStream::connect(rest).await.expect("REST connects");
        idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .expect("writes");
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).await.expect("answered");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "the idle one was served"
        );
        let silent = TcpStream::connect(grpc).await.expect("gRPC connects");
        let trickler = tokio::spawn(async move {
            for _ in 0..400 {
                if trickle.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        BadClients {
            trickler,
            _idle: idle,
            _silent: silent,
        }
    }
}

impl Drop for BadClients {
    fn drop(&mut self) {
        self.trickler.abort();
    }
}

/// With `rest`'s cap of `cap` connections held by clients that send
/// nothing: a new connection to `rest` is closed at once, while `admin`
/// answers `/healthz` ("ok"), `/readyz` ("ready") and `/metrics` (which
/// counts the held connections under `{prefix}_connections_open`), each on a
/// new connection as a kubelet probe makes, and 404 to `api_path`, which
/// `rest` serves.
pub async fn admin_answers_while_rest_is_full(
    (rest, admin): (SocketAddr, SocketAddr),
    prefix: &str,
    cap: usize,
    api_path: &str,
) {
    let get = |addr: SocketAddr, path: String| async move {
        let client = reqwest::Client::builder()
            .http1_only()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("a client");
        client.get(format!("http://{addr}{path}")).send().await
    };
    let before = get(rest, "/healthz".into()).await.expect("REST answers");
    assert_eq!(before.status(), 200);
    drop(before);

    // The REST listener's count reaching `n` (read on the admin listener).
    let open_on_rest = |n: usize| {
        let line = format!("{prefix}_connections_open{{listener=\"rest\"}} {n}\n");
        async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let res = get(admin, "/metrics".into())
                        .await
                        .expect("/metrics on admin");
                    let text = res.text().await.expect("a body");
                    if text.contains(&line) {
                        return text;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
        }
    };
    // The first request's connection closed on the server too: were it
    // counted while the idle clients fill the cap, it could leave one of
    // them refused, then free its slot for the probe below.
    open_on_rest(0)
        .await
        .expect("the first request's connection is closed");
    let held = open(rest, cap, Kind::Idle).await;
    let metrics = open_on_rest(cap).await.expect("the REST listener fills up");
    let admin_open = format!("{prefix}_connections_open{{listener=\"admin\"}}");
    assert!(metrics.contains(&admin_open), "{metrics}");
    assert!(
        get(rest, "/healthz".into()).await.is_err(),
        "the full REST listener closes a new connection at once"
    );
    for (path, body) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let res = get(admin, path.into()).await.expect("a probe on admin");
        assert_eq!(res.status(), 200, "{path}");
        assert_eq!(res.text().await.expect("a body"), body, "{path}");
    }
    let res = get(admin, api_path.into()).await.expect("an answer");
    assert_eq!(res.status(), 404, "the API is not on the admin port");
    drop(held);
}

/// Streams held open by [`h2_streams_without_bodies`]: dropping it resets
/// and closes them.
pub type HeldStreams = Vec<(
    h2::client::SendRequest<bytes::Bytes>,
    Vec<(h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>)>,
)>;

/// How many of `held`'s streams are still open: neither answered nor
/// failed (a connection the server closed fails all its streams).
pub fn streams_still_open(held: &mut HeldStreams) -> usize {
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    held.iter_mut()
        .flat_map(|(_, streams)| streams.iter_mut())
        .map(|(answer, _)| std::pin::Pin::new(answer).poll(&mut cx).is_pending())
        .filter(|open| *open)
        .count()
}

/// `conns` h2c connections to `addr`, each opening `streams` POST streams
/// to `path` that declare a 1 MB body and send none of it.
pub async fn h2_streams_without_bodies(
    addr: SocketAddr,
    path: &'static str,
    conns: usize,
    streams: usize,
) -> HeldStreams {
    h2_partial_bodies(addr, Partial::rest(path, 0), conns, streams).await
}

/// What each stream of an h2c flood sends: a head announcing a large body,
/// then `body` and no more, the stream left open.
#[derive(Debug, Clone)]
pub struct Partial {
    pub path: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: bytes::Bytes,
}

impl Partial {
    /// A REST POST to `path` announcing a 1 MB JSON body, `send` bytes of it
    /// sent.
    pub fn rest(path: &'static str, send: usize) -> Partial {
        Partial {
            path,
            headers: vec![
                ("content-type", "application/json".into()),
                ("content-length", "1000000".into()),
            ],
            body: bytes::Bytes::from(vec![b' '; send]),
        }
    }

    /// A gRPC call to `method` (its path) whose one message announces
    /// 1,000,000 bytes (under the services' 1 MiB request cap), `send` bytes
    /// of it sent after the 5-byte prefix.
    pub fn grpc(method: &'static str, send: usize) -> Partial {
        let mut body = vec![0u8];
        body.extend_from_slice(&1_000_000u32.to_be_bytes());
        body.resize(5 + send, 0);
        Partial {
            path: method,
            headers: vec![
                ("content-type", "application/grpc".into()),
                ("te", "trailers".into()),
            ],
            body: body.into(),
        }
    }
}

/// `conns` h2c connections to `addr`, each opening `streams` streams that
/// send `partial`'s head and part of a body (buffered by the client and
/// sent as the server's flow control lets it), then stop, left open.
pub async fn h2_partial_bodies(
    addr: SocketAddr,
    partial: Partial,
    conns: usize,
    streams: usize,
) -> HeldStreams {
    let mut held = Vec::with_capacity(conns);
    for _ in 0..conns {
        let Ok(io) = TcpStream::connect(addr).await else {
            continue;
        };
        let Ok((send, conn)) = h2::client::handshake(io).await else {
            continue;
        };
        tokio::spawn(conn);
        let Ok(mut send) = send.ready().await else {
            continue;
        };
        let mut open = Vec::with_capacity(streams);
        for _ in 0..streams {
            let mut req = http::Request::post(format!("http://{addr}{}", partial.path));
            for (name, value) in &partial.headers {
                req = req.header(*name, value);
            }
            let req = req.body(()).expect("a request");
            match send.send_request(req, false) {
                Ok((answer, mut body)) => {
                    if !partial.body.is_empty() {
                        let _ = body.send_data(partial.body.clone(), false);
                    }
                    open.push((answer, body));
                }
                Err(_) => break,
            }
        }
        held.push((send, open));
    }
    held
}
