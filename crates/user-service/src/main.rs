//! user-service's entry point: settings, logging, then the library does the rest.

use user_service::settings::{Cli, Command, RENAMED};
use user_service::startup::{Application, shutdown_signal};
use user_service::store::postgres::PgStore;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (cli, renamed) = negotiate::settings::parse::<Cli>(RENAMED);
    let mut t = telemetry::TelemetrySettings::from_env("user-service", env!("CARGO_PKG_VERSION"))?;
    t.log_format.clone_from(&cli.settings.log_format);
    let guard = telemetry::init(&t)?;
    for warning in renamed {
        tracing::warn!("{warning}");
    }
    let result = run(cli).await;
    if let Err(e) = &result {
        tracing::error!(error = format!("{e:#}"), "user-service failed");
    }
    guard.shutdown();
    result
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
            let store = PgStore::connect(&pool).await?;
            let inserted = store.seed().await?;
            tracing::info!(inserted, database = %pool.url.redacted(), "seeded the data set's users");
            Ok(())
        }
    }
}
