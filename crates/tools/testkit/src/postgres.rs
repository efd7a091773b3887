//! A fresh Postgres database for each test, in milliseconds.
//!
//! Migrating and seeding 100k orders for every test would take seconds each, so
//! the first test to need a given schema and data builds a *template* database
//! (under a Postgres advisory lock, so parallel test processes build it once)
//! and every test then gets `CREATE DATABASE … TEMPLATE …`: a file-level copy.
//! The template's name carries a hash of the migrations and of the seed
//! version, so a changed migration builds a new template by itself.
//!
//! The server is `TEST_DATABASE_URL`, by default
//! `postgres://postgres@127.0.0.1:5432/postgres` (the machine's trust-auth
//! Postgres).

use anyhow::Context as _;
use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

/// The admin URL of the test server.
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `server` with its database name replaced by `db`.
pub fn url_for(server: &str, db: &str) -> String {
    let (base, query) = server
        .split_once('?')
        .map_or((server, None), |(b, q)| (b, Some(q)));
    let base = base.rsplit_once('/').map_or(base, |(b, _)| b);
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A database that belongs to one test.
#[derive(Debug)]
pub struct TestDb {
    /// Its connection URL.
    pub url: String,
    /// Its name.
    pub name: String,
}

impl TestDb {
    /// The database `name` on the test server, whether it exists or not:
    /// for a test of what creates it. Nothing is created here.
    pub fn named(name: &str) -> TestDb {
        TestDb {
            url: url_for(&server_url(), name),
            name: name.to_owned(),
        }
    }

    /// Drops the database. Tests call it at the end; a test that panics leaves
    /// its database behind, to be looked at.
    pub async fn drop_database(self) -> anyhow::Result<()> {
        let mut admin = PgConnection::connect(&server_url()).await?;
        admin
            .execute(AssertSqlSafe(format!(
                r#"DROP DATABASE IF EXISTS "{}" WITH (FORCE)"#,
                self.name
            )))
            .await?;
        Ok(())
    }
}

fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A key for the template of `migrator`'s migrations plus `seed_version`:
/// a change to either makes a new template.
fn template_key(migrator: &sqlx::migrate::Migrator, seed_version: &str) -> String {
    let mut h = fnv(seed_version.as_bytes(), 0xcbf2_9ce4_8422_2325);
    for m in migrator.iter() {
        h = fnv(&m.version.to_le_bytes(), h);
        h = fnv(&m.checksum, h);
    }
    format!("{h:016x}")
}

/// A new database for one test, a copy of a template built once per
/// migrations and data set: `migrator` applied, then `seed` given a pool on
/// it (which is closed after). Panics, saying so, when the test Postgres
/// cannot be reached.
pub async fn fresh_database<F, Fut>(
    prefix: &str,
    migrator: &sqlx::migrate::Migrator,
    seed_version: &str,
    seed: F,
) -> TestDb
where
    F: FnOnce(sqlx::PgPool) -> Fut,
    Fut: Future<Output = anyhow::Result<u64>>,
{
    copy_of_template(prefix, migrator, seed_version, seed)
        .await
        .unwrap_or_else(|e| {
            panic!("a {prefix} test database (is Postgres running on 127.0.0.1:5432?): {e:#}")
        })
}

async fn copy_of_template<F, Fut>(
    prefix: &str,
    migrator: &sqlx::migrate::Migrator,
    seed_version: &str,
    seed: F,
) -> anyhow::Result<TestDb>
where
    F: FnOnce(sqlx::PgPool) -> Fut,
    Fut: Future<Output = anyhow::Result<u64>>,
{
    let server = server_url();
    let template = format!("tpl_{prefix}_{}", template_key(migrator, seed_version));
    let prepare = |url: String| async move {
        let pool = sqlx::PgPool::connect(&url).await?;
        migrator.run(&pool).await?;
        seed(pool.clone()).await?;
        pool.close().await;
        anyhow::Ok(())
    };
    let mut admin = PgConnection::connect(&server)
        .await
        .with_context(|| format!("connecting to the test Postgres at {server}"))?;
    let lock = fnv(template.as_bytes(), 0xcbf2_9ce4_8422_2325) as i64;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(lock)
        .execute(&mut admin)
        .await?;
    let built = build_template_once(&mut admin, &server, &template, prepare).await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(lock)
        .execute(&mut admin)
        .await?;
    built?;

    let name = format!("test_{prefix}_{}", uuid::Uuid::new_v4().simple());
    let create = format!(r#"CREATE DATABASE "{name}" TEMPLATE "{template}""#);
    let mut tries = 0;
    loop {
        match admin.execute(AssertSqlSafe(create.clone())).await {
            Ok(_) => break,
            // Another process may be copying the same template this instant.
            Err(e) if tries < 20 && e.to_string().contains("being accessed by other users") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => return Err(e).context("creating the test database"),
        }
    }
    Ok(TestDb {
        url: url_for(&server, &name),
        name,
    })
}

async fn build_template_once<F, Fut>(
    admin: &mut PgConnection,
    server: &str,
    template: &str,
    prepare: F,
) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let exists: Option<i32> = sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
        .bind(template)
        .fetch_optional(&mut *admin)
        .await?;
    if exists.is_some() {
        return Ok(());
    }
    let building = format!("{template}_wip");
    admin
        .execute(AssertSqlSafe(format!(
            r#"DROP DATABASE IF EXISTS "{building}" WITH (FORCE)"#
        )))
        .await?;
    admin
        .execute(AssertSqlSafe(format!(r#"CREATE DATABASE "{building}""#)))
        .await?;
    prepare(url_for(server, &building))
        .await
        .context("preparing the template database")?;
    admin
        .execute(AssertSqlSafe(format!(
            r#"ALTER DATABASE "{building}" RENAME TO "{template}""#
        )))
        .await
        .context("renaming the template (did `prepare` close its connections?)")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_for_swaps_only_the_database_name() {
        assert_eq!(
            url_for("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            url_for("postgres://u@h/db?sslmode=disable", "y"),
            "postgres://u@h/y?sslmode=disable"
        );
    }
}
