//! The services' binaries under test, and the tests' log: what both
//! services' black-box tests share.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Logs go to the test output when `TEST_LOG` is set.
pub fn init_test_log() {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A service binary, running, with the fields of the log line it wrote
/// when ready (its addresses).
pub struct Proc {
    child: tokio::process::Child,
    ready: serde_json::Value,
    /// Every log line, the ready line included.
    log: Arc<Mutex<Vec<String>>>,
}

/// Starts `bin` with exactly `env` (plus `PATH`, JSON logs at info: the
/// caller's shell cannot change what is tested) and waits, 30 s at most,
/// for its `ready_message` log line.
pub async fn start_binary(bin: &Path, env: &[(&str, String)], ready_message: &str) -> Proc {
    use tokio::io::AsyncBufReadExt as _;
    assert!(
        bin.exists(),
        "{} is not built: the workspace test command builds it (cargo build -p order-service -p user-service)",
        bin.display()
    );
    let mut child = tokio::process::Command::new(bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ORDER_LOG_FORMAT", "json")
        .env("USER_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("a piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line);
            if v["fields"]["message"] == ready_message {
                return v["fields"].clone();
            }
        }
        panic!("{} exited before it was ready", bin.display());
    })
    .await
    .expect("the binary is ready within 30 s");
    // Keep draining the log so the child never blocks on a full pipe, and
    // keep its lines for the tests that read them.
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line);
        }
    });
    Proc { child, ready, log }
}

impl Proc {
    /// The log lines written so far, from the first.
    pub fn log_lines(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The process's resident memory now, in KiB (it must be running).
    pub fn rss_kib(&self) -> u64 {
        crate::flood::rss_kib_of(&self.pid())
    }

    /// The most resident memory the process has had since it began or
    /// since [`Proc::reset_peak_rss`], in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        crate::flood::peak_rss_kib_of(&self.pid())
    }

    /// Makes the peak of the process's resident memory its present one.
    pub fn reset_peak_rss(&self) {
        crate::flood::reset_peak_rss(&self.pid());
    }

    fn pid(&self) -> String {
        self.child.id().expect("the process is running").to_string()
    }

    /// An address from the ready line: `rest`, `grpc`, `tcp`.
    pub fn addr(&self, key: &str) -> String {
        self.ready[key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key:?} in the ready line {}", self.ready))
            .to_owned()
    }

    /// SIGTERM, so the service drains (and flushes its spans), then its
    /// exit status (30 s at most).
    pub async fn sigterm(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("the process runs").to_string();
        let ok = tokio::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("kill runs")
            .success();
        assert!(ok, "kill -TERM {pid}");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the service exits within 30 s of SIGTERM")
            .expect("its exit status")
    }
}

/// What a binary that ran to its end said.
#[derive(Debug)]
pub struct Exited {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `bin` with exactly `env` (and `RUST_BACKTRACE=0`) until it exits,
/// and returns what it said. Fails if it still runs after `limit`: a service
/// that should have refused its settings started instead.
pub fn run_to_exit(bin: &Path, env: &[(&str, &str)], limit: Duration) -> Exited {
    use std::process::Stdio;
    let mut child = std::process::Command::new(bin)
        .env_clear()
        .env("RUST_BACKTRACE", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
    // Read both pipes as it runs, so that a chatty child never blocks.
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut r) = r {
                r.read_to_string(&mut text).ok();
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the binary") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "{} still runs after {limit:?} with {env:?}: it did not refuse them",
                bin.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Exited {
        status,
        stdout: out.join().expect("reading stdout"),
        stderr: err.join().expect("reading stderr"),
    }
}

/// The messages of the JSON log lines at WARN in `log`.
pub fn warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "WARN")
        .filter_map(|v| v["fields"]["message"].as_str().map(str::to_owned))
        .collect()
}

/// A Postgres URL where nothing listens: a service given it logs its start
/// and then fails, which is all some tests need.
pub fn unreachable_database() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("postgres://postgres@127.0.0.1:{port}/nothing")
}

/// A service running inside the test's own process, on the test's runtime,
/// until it is stopped: what both services' test harnesses hold.
pub struct InProcess {
    /// Cancelled: the service starts its drain.
    pub stop: tokio_util::sync::CancellationToken,
    /// Its `run_until_stopped`, ending once it has drained.
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcess {
    /// Spawns `run`, given the future that completes when [`InProcess::stop`]
    /// is called (a service's `run_until_stopped`).
    pub fn spawn<F>(run: impl FnOnce(tokio_util::sync::WaitForCancellationFutureOwned) -> F) -> Self
    where
        F: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let stop = tokio_util::sync::CancellationToken::new();
        let handle = tokio::spawn(run(stop.clone().cancelled_owned()));
        InProcess { stop, handle }
    }

    /// Stops it, and waits (30 s at most) for it to drain and end well.
    pub async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the service drains within 30 s")
            .expect("the service task does not panic")
            .expect("the service ends well");
    }
}
