//! What both services do alike with their Postgres: how the pool is opened
//! and bounded, how a driver error is classified, how a row's time is
//! stamped, and how a URL is logged.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// A Postgres URL whose `Debug` never shows its password, so that settings
/// can be logged whole.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(pub String);

impl DatabaseUrl {
    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        redact(&self.0)
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(DatabaseUrl(s.to_owned()))
    }
}

/// How a service reaches its Postgres: one pool, bounded in connections and
/// in how long a query waits for one.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub url: DatabaseUrl,
    /// Connections in the pool (at least 1).
    pub max_connections: u32,
    /// How long a query waits for a pooled connection before its request
    /// gets 503: this bounds how long a request hangs while Postgres is down.
    pub acquire_timeout: Duration,
}

impl PoolSettings {
    /// The pool a service's settings describe, when they name a database.
    pub fn of(
        url: Option<&DatabaseUrl>,
        max_connections: u32,
        acquire_timeout_ms: u64,
    ) -> Option<Self> {
        Some(PoolSettings {
            url: url?.clone(),
            max_connections,
            acquire_timeout: Duration::from_millis(acquire_timeout_ms),
        })
    }
}

/// Opens the pool, failing fast when Postgres is not there, and applies
/// `migrator`'s migrations (`what` names them in an error).
pub async fn connect(
    s: &PoolSettings,
    migrator: &sqlx::migrate::Migrator,
    what: &str,
) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(s.max_connections.max(1))
        .acquire_timeout(s.acquire_timeout)
        .connect(&s.url.0)
        .await
        .with_context(|| format!("connecting to Postgres at {}", s.url.redacted()))?;
    migrator
        .run(&pool)
        .await
        .with_context(|| format!("applying the migrations in {what}"))?;
    Ok(pool)
}

/// Creates the database `url` names when its server does not have it yet
/// (through the server's `postgres` database, as `createdb` does), and
/// returns its name when it did; an existing database is left alone.
pub async fn create_if_missing(url: &str) -> anyhow::Result<Option<String>> {
    use sqlx::ConnectOptions as _;
    use std::str::FromStr as _;
    let redacted = redact(url);
    let options = sqlx::postgres::PgConnectOptions::from_str(url)
        .with_context(|| format!("reading the Postgres URL {redacted}"))?;
    let name = options
        .get_database()
        .filter(|n| !n.is_empty())
        .with_context(|| format!("{redacted} names no database"))?
        .to_owned();
    let mut admin = options
        .database("postgres")
        .connect()
        .await
        .with_context(|| format!("connecting to the Postgres server of {redacted}"))?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut admin)
            .await
            .context("asking Postgres which databases it has")?;
    if exists {
        return Ok(None);
    }
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    // The name is quoted as an identifier: no other SQL can ride in it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
        .execute(&mut admin)
        .await
        .with_context(|| format!("creating the database {quoted}"))?;
    Ok(Some(name))
}

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The database cannot answer now (down, restarting, the pool is
    /// exhausted or closed, the connection broke): 503 / UNAVAILABLE, and
    /// worth a retry.
    Unavailable,
    /// Anything else: a bug or a constraint the caller did not expect.
    Other,
}

/// Classifies a driver error. The server ending a connection mid-query is
/// unavailability too: SQLSTATE class 57P (a restart or shutdown, such as
/// 57P01 admin_shutdown) and 08 (connection exceptions).
pub fn classify(e: &sqlx::Error) -> Failure {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => Failure::Unavailable,
        sqlx::Error::Database(d)
            if d.code()
                .is_some_and(|c| c.starts_with("57P") || c.starts_with("08")) =>
        {
            Failure::Unavailable
        }
        _ => Failure::Other,
    }
}

/// `impl From<sqlx::Error>` for a store's error type, classified by
/// [`classify`]: an unavailability becomes its `Unavailable(sqlx::Error)`,
/// anything else its `Other(anyhow::Error)` with `context`. Both services'
/// store errors are built this way, so that `?` on a query classifies.
#[macro_export]
macro_rules! store_error_from_sqlx {
    ($error:ident, $context:expr) => {
        impl From<sqlx::Error> for $error {
            fn from(e: sqlx::Error) -> Self {
                match $crate::db::classify(&e) {
                    $crate::db::Failure::Unavailable => $error::Unavailable(e),
                    $crate::db::Failure::Other => {
                        $error::Other(anyhow::Error::new(e).context($context))
                    }
                }
            }
        }
    };
}

/// The time a new row is stamped with, cut to the microsecond Postgres
/// keeps, so that what a write returns is what a later read returns.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound as _;
    chrono::Utc::now().trunc_subsecs(6)
}

/// A database URL with its password, if any, replaced by `***`: for logs
/// and errors. The password may be in the user information
/// (`postgres://app:secret@db/x`) or in the query (`?password=secret`, and
/// `sslpassword`, as libpq and sqlx read them).
pub fn redact(url: &str) -> String {
    // The query starts after the user information, whose password may
    // hold a `?` of its own.
    let from = url.rfind('@').unwrap_or(0);
    let (base, query) = match url[from..].find('?') {
        Some(i) => (&url[..from + i], Some(&url[from + i + 1..])),
        None => (url, None),
    };
    let base = redact_userinfo(base);
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _))
                        if k.eq_ignore_ascii_case("password")
                            || k.eq_ignore_ascii_case("sslpassword") =>
                    {
                        format!("{k}=***")
                    }
                    _ => p.to_owned(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

fn redact_userinfo(url: &str) -> String {
    let Some((scheme, after)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, rest)) = after.rsplit_once('@') else {
        return url.to_owned();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{rest}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_survives_redaction() {
        assert_eq!(
            redact("postgres://app:secret@db:5432/orders"),
            "postgres://app:***@db:5432/orders"
        );
        // An `@` in the password is still the password's.
        assert_eq!(
            redact("postgres://app:p@ss@db/orders"),
            "postgres://app:***@db/orders"
        );
        assert_eq!(redact("postgres://postgres@h/x"), "postgres://postgres@h/x");
        assert_eq!(redact("not a url"), "not a url");
        // In the query, as libpq and sqlx also read it.
        assert_eq!(
            redact("postgres://app@db/orders?sslmode=disable&password=secret&sslpassword=k"),
            "postgres://app@db/orders?sslmode=disable&password=***&sslpassword=***"
        );
        assert_eq!(
            redact("postgres://app:p?ss@db/x"),
            "postgres://app:***@db/x"
        );
        assert_eq!(
            redact("postgres://app:a@db/x?PASSWORD=b"),
            "postgres://app:***@db/x?PASSWORD=***"
        );
        let url: DatabaseUrl = "postgres://app:secret@db/orders".parse().unwrap();
        assert_eq!(format!("{url:?}"), "postgres://app:***@db/orders");
    }

    #[test]
    fn a_lost_server_is_unavailable_and_a_bug_is_not() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Failure::Unavailable);
        assert_eq!(
            classify(&sqlx::Error::Io(std::io::Error::other("reset"))),
            Failure::Unavailable
        );
        assert_eq!(classify(&sqlx::Error::RowNotFound), Failure::Other);
    }

    #[test]
    fn now_is_cut_to_microseconds() {
        use chrono::Timelike as _;
        assert_eq!(now().nanosecond() % 1_000, 0);
    }
}
