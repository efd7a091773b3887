//! The order-service binary: read settings, start logging, run.

use clap::Parser as _;
use order_service::settings::{Cli, Command};
use order_service::startup::{Application, open_store, shutdown_signal};
use order_service::store::Store;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = Application::build(cli.settings).await?;
            app.run_until_stopped(shutdown_signal()).await
        }
        Command::Seed => {
            anyhow::ensure!(
                cli.settings.database_url.is_some(),
                "seed needs a Postgres URL: --database-url or ORDER_DATABASE_URL"
            );
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

/// Readable logs on a terminal, JSON otherwise; `RUST_LOG` filters.
fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if std::io::stdout().is_terminal() {
        builder.init();
    } else {
        builder.json().init();
    }
}
