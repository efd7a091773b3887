//! `order-service seed` on a server that lacks its database: the database is
//! created (and the command says so), then the data set is loaded into it.
//! The oracles are Postgres's catalogue and the data set's own count.

use sqlx::Connection as _;

#[tokio::test]
async fn seed_creates_a_missing_database_says_so_and_loads_the_data_set() {
    let name = format!("seed_creates_{}", std::process::id());
    let url = testkit::postgres::TestDb::named(&name).url;
    testkit::postgres::TestDb::named(&name)
        .drop_database()
        .await
        .unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_order-service"))
            .arg("seed")
            .env_clear()
            .env("ORDER_DATABASE_URL", &url)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("created the database {name}")),
        "{said}"
    );

    let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let want: usize = dataset::users()
        .iter()
        .map(|u| dataset::orders_of(u).len())
        .sum();
    assert_eq!(n as usize, want);
    db.close().await.unwrap();

    // Again: the database is there, so nothing is created or said.
    let out = run();
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("created"));
    testkit::postgres::TestDb::named(&name)
        .drop_database()
        .await
        .unwrap();
}
