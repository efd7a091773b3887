//! A service as a child process: started in a process group of its own
//! (a Ctrl-C in the terminal reaches the lab only, and the lab decides how
//! the children stop) with a cleared environment and its output appended to
//! its log, killed when its [`ChildGuard`] is dropped, waited on until it
//! answers `/readyz` (over TLS when it serves TLS), and its pinning checked
//! with the kernel.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::config::ServiceConfig;
use crate::measure::Interrupted;
use crate::measure::http;

/// A child process that is killed and reaped when dropped, and that can be
/// signalled and started again from the command that started it (a fault's
/// restart) while others read its pid.
#[derive(Debug)]
pub struct ChildGuard {
    child: Mutex<Option<Child>>,
    name: &'static str,
    /// What started it: program, arguments and the variables set (the
    /// environment is cleared, so these are all of it).
    recipe: Option<Recipe>,
}

#[derive(Debug)]
struct Recipe {
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
}

impl ChildGuard {
    /// Starts `cmd` in a process group of its own.
    pub fn spawn(mut cmd: Command, name: &'static str) -> anyhow::Result<ChildGuard> {
        let recipe = Recipe {
            program: cmd.get_program().to_owned(),
            args: cmd.get_args().map(ToOwned::to_owned).collect(),
            envs: cmd
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
                .collect(),
        };
        cmd.process_group(0);
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        Ok(ChildGuard {
            child: Mutex::new(Some(child)),
            name,
            recipe: Some(recipe),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn pid(&self) -> u32 {
        self.lock().as_ref().map_or(0, Child::id)
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The exit status if it has exited (reaping it).
    pub fn try_wait(&self) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.lock().as_mut() {
            Some(c) => c
                .try_wait()
                .with_context(|| format!("waiting for {}", self.name)),
            None => Ok(None),
        }
    }

    /// Sends `signal` to the process (not its group: `ip netns exec` and
    /// `taskset` exec the service, so the pid is the service's).
    pub fn signal(&self, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
        let pid = i32::try_from(self.pid()).context("a process id")?;
        anyhow::ensure!(pid > 0, "{} is not the lab's process", self.name);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
            .with_context(|| format!("sending {signal} to {}", self.name))
    }

    /// Waits up to `within` for the process to exit, reaping it; its
    /// status, or `None` if it still runs.
    pub fn wait_exit(&self, within: Duration) -> anyhow::Result<Option<std::process::ExitStatus>> {
        let until = Instant::now() + within;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Starts the same command again, its output appended to `log`, once
    /// the process has exited (it is killed first if it has not).
    pub fn start_again(&self, log: &File) -> anyhow::Result<()> {
        let recipe = self
            .recipe
            .as_ref()
            .with_context(|| format!("{} was not started by the lab", self.name))?;
        let mut slot = self.lock();
        if let Some(mut old) = slot.take() {
            let _ = old.kill();
            let _ = old.wait();
        }
        let mut cmd = Command::new(&recipe.program);
        cmd.args(&recipe.args)
            .env_clear()
            .envs(recipe.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log.try_clone()?))
            .process_group(0);
        *slot = Some(
            cmd.spawn()
                .with_context(|| format!("starting {} again", self.name))?,
        );
        Ok(())
    }

    /// Kills and reaps the child now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.lock().take() {
            // Already exited is fine: kill then fails and wait reaps it.
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A guard of no process: a target's service, which the lab did not
    /// start and never stops.
    pub fn absent(name: &'static str) -> ChildGuard {
        ChildGuard {
            child: Mutex::new(None),
            name,
            recipe: None,
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) fn log_file(dir: &Path, name: &str, header: &str) -> anyhow::Result<File> {
    let path = dir.join(format!("{name}.log"));
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(f, "===== {header} =====")?;
    Ok(f)
}

/// A service's command with a cleared environment: the service sees only
/// what the lab sets (an `ORDER_*`, `USER_*` or `OTEL_*` variable in the
/// caller's shell would otherwise change a run without a trace), plus
/// `PATH` for `taskset`. With `ns`, it runs in that network namespace
/// (`ip netns exec`, which execs it: the child's pid is the service's).
pub(super) fn command(
    cfg: &ServiceConfig,
    bin: &Path,
    cpu: u32,
    log: &File,
    ns: Option<&str>,
) -> anyhow::Result<Command> {
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    if let Some(ns) = ns {
        argv.extend(["ip", "netns", "exec", ns].map(Into::into));
    }
    if cfg.pin {
        argv.extend(["taskset".into(), "-c".into(), cpu.to_string().into()]);
    }
    argv.push(bin.into());
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    // Warnings only: per-request logging would be measured as protocol cost.
    cmd.env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log.try_clone()?));
    Ok(cmd)
}

/// The variables a command sets, as `service NAME` → value.
pub(super) fn env_of(service: &str, cmd: &Command) -> Vec<(String, String)> {
    cmd.get_envs()
        .filter_map(|(k, v)| {
            Some((
                format!("{service} {}", k.to_string_lossy()),
                v?.to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

/// Polls `GET /readyz` until it answers 200.
pub(crate) fn wait_ready(
    child: &ChildGuard,
    addr: SocketAddr,
    tls_ca: Option<&Path>,
    log_dir: &Path,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let tls = tls_ca.map(tls_client).transpose()?;
    loop {
        if stop.load(Ordering::SeqCst) {
            bail!(Interrupted);
        }
        if let Some(status) = child.try_wait()? {
            let log = log_dir.join(format!("{}.log", child.name));
            // Its last words, so that the reason is in the error itself.
            let last = std::fs::read_to_string(&log)
                .ok()
                .and_then(|t| {
                    t.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            bail!(
                "{} exited before it was ready ({status}): {}; its output is in {}",
                child.name,
                last.trim(),
                log.display()
            );
        }
        let ready = match &tls {
            None => http::get(addr, "/readyz", Duration::from_secs(2)).map(|r| r.status == 200),
            Some(config) => ready_over_tls(addr, config),
        };
        if ready.unwrap_or(false) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not become ready on {addr} within 60 s; its output is in {}",
                child.name,
                log_dir.join(format!("{}.log", child.name)).display()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// With `--pin`, the kernel's own word that the service may run on `cpu`
/// alone (`Cpus_allowed_list` in /proc), so a report never claims a pinning
/// that did not happen.
pub(super) fn check_pinned(
    cfg: &ServiceConfig,
    child: &ChildGuard,
    cpu: u32,
) -> anyhow::Result<()> {
    if !cfg.pin {
        return Ok(());
    }
    let allowed = crate::measure::procfs::cpus_allowed(child.pid())?;
    if allowed != cpu.to_string() {
        bail!(
            "--pin asked for {} on CPU {cpu}, but the kernel allows it CPUs {allowed}",
            child.name
        );
    }
    Ok(())
}

/// A blocking TLS client trusting the run's CA, for readiness checks.
fn tls_client(ca: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let roots = tls::load_roots("CA", ca)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("choosing TLS versions")?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `GET /readyz` over HTTPS/1.1: does it answer 200?
fn ready_over_tls(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> anyhow::Result<bool> {
    use std::io::{Read as _, Write as _};
    // A name the lab certificate carries whatever address order-service is
    // reached at (loopback, or a namespace's control address).
    let name = rustls_pki_types::ServerName::try_from("order-service")?;
    let conn = rustls::ClientConnection::new(config.clone(), name)?;
    let tcp = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    tcp.set_read_timeout(Some(Duration::from_secs(2)))?;
    tcp.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    s.write_all(b"GET /readyz HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    Ok(head.starts_with(b"HTTP/1.1 200"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::services::build::Binaries;

    #[test]
    fn a_service_sees_only_the_variables_the_lab_sets() {
        let dir = std::env::temp_dir().join(format!("lab-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = ServiceConfig {
            bins: Binaries {
                order: "/usr/bin/env".into(),
                user: "/usr/bin/env".into(),
                loadgen: "/usr/bin/env".into(),
            },
            databases: None,
            store_databases: None,
            own_postgres: None,
            target: None,
            pin: false,
            path_seed: None,
            log_dir: dir.clone(),
            certs: None,
        };
        let log = log_file(&dir, "env", "test").unwrap();
        let mut cmd = command(&cfg, Path::new("/usr/bin/env"), 0, &log, None).unwrap();
        cmd.env("ORDER_REST_ADDR", "127.0.0.1:1");
        let set = env_of("order-service", &cmd);
        assert!(set.contains(&("order-service RUST_LOG".into(), "warn".into())));
        assert!(cmd.status().unwrap().success());
        let seen = std::fs::read_to_string(dir.join("env.log")).unwrap();
        let names: Vec<&str> = seen
            .lines()
            .filter(|l| !l.starts_with("====="))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert!(names.contains(&"ORDER_REST_ADDR"), "{seen}");
        // Whatever this test process has (HOME, CARGO_*, ...), the service
        // sees only the lab's variables.
        assert!(std::env::vars().count() > 3);
        for n in &names {
            assert!(
                ["PATH", "RUST_LOG", "ORDER_REST_ADDR"].contains(n),
                "the service saw {n}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_dropped_guard_kills_its_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let g = ChildGuard::spawn(cmd, "sleep").expect("spawn");
        let pid = g.pid();
        assert!(crate::measure::procfs::is_running(pid));
        drop(g);
        assert!(!crate::measure::procfs::is_running(pid));
    }
}
