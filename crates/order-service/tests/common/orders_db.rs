//! order-service's test database, for its own tests and for user-service's
//! (which include this file by path): one definition for both.

/// A database of this test's own, holding order-service's migrated schema
/// and the data set, cloned from a template named by the data set's
/// version.
pub async fn orders_database() -> pgtest::TestDb {
    // Both crates sit two levels under the workspace root.
    let migrations =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/orders");
    pgtest::fresh_database(
        "orders",
        &migrations,
        &dataset::version(),
        |url| async move {
            let pool = sqlx::PgPool::connect(&url).await?;
            order_service::store::postgres::MIGRATOR.run(&pool).await?;
            order_service::store::postgres::PgStore::from_pool(pool.clone())
                .seed()
                .await?;
            pool.close().await;
            Ok(())
        },
    )
    .await
    .expect("an orders test database (is Postgres running on 127.0.0.1:5432?)")
}
