//! The lab's own Postgres server, for real: made with initdb, reachable
//! where it says, and restarted for real, which a session opened before the
//! restart finds out (the server ends it) and the server's own start time
//! shows. Stopped and removed when dropped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};

use lab::measure::services::OwnPostgres;
use lab::measure::services::own_postgres::bindir;

/// One query through psql, as the server's `postgres` role.
fn query(pg: &OwnPostgres, sql: &str) -> String {
    let out = Command::new(bindir().unwrap().join("psql"))
        .args(["-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-Atc", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn the_labs_own_postgres_restarts_for_real_and_is_gone_when_dropped() {
    let pg = OwnPostgres::start().expect("the lab's own Postgres");
    assert!(pg.url().ends_with(&format!("127.0.0.1:{}", pg.port())));
    let started = query(&pg, "SELECT pg_postmaster_start_time()");
    // A session that stays open across the restart.
    let mut session = Command::new(bindir().unwrap().join("psql"))
        .args(["-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-At"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = session.stdin.take().unwrap();
    writeln!(stdin, "SELECT 'before';").unwrap();
    // The session is in: the server counts it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while query(
        &pg,
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%before%' AND pid <> pg_backend_pid()",
    ) != "1"
    {
        assert!(std::time::Instant::now() < deadline, "psql never got in");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let took = pg.restart().unwrap();
    assert!(took.as_secs() < 60, "{took:?}");
    let again = query(&pg, "SELECT pg_postmaster_start_time()");
    assert_ne!(started, again, "the same postmaster: no restart happened");

    writeln!(stdin, "SELECT 'after';").unwrap();
    drop(stdin);
    let out = session.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("before"), "{said}");
    // The old session was ended by the server; psql says so (it may then
    // reconnect and answer, as it does by default).
    assert!(
        err.contains("terminating connection") || err.contains("server closed the connection"),
        "{err}"
    );

    let port = pg.port();
    drop(pg);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still listening after drop"
    );
}
