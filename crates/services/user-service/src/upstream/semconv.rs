//! The client span of each call to order-service, named and described by the
//! OpenTelemetry semantic conventions, as order-service's server span of the
//! same call is: `GET /v2/orders` with `http.request.method`, `url.full` and
//! `http.response.status_code`; `order.v2.OrderService/ListOrders` with
//! `rpc.system` (`grpc`, or `connect_rpc`), `rpc.service`, `rpc.method` and
//! `rpc.grpc.status_code` (or `rpc.connect_rpc.error_code`); on every one
//! `server.address` and `server.port` of the order-service instance called.
//!
//! [`client_span`] opens the span with what the transport says of the call;
//! the adapters record what only the call knows (the instance, the status)
//! on the current span, which is the call's: [`super::Upstreams`] runs each
//! call inside its span. Any failed call marks the span as an error with the
//! failure's message: on a client span every failure counts.

use tracing::field::Empty;

use transports::Transport;

/// What a call is, in the conventions' terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// An HTTP request to a route of the REST API.
    Http {
        method: &'static str,
        route: &'static str,
    },
    /// A remote procedure call.
    Rpc {
        /// `grpc`, `connect_rpc`, or `order_tcp` (the raw-TCP lookups,
        /// which are no standard system).
        system: &'static str,
        service: &'static str,
        method: &'static str,
    },
}

const V2: &str = "order.v2.OrderService";

impl Call {
    fn grpc(service: &'static str, method: &'static str) -> Call {
        Call::Rpc {
            system: "grpc",
            service,
            method,
        }
    }

    /// The one call `via` makes per query.
    pub fn of(via: Transport) -> Call {
        match via {
            Transport::H1Json
            | Transport::H1JsonClose
            | Transport::H2cJson
            | Transport::H1Proto
            | Transport::H2cProto
            | Transport::H2cProtoTuned
            | Transport::H3Json
            | Transport::H3Proto => Call::Http {
                method: "GET",
                route: "/v2/orders",
            },
            Transport::ConnectH1Proto | Transport::ConnectH2cProto => Call::Rpc {
                system: "connect_rpc",
                service: V2,
                method: "ListOrders",
            },
            Transport::Grpc | Transport::GrpcTuned | Transport::GrpcH3 => {
                Call::grpc(V2, "ListOrders")
            }
            Transport::GrpcStream | Transport::GrpcStreamTuned => Call::grpc(V2, "StreamOrders"),
            Transport::GrpcBidi | Transport::GrpcBidiTuned => Call::grpc(V2, "LookupOrders"),
            Transport::TcpProto => Call::Rpc {
                system: "order_tcp",
                service: "order.tcp",
                method: "LookupOrders",
            },
            Transport::GrpcV1 => Call::grpc("order.v1.OrderService", "ListOrders"),
        }
    }

    /// The one call that carries many queries over `via`, if it has one
    /// (see [`Transport::batch_call`]).
    pub fn batch(via: Transport) -> Option<Call> {
        via.batch_call().map(|method| Call::grpc(V2, method))
    }

    /// The span name: `GET /v2/orders` or `order.v2.OrderService/ListOrders`.
    pub fn span_name(&self) -> String {
        match self {
            Call::Http { method, route } => format!("{method} {route}"),
            Call::Rpc {
                service, method, ..
            } => format!("{service}/{method}"),
        }
    }
}

/// The client span of one call over `via`. The query's own attributes
/// (`user_id`, `limit`, or `queries` for a batch) are declared for the
/// caller to record.
pub fn client_span(via: Transport, call: &Call) -> tracing::Span {
    let (http_method, rpc) = match *call {
        Call::Http { method, .. } => (Some(method), None),
        Call::Rpc {
            system,
            service,
            method,
        } => (None, Some((system, service, method))),
    };
    tracing::info_span!(
        "upstream.call",
        otel.name = call.span_name(),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        via = %via,
        user_id = Empty,
        limit = Empty,
        queries = Empty,
        server.address = Empty,
        server.port = Empty,
        http.request.method = http_method,
        url.full = Empty,
        http.response.status_code = Empty,
        rpc.system = rpc.map(|r| r.0),
        rpc.service = rpc.map(|r| r.1),
        rpc.method = rpc.map(|r| r.2),
        rpc.grpc.status_code = Empty,
        rpc.connect_rpc.error_code = Empty,
        pool_wait_us = Empty,
        upstream_us = Empty,
        net.bytes_read = Empty,
        net.bytes_written = Empty,
        error = Empty,
    )
}

/// The order-service instance an adapter calls: `server.address` and
/// `server.port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    address: String,
    port: Option<u16>,
}

impl Peer {
    /// The host and port of a URL (the port its scheme's when not given).
    pub fn of_url(url: &http::Uri) -> Peer {
        let host = url.host().unwrap_or_default();
        Peer {
            address: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: url.port_u16().or(match url.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            }),
        }
    }

    /// The host and port of `host:port` or `[v6]:port`.
    pub fn of_addr(addr: &str) -> Peer {
        let (host, port) = addr
            .rsplit_once(':')
            .map_or((addr, None), |(h, p)| (h, p.parse().ok()));
        Peer {
            address: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
        }
    }

    /// Records the instance on the current span.
    pub fn record(&self) {
        let span = tracing::Span::current();
        span.record("server.address", self.address.as_str());
        if let Some(p) = self.port {
            span.record("server.port", p);
        }
    }
}

/// Records an HTTP call's URL on the current span; `url` is only made
/// when the span is recorded.
pub fn record_url(url: impl FnOnce() -> String) {
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("url.full", url());
    }
}

/// Records an HTTP answer's status on the current span.
pub fn record_http_status(status: http::StatusCode) {
    tracing::Span::current().record("http.response.status_code", status.as_u16());
}

/// Records a gRPC call's status code on the current span.
pub fn record_grpc_code(code: tonic::Code) {
    tracing::Span::current().record("rpc.grpc.status_code", code as i64);
}

/// Records a Connect call's error code (`unavailable`, …) on the current span.
pub fn record_connect_code(code: &str) {
    tracing::Span::current().record("rpc.connect_rpc.error_code", code);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transport_names_its_call_as_the_server_span_is_named() {
        assert_eq!(
            Call::of(Transport::H1JsonClose).span_name(),
            "GET /v2/orders"
        );
        assert_eq!(
            Call::of(Transport::ConnectH2cProto).span_name(),
            "order.v2.OrderService/ListOrders"
        );
        assert_eq!(
            Call::of(Transport::GrpcStream).span_name(),
            "order.v2.OrderService/StreamOrders"
        );
        assert_eq!(
            Call::of(Transport::GrpcV1).span_name(),
            "order.v1.OrderService/ListOrders"
        );
        assert_eq!(
            Call::of(Transport::TcpProto).span_name(),
            "order.tcp/LookupOrders"
        );
        assert_eq!(
            Call::batch(Transport::Grpc)
                .map(|c| c.span_name())
                .as_deref(),
            Some("order.v2.OrderService/BatchListOrders")
        );
        assert_eq!(Call::batch(Transport::H1Json), None);
    }

    #[test]
    fn a_peer_is_the_host_and_port_called() {
        let p = Peer::of_url(&"http://[::1]:8082".parse().unwrap());
        assert_eq!((p.address.as_str(), p.port), ("::1", Some(8082)));
        let p = Peer::of_url(&"https://order-service".parse().unwrap());
        assert_eq!((p.address.as_str(), p.port), ("order-service", Some(443)));
        let p = Peer::of_addr("10.0.0.7:50062");
        assert_eq!((p.address.as_str(), p.port), ("10.0.0.7", Some(50062)));
    }
}
