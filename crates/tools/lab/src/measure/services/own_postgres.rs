//! A Postgres server of the lab's own, for the cells that restart it under
//! order-service ([`crate::measure::cell::Store::OwnPostgres`]). The run's
//! server (`--database-url`, or the machine's) cannot be restarted: other
//! programs, and the tests' databases, live on it. This one is made for the
//! run with `initdb` in a directory of its own under the system's temporary
//! directory, listens on a free port of 127.0.0.1, and is stopped and
//! removed when the run ends.
//!
//! Postgres refuses to run as root; a lab run as root (as CI does) runs it
//! as the `postgres` user, who then owns its directory. Durability is off
//! (`fsync`, `synchronous_commit`, `full_page_writes`): what a cell
//! measures is a restart's outage, not how fast this disk syncs.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// Where the server binaries are looked for, besides `$LAB_PG_BIN` and
/// `pg_config --bindir`: Debian's layout, newest version first.
const DEBIAN: &str = "/usr/lib/postgresql";

/// How to install what is missing.
pub const INSTALL_HINT: &str =
    "apt-get install postgresql (or set LAB_PG_BIN to the directory that holds initdb and pg_ctl)";

/// The directory holding `initdb`, `pg_ctl` and `postgres`: `$LAB_PG_BIN`,
/// `pg_config --bindir`, or the newest under `/usr/lib/postgresql`.
pub fn bindir() -> anyhow::Result<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(d) = std::env::var_os("LAB_PG_BIN") {
        let d = PathBuf::from(d);
        if has(&d) {
            return Ok(d);
        }
        bail!("LAB_PG_BIN={} holds no initdb and pg_ctl", d.display());
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        let d = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if has(&d) {
            return Ok(d);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, d)) => Ok(d),
        None => bail!("no Postgres server binaries (initdb, pg_ctl) found: {INSTALL_HINT}"),
    }
}

/// The user the server runs as: `None` for the lab's own; as root, the
/// `postgres` user's ids.
fn server_user() -> anyhow::Result<Option<(u32, u32)>> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    match nix::unistd::User::from_name("postgres") {
        Ok(Some(u)) => Ok(Some((u.uid.as_raw(), u.gid.as_raw()))),
        _ => bail!(
            "Postgres refuses to run as root, and this machine has no `postgres` user to run it as: {INSTALL_HINT}"
        ),
    }
}

/// A running server of the lab's own; stopped (immediately) and its
/// directory removed when dropped.
#[derive(Debug)]
pub struct OwnPostgres {
    bindir: PathBuf,
    /// Its directory: `data/`, its log, its Unix socket.
    dir: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
}

impl OwnPostgres {
    /// Makes a cluster with `initdb`, configures it, and starts it; ready
    /// for connections when this returns.
    pub fn start() -> anyhow::Result<OwnPostgres> {
        let bindir = bindir()?;
        let user = server_user()?;
        let dir = std::env::temp_dir().join(format!(
            "lab-postgres-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("giving {} to the postgres user", dir.display()))?;
        }
        let port = free_port()?;
        let pg = OwnPostgres {
            bindir,
            dir,
            port,
            user,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )?;
        let conf = format!(
            "\n# the lab's own server\nport = {port}\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\nfsync = off\nsynchronous_commit = off\n\
             full_page_writes = off\nmax_connections = 200\n",
            pg.dir.display()
        );
        let conf_path = pg.dir.join("data").join("postgresql.conf");
        append(&conf_path, &conf)?;
        // The free port found above can be taken by another process before
        // the server binds it: then a new one, twice at most (a later
        // `port` line overrides the earlier).
        let mut pg = pg;
        let mut attempt = 0;
        loop {
            match pg.pg_ctl(&["start"]) {
                Ok(_) => return Ok(pg),
                Err(e) if attempt == 2 => return Err(e),
                Err(_) => {
                    attempt += 1;
                    pg.port = free_port()?;
                    append(&conf_path, &format!("port = {}\n", pg.port))?;
                }
            }
        }
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// The server's URL (no database: [`super::postgres::Databases`] adds one per
    /// service).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// Where it listens.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Restarts it the way an operator does: `pg_ctl restart -m fast` (every
    /// session ended with an error, a checkpoint, the postmaster gone, then
    /// started again); returns once it accepts connections, with how long
    /// that took.
    pub fn restart(&self) -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        self.pg_ctl(&["-m", "fast", "restart"])?;
        Ok(t0.elapsed())
    }

    /// `pg_ctl` on its data directory, waiting up to 60 s, logging to its log.
    fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let log = self.dir.join("postgres.log").display().to_string();
        let data = self.data();
        let mut all = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "60"];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all)
    }

    /// One of the server's programs, as the server's user.
    fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut cmd = Command::new(self.bindir.join(program));
        cmd.args(args).current_dir(&self.dir).env("LC_ALL", "C");
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {program} for the lab's Postgres"))?;
        if !out.status.success() {
            bail!(
                "{program} {} failed ({}): {}{}",
                args.last().copied().unwrap_or_default(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log_tail()
            );
        }
        Ok(())
    }

    /// The end of the server's log, for an error.
    fn log_tail(&self) -> String {
        match std::fs::read_to_string(self.dir.join("postgres.log")) {
            Ok(t) => {
                let lines: Vec<&str> = t.lines().rev().take(5).collect();
                let tail: Vec<&str> = lines.into_iter().rev().collect();
                format!("; its log ends: {}", tail.join(" | "))
            }
            Err(_) => String::new(),
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port for the lab's Postgres")?
        .port())
}

/// `text` added at the end of the file at `path`.
fn append(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut all =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    all.push_str(text);
    std::fs::write(path, all).with_context(|| format!("writing {}", path.display()))
}
