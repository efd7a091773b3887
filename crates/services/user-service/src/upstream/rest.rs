//! The REST adapters: `h1-json`, `h1-json-close`, `h2c-json`, `h1-proto`,
//! `h2c-proto`, `h2c-proto-tuned`, `h3-json` and `h3-proto`, all calling
//! `GET /v2/orders` and differing only in the wire and the body's encoding.
//!
//! The wires are the shared ones: [`H1Pool`](super::shared::h1::H1Pool)
//! (`h1-*`), [`H1Close`] (`h1-json-close`),
//! [`H2Pool`](super::shared::h2::H2Pool) (`h2c-*`), and the `h2` crate's
//! connections of the tuned twins for `h2c-proto-tuned` ([`Conns`]), and
//! HTTP/3 channels for `h3-*` ([`H3Conns`]). The
//! answer is inflated when compressed and decoded here.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING};
use http::{HeaderValue, StatusCode};
use model::json::{OrderPageJson, Problem};
use prost::Message as _;
use transports::Transport;

use super::endpoints::Endpoints;
use super::port::{MAX_MESSAGE_BYTES, OrderQuery, OrderSource, UpstreamError, to_domain};
use super::semconv::{self, Peer};
use super::shared::exchange::{Answer, Outgoing, Target, alpn};
use super::shared::h1::H1Close;
use super::shared::h2direct::Conns;
use super::shared::h3::H3Conns;
use super::shared::pool::Pooled;
use crate::metrics::TransportMetrics;

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// The wire under a REST adapter.
#[derive(Debug)]
enum Wire {
    Pooled(Pooled),
    H1Close(H1Close),
    /// `h2c-proto-tuned`: the `h2` crate's connections, no hyper.
    H2Direct(Conns),
    /// `h3-*`: HTTP/3 channels to the QUIC port.
    H3(H3Conns<http_body_util::Full<Bytes>>),
}

/// One REST adapter: a wire and an encoding.
#[derive(Debug)]
pub struct RestSource {
    transport: Transport,
    wire: Wire,
    proto: bool,
    /// Ask for gzip (`USER_UPSTREAM_GZIP`) and zstd (`USER_UPSTREAM_ZSTD`);
    /// not on the tuned twin.
    gzip: bool,
    zstd: bool,
    /// The instance called, for the call's span.
    peer: Peer,
    /// `scheme://host:port` of the REST port, for the span's `url.full`.
    origin: String,
    /// The upstream timeout, sent as the call's deadline
    /// (`x-request-timeout-ms`: HTTP has none of its own).
    deadline: HeaderValue,
}

impl RestSource {
    /// The adapter for one of the eight REST transports.
    pub fn new(
        transport: Transport,
        ep: &Endpoints,
        metrics: Arc<TransportMetrics>,
    ) -> anyhow::Result<Self> {
        let h2 = matches!(
            transport,
            Transport::H2cJson | Transport::H2cProto | Transport::H2cProtoTuned
        );
        let target = Target::new(&ep.rest_url, ep, alpn(h2), &metrics)?;
        let n = ep.pool_size;
        let (wire, proto) = match transport {
            Transport::H1Json | Transport::H2cJson => {
                (Wire::Pooled(Pooled::on(target, h2, n, metrics)), false)
            }
            Transport::H1Proto | Transport::H2cProto => {
                (Wire::Pooled(Pooled::on(target, h2, n, metrics)), true)
            }
            Transport::H1JsonClose => (Wire::H1Close(H1Close::new(target, n, metrics)), false),
            Transport::H2cProtoTuned => (Wire::H2Direct(Conns::new(target.dial, n, metrics)), true),
            Transport::H3Json => (Wire::H3(H3Conns::new(ep, metrics)?), false),
            Transport::H3Proto => (Wire::H3(H3Conns::new(ep, metrics)?), true),
            other => anyhow::bail!("{other} is not a REST transport"),
        };
        let (peer, origin) = match &wire {
            Wire::H3(_) => (
                Peer::of_addr(&ep.h3_addr),
                format!("https://{}", ep.h3_addr),
            ),
            _ => (
                Peer::of_url(&ep.rest_url),
                format!(
                    "{}://{}",
                    ep.rest_url.scheme_str().unwrap_or("http"),
                    ep.rest_url.authority().map_or("", |a| a.as_str())
                ),
            ),
        };
        Ok(RestSource {
            transport,
            peer,
            origin,
            deadline: HeaderValue::from(u64::try_from(ep.timeout.as_millis()).unwrap_or(u64::MAX)),
            gzip: ep.gzip && !matches!(wire, Wire::H2Direct(_)),
            zstd: ep.zstd && !matches!(wire, Wire::H2Direct(_)),
            wire,
            proto,
        })
    }

    async fn fetch(&self, q: &OrderQuery) -> Result<Vec<model::Order>, UpstreamError> {
        let mut pq = format!("/v2/orders?user_id={}&limit={}", q.user_id, q.limit);
        if !q.fields.is_all() {
            // Field names are [a-z_], and the comma is fine in a query.
            pq.push_str("&fields=");
            pq.push_str(&q.fields.to_csv());
        }
        self.peer.record();
        semconv::record_url(|| format!("{}{pq}", self.origin));
        let accept = if self.proto { PROTOBUF } else { JSON };
        let mut out = Outgoing::get(&pq, accept);
        // order-service stops the work past it (a 504 `deadline_exceeded`).
        out.headers.insert(
            service_kit::call_deadline::REST_TIMEOUT_HEADER,
            self.deadline.clone(),
        );
        let accept_encoding = match (self.zstd, self.gzip) {
            (true, true) => Some("zstd, gzip;q=0.5"),
            (true, false) => Some("zstd"),
            (false, true) => Some("gzip"),
            (false, false) => None,
        };
        if let Some(v) = accept_encoding {
            out.headers
                .insert(ACCEPT_ENCODING, HeaderValue::from_static(v));
        }
        let answer = match &self.wire {
            Wire::Pooled(p) => p.send(&out).await?,
            Wire::H1Close(p) => p.send(&out).await?,
            Wire::H2Direct(p) => {
                let mut deadline = http::HeaderMap::with_capacity(1);
                deadline.insert(
                    service_kit::call_deadline::REST_TIMEOUT_HEADER,
                    self.deadline.clone(),
                );
                p.get(&pq, accept, &deadline).await?
            }
            Wire::H3(p) => p.send(&out).await?,
        };
        semconv::record_http_status(answer.status);
        super::parts::server_timing(&answer.headers);
        super::parts::decoding(|| inflate(answer).and_then(|a| decode(a, self.proto)))
    }
}

/// A gzip or zstd answer inflated, up to the message limit, so that a small
/// compressed body cannot grow without bound; any other answer as it is.
fn inflate(mut a: Answer) -> Result<Answer, UpstreamError> {
    use std::io::Read as _;
    let Some(enc) = a.headers.get(CONTENT_ENCODING) else {
        return Ok(a);
    };
    let enc = enc.as_bytes();
    if enc.eq_ignore_ascii_case(b"identity") {
        return Ok(a);
    }
    let mut out = Vec::with_capacity(a.body.len() * 4);
    let limit = MAX_MESSAGE_BYTES as u64 + 1;
    let (name, read) = if enc.eq_ignore_ascii_case(b"gzip") {
        (
            "gzip",
            flate2::read::GzDecoder::new(&a.body[..])
                .take(limit)
                .read_to_end(&mut out),
        )
    } else if enc.eq_ignore_ascii_case(b"zstd") {
        (
            "zstd",
            zstd::stream::read::Decoder::new(&a.body[..])
                .and_then(|d| d.take(limit).read_to_end(&mut out)),
        )
    } else {
        return Err(UpstreamError::Protocol(format!(
            "an answer in Content-Encoding {:?}, which was not asked for",
            String::from_utf8_lossy(enc)
        )));
    };
    read.map_err(|e| {
        UpstreamError::Protocol(format!("a {name} answer that does not inflate: {e}"))
    })?;
    if out.len() > MAX_MESSAGE_BYTES {
        return Err(UpstreamError::Protocol(format!(
            "the answer inflates past {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    a.headers.remove(CONTENT_ENCODING);
    a.body = Bytes::from(out);
    Ok(a)
}

/// The orders of a 200, or the error an error answer describes.
fn decode(a: Answer, proto: bool) -> Result<Vec<model::Order>, UpstreamError> {
    if a.status != StatusCode::OK {
        let message = serde_json::from_slice::<Problem>(&a.body)
            .map(|e| e.detail)
            .unwrap_or_else(|_| String::from_utf8_lossy(&a.body).chars().take(200).collect());
        return Err(match a.status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => {
                UpstreamError::Unavailable(message)
            }
            StatusCode::GATEWAY_TIMEOUT => UpstreamError::Timeout(message),
            s => UpstreamError::Rejected {
                status: s.to_string(),
                message,
            },
        });
    }
    let ct = a.content_type().and_then(|v| v.to_str().ok()).unwrap_or("");
    let wanted = if proto { PROTOBUF } else { JSON };
    if !ct.starts_with(wanted) {
        return Err(UpstreamError::Protocol(format!(
            "asked for {wanted}, got Content-Type {ct:?}"
        )));
    }
    // Decoding a 10,000-order body is real work: a span of its own shows it.
    let _decode = tracing::info_span!(
        target: telemetry::CODEC,
        "decode",
        format = if proto { "protobuf" } else { "json" },
        bytes = a.body.len()
    )
    .entered();
    if proto {
        let page = proto::order::v2::ListOrdersResponse::decode(a.body)
            .map_err(|e| UpstreamError::Protocol(format!("not a ListOrdersResponse: {e}")))?;
        to_domain(page.orders)
    } else {
        let page: OrderPageJson = serde_json::from_slice(&a.body)
            .map_err(|e| UpstreamError::Protocol(format!("not an order page: {e}")))?;
        to_domain(page.orders)
    }
}

impl OrderSource for RestSource {
    fn transport(&self) -> Transport {
        self.transport
    }

    fn list_orders<'a>(
        &'a self,
        q: &'a OrderQuery,
    ) -> BoxFuture<'a, Result<Vec<model::Order>, UpstreamError>> {
        Box::pin(self.fetch(q))
    }
}

#[cfg(test)]
mod tests {
    use http::header::CONTENT_TYPE;

    use super::*;

    fn answer(status: u16, ct: &str, body: &[u8]) -> Answer {
        let mut headers = http::HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            headers,
            body: Bytes::copy_from_slice(body),
        }
    }

    fn gzipped(data: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        z.write_all(data).unwrap();
        z.finish().unwrap()
    }

    fn encoded(enc: &str, body: &[u8]) -> Answer {
        let mut a = answer(200, JSON, body);
        a.headers
            .insert(CONTENT_ENCODING, HeaderValue::from_str(enc).unwrap());
        a
    }

    /// `inflate` refused the answer as a protocol error saying `says`.
    fn refused(a: Answer, says: &str) {
        let e = inflate(a).unwrap_err();
        assert!(
            matches!(&e, UpstreamError::Protocol(m) if m.contains(says)),
            "{e:?}"
        );
    }

    /// `enc`'s small body that inflates past the message limit is refused,
    /// and no more than the limit (and a byte) is ever inflated.
    fn refuses_a_bomb(enc: &str, compress: impl Fn(&[u8]) -> Vec<u8>) {
        let bomb = compress(&vec![0u8; MAX_MESSAGE_BYTES + 1]);
        assert!(
            bomb.len() < MAX_MESSAGE_BYTES / 100,
            "{enc}: {} B",
            bomb.len()
        );
        refused(encoded(enc, &bomb), "inflates past");
    }

    #[test]
    fn a_gzip_answer_is_inflated_and_a_bad_or_huge_one_refused() {
        let json = br#"{"orders":[]}"#;
        let a = inflate(encoded("gzip", &gzipped(json))).unwrap();
        assert_eq!(&a.body[..], json);
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        // No encoding, or identity: as it came.
        assert_eq!(&inflate(answer(200, JSON, json)).unwrap().body[..], json);
        assert_eq!(&inflate(encoded("identity", json)).unwrap().body[..], json);
        // Not gzip after all.
        refused(encoded("gzip", b"not gzip"), "does not inflate");
        // An encoding nobody asked for.
        refused(encoded("br", json), "not asked for");
        refuses_a_bomb("gzip", gzipped);
    }

    #[test]
    fn a_zstd_answer_is_inflated_and_a_bad_or_huge_one_refused() {
        let json = br#"{"orders":[]}"#;
        let a = inflate(encoded("zstd", &zstd::encode_all(&json[..], 1).unwrap())).unwrap();
        assert_eq!(&a.body[..], json);
        assert!(a.headers.get(CONTENT_ENCODING).is_none());
        refused(
            encoded("zstd", b"not zstd"),
            "zstd answer that does not inflate",
        );
        refuses_a_bomb("zstd", |b| zstd::encode_all(b, 3).unwrap());
    }

    #[test]
    fn error_answers_map_to_upstream_errors() {
        let body = br#"{"type":"/problems/unavailable","title":"Service unavailable","status":503,"detail":"db down","error":"unavailable"}"#;
        let problem = service_kit::problem::PROBLEM_JSON;
        assert_eq!(
            decode(answer(503, problem, body), false).unwrap_err(),
            UpstreamError::Unavailable("db down".into())
        );
        assert!(matches!(
            decode(answer(400, problem, body), true),
            Err(UpstreamError::Rejected { .. })
        ));
        assert!(matches!(
            decode(answer(504, JSON, b"late"), false),
            Err(UpstreamError::Timeout(_))
        ));
    }

    #[test]
    fn a_body_of_the_wrong_type_is_a_protocol_error() {
        assert!(matches!(
            decode(answer(200, JSON, b"{}"), true),
            Err(UpstreamError::Protocol(_))
        ));
        let empty = decode(
            answer(200, "application/json; charset=utf-8", br#"{"orders":[]}"#),
            false,
        )
        .unwrap();
        assert!(empty.is_empty());
    }
}
