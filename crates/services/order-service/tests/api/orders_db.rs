//! order-service's test database, for its own tests and for user-service's
//! (which include this file by path): one definition for both.

/// A database of this test's own, holding order-service's migrated schema
/// and the data set, cloned from a template named by the migrations and the
/// data set's version.
pub async fn orders_database() -> testkit::postgres::TestDb {
    use order_service::store::postgres::{MIGRATOR, PgStore};
    testkit::postgres::fresh_database(
        "orders",
        &MIGRATOR,
        &dataset::version(),
        |pool| async move { PgStore::from_pool(pool).seed().await },
    )
    .await
}
