//! Settings renamed to match order-service's still work for one release,
//! with a warning in the log.

use std::path::Path;
use std::time::Duration;

use testkit::process::{run_to_exit, unreachable_database, warnings};

#[test]
fn the_old_pool_size_variable_sets_the_database_pool_and_says_it_is_renamed() {
    let bin = Path::new(env!("CARGO_BIN_EXE_user-service"));
    // 0 connections is refused by the new setting's own check, naming it.
    let out = run_to_exit(
        bin,
        &[("USER_DATABASE_POOL_SIZE", "0")],
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("--database-max-connections"),
        "{}",
        out.stderr
    );

    let db = unreachable_database();
    let out = run_to_exit(
        bin,
        &[
            ("USER_LOG_FORMAT", "json"),
            ("USER_DATABASE_URL", &db),
            ("USER_DATABASE_POOL_SIZE", "3"),
            ("USER_DATABASE_ACQUIRE_TIMEOUT_MS", "200"),
        ],
        Duration::from_secs(60),
    );
    assert!(!out.status.success(), "no database, no service");
    assert!(
        warnings(&out.stdout).iter().any(|m| m
            .contains("USER_DATABASE_POOL_SIZE is renamed USER_DATABASE_MAX_CONNECTIONS")),
        "{}",
        out.stdout
    );
}
