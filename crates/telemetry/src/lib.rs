//! Observability for both services: logs, traces exported over OTLP, W3C
//! trace context carried across every transport, and the Prometheus text of
//! what a service measures about itself.
//!
//! # Layout
//! - this file: [`init`] installs the `tracing` subscriber (readable on a
//!   terminal, JSON otherwise, `RUST_LOG` filters) and, when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the OTLP/gRPC trace exporter; the
//!   returned [`Guard`] flushes spans at shutdown.
//! - [`propagation`]: inject and extract W3C `traceparent` in HTTP headers,
//!   gRPC metadata and plain string maps (bidi stream messages, raw-TCP frames).
//! - [`spans`]: server spans named and described by the OpenTelemetry
//!   semantic conventions (`GET /v2/orders`, `order.v2.OrderService/ListOrders`,
//!   `http.route`, `rpc.grpc.status_code`, error status).
//! - [`sampling`]: `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
//! - [`metrics`]: per-route request statistics and process CPU / memory, as
//!   Prometheus text.
//! - `receiver` (feature `receiver`): an OTLP collector for tests.

mod log_fields;
mod log_ids;
pub mod metrics;
pub mod propagation;
#[cfg(feature = "receiver")]
pub mod receiver;
pub mod sampling;
pub mod spans;

use std::io::IsTerminal as _;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How a service reports on itself.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// `service.version` of the exported spans.
    pub service_version: String,
    /// OTLP/gRPC endpoint such as `http://jaeger:4317`; `None` exports nothing.
    pub otlp_endpoint: Option<String>,
    /// Which traces are recorded (`OTEL_TRACES_SAMPLER`, `_ARG`). The
    /// default follows the caller's decision and records every new trace.
    pub sampling: sampling::Sampling,
    /// `json`, `text` (or `pretty`), or `auto` (text on a terminal, JSON
    /// otherwise).
    pub log_format: String,
}

impl TelemetrySettings {
    /// Settings from the standard OpenTelemetry environment variables:
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_SAMPLER` and
    /// `OTEL_TRACES_SAMPLER_ARG` (see [`sampling`]). The log format is `auto`
    /// here: each service sets it from its own `*_LOG_FORMAT` setting.
    pub fn from_env(service_name: &str, service_version: &str) -> anyhow::Result<Self> {
        let sampling = sampling::Sampling::from_env()?;
        Ok(TelemetrySettings {
            service_name: service_name.to_owned(),
            service_version: service_version.to_owned(),
            otlp_endpoint: std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .ok()
                .filter(|e| !e.is_empty()),
            sampling,
            log_format: "auto".to_owned(),
        })
    }
}

/// Keeps the exporter alive; dropping it (or calling [`Guard::shutdown`])
/// flushes the spans not yet sent.
#[derive(Debug)]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Guard {
    /// Sends what is buffered and stops the exporter.
    pub fn shutdown(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.force_flush() {
                tracing::warn!(error = %e, "flushing spans failed");
            }
            if let Err(e) = p.shutdown() {
                tracing::debug!(error = %e, "stopping the span exporter failed");
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Crates whose own spans would drown the service's in the export: the
/// HTTP/2 and gRPC machinery, and the OTLP exporter itself (which would
/// otherwise trace its own exports).
const QUIET_FOR_EXPORT: &str = "info,h2=off,hyper=off,hyper_util=off,tonic=off,tower=off,opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off,sqlx=off";

/// A service binary's whole life, as both services' `main` run it: logging
/// and trace export set up (`log_format` from the service's own setting),
/// the `warnings` gathered before logging existed written out, then `run`;
/// its error, if any, is logged before the buffered spans are flushed.
pub async fn main(
    service_name: &str,
    service_version: &str,
    log_format: &str,
    warnings: &[String],
    run: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let mut settings = TelemetrySettings::from_env(service_name, service_version)?;
    log_format.clone_into(&mut settings.log_format);
    let guard = init(&settings)?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let result = run.await;
    if let Err(e) = &result {
        tracing::error!(error = format!("{e:#}"), "{service_name} failed");
    }
    guard.shutdown();
    result
}

/// Installs logging and, when an endpoint is set, trace export. Call once, at
/// the start of `main`, inside the Tokio runtime (the exporter runs on it).
pub fn init(s: &TelemetrySettings) -> anyhow::Result<Guard> {
    propagation::install();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match s.log_format.as_str() {
        "json" => true,
        "text" | "pretty" => false,
        _ => !std::io::stdout().is_terminal(),
    };
    // Each line carries the trace and span ids of the span it was logged in,
    // when spans are exported (see `log_ids`).
    let fmt = if json {
        tracing_subscriber::fmt::layer()
            .event_format(log_ids::WithIds::json(
                tracing_subscriber::fmt::format().json(),
            ))
            .fmt_fields(log_fields::JsonSpanFields)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .event_format(log_ids::WithIds::text(tracing_subscriber::fmt::format()))
            .boxed()
    };
    let (otel, provider) = match &s.otlp_endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .with_context(|| format!("building the OTLP exporter for {endpoint}"))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_sampler(s.sampling.sampler())
                .with_resource(
                    opentelemetry_sdk::Resource::builder()
                        .with_service_name(s.service_name.clone())
                        .with_attribute(opentelemetry::KeyValue::new(
                            "service.version",
                            s.service_version.clone(),
                        ))
                        .build(),
                )
                .build();
            let tracer = provider.tracer(s.service_name.clone());
            // Decided per span and event, never cached per callsite. With two
            // per-layer filters that both cache `Interest::always`, an
            // `enabled` check that no event follows (sqlx's
            // `log::log_enabled!` before each query, through tracing-log,
            // once RUST_LOG enables debug anywhere) leaves the thread's
            // per-layer filter state set, and the next event at an "always"
            // callsite is then dropped by both layers: the log went silent.
            // An exporter filter of `Interest::sometimes` makes every event
            // run the filters first, which resets that state.
            let quiet = EnvFilter::new(QUIET_FOR_EXPORT);
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(
                    tracing_subscriber::filter::dynamic_filter_fn(move |meta, cx| {
                        quiet.enabled(meta, cx.clone())
                    })
                    .with_max_level_hint(tracing_subscriber::filter::LevelFilter::INFO),
                );
            (Some(layer), Some(provider))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(otel)
        .try_init()
        .context("installing the tracing subscriber")?;
    if let Some(e) = &s.otlp_endpoint {
        tracing::info!(endpoint = %e, sampler = s.sampling.describe(), "exporting traces over OTLP");
    }
    Ok(Guard { provider })
}
