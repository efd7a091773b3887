//! The services' Postgres: each service's own database on one server, the
//! server's address as a report may name it (no password), whether it
//! answers, and the data set seeded into it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::build::Binaries;

/// Postgres URLs of each service's own database.
#[derive(Debug, Clone)]
pub struct Databases {
    pub orders: String,
    pub users: String,
}

impl Databases {
    /// From a server URL: its database name, if any, is replaced by
    /// `orders` and `users` (one server, a database per service, as in the
    /// design). Query parameters are kept.
    pub fn from_server_url(url: &str) -> anyhow::Result<Databases> {
        let (scheme, rest) = url
            .split_once("://")
            .context("the database URL needs a scheme, e.g. postgres://postgres@127.0.0.1:5432")?;
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, format!("?{q}")),
            None => (rest, String::new()),
        };
        let authority = before_query.split('/').next().unwrap_or(before_query);
        if authority.is_empty() {
            bail!("the database URL has no host");
        }
        let db = |name: &str| format!("{scheme}://{authority}/{name}{query}");
        Ok(Databases {
            orders: db("orders"),
            users: db("users"),
        })
    }
}

impl Databases {
    /// Whether the server runs on this machine (its processes are then
    /// counted), from the host of the URL.
    pub fn is_local(&self) -> bool {
        let host = authority(&self.orders);
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.split_once(']').map(|(h, _)| h))
            .unwrap_or_else(|| host.rsplit_once(':').map_or(host, |(h, _)| h));
        matches!(host, "127.0.0.1" | "localhost" | "::1" | "") || host.starts_with("127.")
    }
}

/// The `host[:port]` of a database URL: no user or password, no database,
/// no query. What a report may name, and what says where the server runs.
pub fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['/', '?']).next().unwrap_or(rest);
    rest.rsplit_once('@').map_or(rest, |(_, h)| h)
}

/// Where cells that ask for Postgres go when the run has no
/// `--database-url`: the local server a developer's machine (and CI) runs.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432";

/// Whether a TCP connection to the server of `url` opens within 2 s: a
/// Postgres that is down or absent is found before a round is planned on it.
pub fn reachable(url: &str) -> anyhow::Result<()> {
    let at = authority(url);
    let at = if at.contains(':') && !at.ends_with(']') {
        at.to_owned()
    } else {
        format!("{at}:5432")
    };
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(at.as_str())
        .with_context(|| format!("resolving {at}"))?
        .collect();
    let mut last = None;
    for a in addrs {
        match std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => bail!("nothing answers at {at}: {e}"),
        None => bail!("{at} resolves to no address"),
    }
}

/// Each service's `seed` command into `db`: it creates a missing database
/// (and says so) and loads the data set, idempotently.
pub fn seed_into(bins: &Binaries, db: &Databases) -> anyhow::Result<()> {
    for (bin, var, url, name) in [
        (
            &bins.order,
            "ORDER_DATABASE_URL",
            &db.orders,
            "order-service",
        ),
        (&bins.user, "USER_DATABASE_URL", &db.users, "user-service"),
    ] {
        println!("seeding {name}'s database (once; idempotent)…");
        let out = Command::new(bin)
            .arg("seed")
            .env_clear()
            .env(var, url)
            .env("RUST_LOG", "warn")
            .output()
            .with_context(|| format!("running {name} seed"))?;
        if !out.status.success() {
            bail!(
                "{name} seed failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
            );
        }
        // The seed command creates a missing database and says so.
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            println!("{name}: {line}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_get_one_database_per_service() {
        let d = Databases::from_server_url("postgres://postgres@127.0.0.1:5432").expect("valid");
        assert_eq!(d.orders, "postgres://postgres@127.0.0.1:5432/orders");
        assert_eq!(d.users, "postgres://postgres@127.0.0.1:5432/users");
        let d = Databases::from_server_url("postgres://u:p@db:5432/whatever?sslmode=disable")
            .expect("valid");
        assert_eq!(d.orders, "postgres://u:p@db:5432/orders?sslmode=disable");
        assert!(Databases::from_server_url("127.0.0.1:5432").is_err());
        let local = |u: &str| Databases::from_server_url(u).expect("valid").is_local();
        assert!(local("postgres://postgres@127.0.0.1:5432"));
        assert!(local("postgres://u:p@localhost/x"));
        assert!(local("postgres://u@[::1]:5432"));
        assert!(!local("postgres://u:p@db.example:5432"));
    }
}
