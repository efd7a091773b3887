//! An OTLP/gRPC trace collector that runs inside a test: services export to
//! it as they would to Jaeger, and the test asserts on the spans.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// One received span, flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    /// Empty for a root span.
    pub parent_span_id: Vec<u8>,
    /// String and integer attributes, as text.
    pub attributes: Vec<(String, String)>,
    /// `server`, `client`, `internal`, `producer`, `consumer`, or
    /// `unspecified`.
    pub kind: &'static str,
    /// The span's status: `unset`, `ok` or `error`.
    pub status: &'static str,
    /// The status's message (an error's description).
    pub status_message: String,
}

impl ReceivedSpan {
    /// The value of an attribute.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, Default)]
struct Sink(Arc<Mutex<Vec<ReceivedSpan>>>);

fn kind(k: i32) -> &'static str {
    use opentelemetry_proto::tonic::trace::v1::span::SpanKind as K;
    match K::try_from(k) {
        Ok(K::Server) => "server",
        Ok(K::Client) => "client",
        Ok(K::Internal) => "internal",
        Ok(K::Producer) => "producer",
        Ok(K::Consumer) => "consumer",
        _ => "unspecified",
    }
}

fn status(s: Option<&opentelemetry_proto::tonic::trace::v1::Status>) -> (&'static str, String) {
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode as C;
    match s {
        Some(s) => (
            match C::try_from(s.code) {
                Ok(C::Ok) => "ok",
                Ok(C::Error) => "error",
                _ => "unset",
            },
            s.message.clone(),
        ),
        None => ("unset", String::new()),
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    let (status, status_message) = status(s.status.as_ref());
                    spans.push(ReceivedSpan {
                        kind: kind(s.kind),
                        status,
                        status_message,
                        service: service.clone(),
                        name: s.name,
                        trace_id: s.trace_id,
                        span_id: s.span_id,
                        parent_span_id: s.parent_span_id,
                        attributes: s
                            .attributes
                            .iter()
                            .map(|a| {
                                (
                                    a.key.clone(),
                                    text(a.value.as_ref().and_then(|v| v.value.as_ref())),
                                )
                            })
                            .collect(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running collector.
#[derive(Debug)]
pub struct Collector {
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    sink: Sink,
    _server: tokio::task::JoinHandle<()>,
}

impl Collector {
    /// Starts a collector on a free loopback port.
    pub async fn start() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let sink = Sink::default();
        let service = TraceServiceServer::new(sink.clone());
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        Ok(Collector {
            endpoint,
            sink,
            _server: server,
        })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `done` holds for the spans received, or `timeout` passes;
    /// returns the spans either way.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
