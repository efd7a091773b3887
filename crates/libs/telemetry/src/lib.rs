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
//! - [`http_failure`]: how the REST listeners log a failed answer (501 at
//!   DEBUG, 503s once a second).
//! - [`sampling`]: `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`.
//! - [`metrics`]: per-route request statistics and process CPU / memory, as
//!   Prometheus text.
//! - [`hdr`]: latencies in HDR histograms, encoded and as a percentile
//!   distribution (user-service's `/metrics/hdr`, the lab's charts).
//! - `receiver` (feature `receiver`): an OTLP collector for tests.

pub mod hdr;
pub mod http_failure;
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

/// The target of the `encode` and `decode` spans around a REST body's
/// serialization, and of the `decode` span around a Connect answer in
/// user-service (tonic and connect-rust's server encode out of sight, with
/// no span). They are exported with the trace, to show where a call's time
/// went, but left out of the log lines unless a directive of `RUST_LOG` has
/// this target (`RUST_LOG=info,codec=info`): a span the log formats costs
/// its fields' formatting on every call, and only the REST and Connect calls
/// would pay it, for a reason that is not their transport.
pub const CODEC: &str = "codec";

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

/// The log's filter: `spec` (`RUST_LOG`; `info` when unset or not a
/// filter), with the [`CODEC`] spans off unless one of its directives has
/// their target (`codec=…`, `codec[…]=…`).
fn log_filter(spec: Option<&str>) -> EnvFilter {
    let parsed = spec.and_then(|s| EnvFilter::try_new(s).ok().map(|f| (s, f)));
    let names_codec = |s: &str| {
        s.split(',')
            .any(|d| d.split(['=', '[']).next().map(str::trim) == Some(CODEC))
    };
    let filter = match parsed {
        Some((s, filter)) if names_codec(s) => return filter,
        Some((_, filter)) => filter,
        None => EnvFilter::new("info"),
    };
    filter.add_directive(
        format!("{CODEC}=off")
            .parse()
            .expect("a target and a level are a directive"),
    )
}

/// Installs logging and, when an endpoint is set, trace export. Call once, at
/// the start of `main`, inside the Tokio runtime (the exporter runs on it).
pub fn init(s: &TelemetrySettings) -> anyhow::Result<Guard> {
    propagation::install();
    let filter = log_filter(std::env::var(EnvFilter::DEFAULT_ENV).ok().as_deref());
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

#[cfg(test)]
mod tests {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::log_fields::tests::Lines;

    /// The names of the spans around the one line logged inside an
    /// `encode` span, with the log filtered as `RUST_LOG=spec` filters it.
    fn spans_around_a_line(spec: Option<&str>) -> Vec<String> {
        let lines = Lines::default();
        let out = lines.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .json()
            .fmt_fields(log_fields::JsonSpanFields)
            .with_writer(move || out.clone())
            .with_filter(log_filter(spec));
        let subscriber = tracing_subscriber::registry().with(fmt);
        tracing::subscriber::with_default(subscriber, || {
            let _call = tracing::info_span!("call").entered();
            let _encode = tracing::info_span!(target: CODEC, "encode", bytes = 5).entered();
            tracing::info!("inside");
        });
        let logged = lines.json();
        assert_eq!(logged.len(), 1, "{logged:?}");
        logged[0]["spans"]
            .as_array()
            .unwrap_or_else(|| panic!("no spans: {}", logged[0]))
            .iter()
            .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn codec_spans_stay_out_of_the_log_unless_rust_log_names_their_target() {
        for spec in [
            None,
            Some("info"),
            Some("debug"),
            Some("info,tonic::codec=debug"),
            Some("not a filter ==="),
            Some("codec=info,not a filter ==="),
        ] {
            assert_eq!(spans_around_a_line(spec), ["call"], "RUST_LOG={spec:?}");
        }
        for spec in ["info,codec=info", "codec=debug,info"] {
            assert_eq!(
                spans_around_a_line(Some(spec)),
                ["call", "encode"],
                "RUST_LOG={spec}"
            );
        }
    }

    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let g = testkit::modules::Graph::of_crate(env!("CARGO_MANIFEST_DIR"));
        g.assert_acyclic();
        // The checker reads real imports: spans carry the propagated context.
        assert!(g.imports("spans").contains("propagation"), "{:?}", g.edges);
    }
}
