//! user-service's entry point: settings, logging, then the library does the rest.

use user_service::settings::{Cli, Command, RENAMED};
use user_service::startup::{Application, shutdown_signal};
use user_service::store::postgres::PgStore;

/// jemalloc, whose background threads return freed pages to the system
/// within seconds: a flood's bodies, once shed or timed out, leave no
/// resident memory behind (glibc's malloc kept it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (cli, renamed) = service_kit::settings::parse::<Cli>(RENAMED);
    let format = cli.settings.log_format.clone();
    telemetry::main(
        "user-service",
        env!("CARGO_PKG_VERSION"),
        &format,
        &renamed,
        run(cli),
    )
    .await
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(cli.settings).await?;
            app.run_until_stopped(shutdown_signal()).await
        }
        Command::Seed => {
            let pool = cli.settings.pool().ok_or_else(|| {
                anyhow::anyhow!("seed needs --database-url (or USER_DATABASE_URL)")
            })?;
            // A server without the database gets it, and the caller is told.
            if let Some(name) = service_kit::db::create_if_missing(&pool.url.0).await? {
                println!("created the database {name}");
            }
            let store = PgStore::connect(&pool).await?;
            let inserted = store.seed().await?;
            tracing::info!(inserted, database = %pool.url.redacted(), "seeded the data set's users");
            Ok(())
        }
    }
}
