//! The order-service binary: read settings, start logging, run.

use order_service::settings::{Cli, Command, RENAMED};
use order_service::startup::{Application, open_store, shutdown_signal};
use order_service::store::Store;

/// jemalloc, whose background threads return freed pages to the system
/// within seconds: a flood's bodies, once shed or timed out, leave no
/// resident memory behind (glibc's malloc kept it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (cli, renamed) = service_kit::settings::parse::<Cli>(RENAMED);
    let log_format = cli.settings.log_format.clone();
    let version = env!("CARGO_PKG_VERSION");
    telemetry::main("order-service", version, &log_format, &renamed, run(cli)).await
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(cli.settings).await?;
            app.run_until_stopped(shutdown_signal()).await
        }
        Command::Seed => {
            let Some(url) = &cli.settings.database_url else {
                anyhow::bail!("seed needs a Postgres URL: --database-url or ORDER_DATABASE_URL");
            };
            // A server without the database gets it, and the caller is told.
            if let Some(name) = service_kit::db::create_if_missing(&url.0).await? {
                println!("created the database {name}");
            }
            let Store::Postgres(pg) = open_store(&cli.settings).await? else {
                anyhow::bail!("seed needs the Postgres store");
            };
            let started = std::time::Instant::now();
            let n = pg.seed().await?;
            tracing::info!(
                new_orders = n,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "data set loaded"
            );
            Ok(())
        }
    }
}
