//! A database named by a URL is created on a real Postgres when it is
//! missing, once: the server's own catalogue is the oracle.

#![allow(clippy::unwrap_used)]

use sqlx::Connection as _;

async fn exists(name: &str) -> bool {
    let mut c = sqlx::PgConnection::connect(&testkit::postgres::server_url())
        .await
        .unwrap();
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_missing_database_is_created_once_and_an_existing_one_left_alone() {
    let name = format!("create_if_missing_{}", std::process::id());
    let url = testkit::postgres::TestDb::named(&name).url;
    testkit::postgres::TestDb::named(&name)
        .drop_database()
        .await
        .unwrap();
    assert!(!exists(&name).await);
    let created = service_kit::db::create_if_missing(&url).await.unwrap();
    assert_eq!(created.as_deref(), Some(name.as_str()));
    assert!(exists(&name).await, "the catalogue has it");
    assert_eq!(
        service_kit::db::create_if_missing(&url).await.unwrap(),
        None
    );
    testkit::postgres::TestDb::named(&name)
        .drop_database()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_url_without_a_database_or_server_is_a_clear_error() {
    let e = service_kit::db::create_if_missing("postgres://postgres@127.0.0.1:5432")
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("names no database"), "{e:#}");
    let e = service_kit::db::create_if_missing("postgres://postgres@127.0.0.1:1/orders")
        .await
        .unwrap_err();
    assert!(
        format!("{e:#}").contains("connecting to the Postgres server"),
        "{e:#}"
    );
}
