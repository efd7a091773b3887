//! The transports from user-service to order-service: their names, as
//! `?via=`, the `x-via` header, the gRPC `via` field and `USER_DEFAULT_VIA`
//! spell them, in the order of the design's matrix, and the [`Transport`]
//! type those names parse into.
//!
//! This crate exists so that there is one list. [`Transport`] has a variant
//! per name, and [`ALL`] is made from [`Transport::ALL`], so the two cannot
//! disagree. user-service has an adapter for each (its matches over
//! [`Transport`] are exhaustive, so a new variant does not compile until it
//! has one) and builds its help texts and error messages from here; the lab
//! runs its experiments over the same list and takes its baselines
//! ([`H1_JSON`], [`TCP_PROTO`]) from here. A new transport is added here
//! first.
//!
//! The names are kebab-case: the protocol and wire first (`h1`, `h2c`, `h3`,
//! `connect-h1`, `connect-h2c`, `grpc`, `tcp`), then what tells it apart
//! (the body, or how the connection is used). No dependencies, so anything
//! in the workspace can use it.

/// HTTP/1.1, JSON body, N pooled keep-alive connections: at most N calls in
/// flight, the rest wait. The REST baseline.
pub const H1_JSON: &str = "h1-json";
/// HTTP/1.1, JSON body, a new connection per call (`Connection: close`), at
/// most N at once.
pub const H1_JSON_CLOSE: &str = "h1-json-close";
/// HTTP/2 cleartext (prior knowledge), JSON body, N connections with the
/// calls multiplexed.
pub const H2C_JSON: &str = "h2c-json";
/// HTTP/1.1, protobuf body, pooled as [`H1_JSON`].
pub const H1_PROTO: &str = "h1-proto";
/// HTTP/2 cleartext, protobuf body, multiplexed as [`H2C_JSON`].
pub const H2C_PROTO: &str = "h2c-proto";
/// [`H2C_PROTO`]'s GET, on connections of the `h2` crate opened and used
/// by the caller (no hyper, no task per call) that advertise HTTP/2's
/// largest frame size: the twin that shows what hyper's HTTP/2 client and
/// its defaults cost.
pub const H2C_PROTO_TUNED: &str = "h2c-proto-tuned";
/// Connect unary `ListOrders` (connect-rust's client, buffa messages, a
/// protobuf body POSTed to order-service's REST port), on HTTP/1.1
/// connections pooled as [`H1_PROTO`].
pub const CONNECT_H1_PROTO: &str = "connect-h1-proto";
/// Connect unary `ListOrders` as [`CONNECT_H1_PROTO`], on h2c connections
/// multiplexed as [`H2C_PROTO`].
pub const CONNECT_H2C_PROTO: &str = "connect-h2c-proto";
/// gRPC unary `ListOrders`, protobuf, N channels (one HTTP/2 connection each).
pub const GRPC: &str = "grpc";
/// gRPC unary `ListOrders` as [`GRPC`], to the same server, with tonic's
/// client built differently from tonic's default `Channel`: streams opened
/// on `h2` crate connections by the caller (no `Buffer` task, no hyper) that
/// advertise HTTP/2's largest frame size, the request sent in one piece, the
/// answer decoded from one `Bytes`. Stock
/// [`GRPC`] beside it shows what the defaults cost.
pub const GRPC_TUNED: &str = "grpc-tuned";
/// gRPC server streaming `StreamOrders`, one order per message, protobuf;
/// connections as [`GRPC`].
pub const GRPC_STREAM: &str = "grpc-stream";
/// [`GRPC_STREAM`]'s call, made as [`GRPC_TUNED`] makes its own: on `h2`
/// crate connections opened by the caller, the largest frames, each message
/// decoded from one `Bytes`. Stock [`GRPC_STREAM`] beside it shows what the defaults cost.
pub const GRPC_STREAM_TUNED: &str = "grpc-stream-tuned";
/// gRPC bidirectional `LookupOrders`: one long-lived stream per connection
/// carries many lookups, matched by request id; protobuf; connections as
/// [`GRPC`].
pub const GRPC_BIDI: &str = "grpc-bidi";
/// [`GRPC_BIDI`] with two departures from tonic's defaults: each answer
/// decoded from one `Bytes` rather than tonic's receive buffer, and
/// channels that advertise HTTP/2's largest frame size. It keeps tonic's
/// `Channel`, whose tasks a long-lived stream pays once, not per lookup.
pub const GRPC_BIDI_TUNED: &str = "grpc-bidi-tuned";
/// Raw TCP, length-prefixed protobuf frames, no HTTP: N persistent
/// connections, many lookups in flight on each. The floor of the hop.
pub const TCP_PROTO: &str = "tcp-proto";
/// gRPC unary on the legacy all-strings `order.v1` API, protobuf;
/// connections as [`GRPC`], the strings converted back to the domain type by
/// the caller.
pub const GRPC_V1: &str = "grpc-v1";

/// HTTP/3 (QUIC, always encrypted), JSON body, N connections with the
/// calls multiplexed as [`H2C_JSON`]'s: the REST routes over QUIC.
pub const H3_JSON: &str = "h3-json";
/// HTTP/3, protobuf body, as [`H3_JSON`].
pub const H3_PROTO: &str = "h3-proto";
/// gRPC unary `ListOrders` over HTTP/3 (tonic's client on tonic-h3's
/// channel, gRFC G2), N connections as [`H3_JSON`].
pub const GRPC_H3: &str = "grpc-h3";

/// How many transports there are.
pub const COUNT: usize = 19;

/// Every transport's name, in the order of the design's matrix: the names of
/// [`Transport::ALL`], position by position.
pub const ALL: [&str; COUNT] = {
    let mut names = [""; COUNT];
    let mut i = 0;
    while i < names.len() {
        names[i] = Transport::ALL[i].name();
        i += 1;
    }
    names
};

/// A transport to order-service, as the `via` parameter names it.
///
/// One variant per name of [`ALL`], in the same order; each variant's name
/// is the constant of the same name (`GrpcBidiTuned` is [`GRPC_BIDI_TUNED`]),
/// which says what the transport is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// HTTP/1.1, JSON, pooled keep-alive connections.
    H1Json,
    /// HTTP/1.1, JSON, a new connection for every call.
    H1JsonClose,
    /// HTTP/2 cleartext (prior knowledge), JSON, multiplexed.
    H2cJson,
    /// HTTP/1.1, protobuf body, pooled.
    H1Proto,
    /// HTTP/2 cleartext, protobuf body, multiplexed.
    H2cProto,
    /// `H2cProto`'s GET over `h2` connections of its own rather than
    /// hyper's client.
    H2cProtoTuned,
    /// Connect unary `ListOrders` (connect-rust, buffa) over HTTP/1.1,
    /// pooled as [`Transport::H1Proto`].
    ConnectH1Proto,
    /// Connect unary `ListOrders` over h2c, multiplexed as
    /// [`Transport::H2cProto`].
    ConnectH2cProto,
    /// gRPC unary `ListOrders`.
    Grpc,
    /// gRPC unary `ListOrders`, tonic's client over `h2` connections of its
    /// own rather than tonic's `Channel`.
    GrpcTuned,
    /// gRPC server streaming `StreamOrders`, one order per message.
    GrpcStream,
    /// `StreamOrders` as [`Transport::GrpcTuned`] makes its call.
    GrpcStreamTuned,
    /// gRPC bidirectional `LookupOrders`: one long-lived stream per
    /// connection carries many lookups.
    GrpcBidi,
    /// `GrpcBidi` with each answer decoded from one `Bytes`; tonic's
    /// `Channel` kept.
    GrpcBidiTuned,
    /// Raw TCP, length-prefixed protobuf frames: the floor.
    TcpProto,
    /// gRPC unary on the legacy all-strings `order.v1` API.
    GrpcV1,
    /// HTTP/3, JSON, multiplexed.
    H3Json,
    /// HTTP/3, protobuf body, multiplexed.
    H3Proto,
    /// gRPC unary `ListOrders` over HTTP/3.
    GrpcH3,
}

// Each transport sits at its own index of `Transport::ALL`, which is how
// `Transport::index` finds it.
const _: () = {
    let mut i = 0;
    while i < Transport::ALL.len() {
        assert!(Transport::ALL[i] as usize == i);
        i += 1;
    }
};

impl Transport {
    /// Whether this transport runs over QUIC (HTTP/3): always encrypted, so
    /// it is compared with TLS rows, never cleartext ones.
    pub fn is_quic(self) -> bool {
        matches!(
            self,
            Transport::H3Json | Transport::H3Proto | Transport::GrpcH3
        )
    }

    /// Every transport, in the order of the design's matrix (the order of
    /// the variants).
    pub const ALL: [Transport; COUNT] = [
        Transport::H1Json,
        Transport::H1JsonClose,
        Transport::H2cJson,
        Transport::H1Proto,
        Transport::H2cProto,
        Transport::H2cProtoTuned,
        Transport::ConnectH1Proto,
        Transport::ConnectH2cProto,
        Transport::Grpc,
        Transport::GrpcTuned,
        Transport::GrpcStream,
        Transport::GrpcStreamTuned,
        Transport::GrpcBidi,
        Transport::GrpcBidiTuned,
        Transport::TcpProto,
        Transport::GrpcV1,
        Transport::H3Json,
        Transport::H3Proto,
        Transport::GrpcH3,
    ];

    /// The name `via` uses: this transport's entry in [`ALL`].
    pub const fn name(self) -> &'static str {
        match self {
            Transport::H1Json => H1_JSON,
            Transport::H1JsonClose => H1_JSON_CLOSE,
            Transport::H2cJson => H2C_JSON,
            Transport::H1Proto => H1_PROTO,
            Transport::H2cProto => H2C_PROTO,
            Transport::H2cProtoTuned => H2C_PROTO_TUNED,
            Transport::ConnectH1Proto => CONNECT_H1_PROTO,
            Transport::ConnectH2cProto => CONNECT_H2C_PROTO,
            Transport::Grpc => GRPC,
            Transport::GrpcTuned => GRPC_TUNED,
            Transport::GrpcStream => GRPC_STREAM,
            Transport::GrpcStreamTuned => GRPC_STREAM_TUNED,
            Transport::GrpcBidi => GRPC_BIDI,
            Transport::GrpcBidiTuned => GRPC_BIDI_TUNED,
            Transport::TcpProto => TCP_PROTO,
            Transport::GrpcV1 => GRPC_V1,
            Transport::H3Json => H3_JSON,
            Transport::H3Proto => H3_PROTO,
            Transport::GrpcH3 => GRPC_H3,
        }
    }

    /// The order-service call that answers many queries at once over this
    /// transport, if it has one.
    pub fn batch_call(self) -> Option<&'static str> {
        match self {
            Transport::Grpc => Some("BatchListOrders"),
            Transport::GrpcStream => Some("BatchStreamOrders"),
            _ => None,
        }
    }

    /// Every name, comma-separated, for error messages and `--help`.
    pub fn names() -> String {
        joined(", ")
    }

    /// The position in [`Transport::ALL`] (and of its name in [`ALL`]).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `via` that names no transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTransport {
    /// What the caller sent.
    pub name: String,
}

impl std::fmt::Display for UnknownTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown transport {}; valid transports are: {}",
            quoted(&self.name),
            Transport::names()
        )
    }
}

impl std::error::Error for UnknownTransport {}

impl std::str::FromStr for Transport {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Transport::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| UnknownTransport { name: s.to_owned() })
    }
}

/// The most characters of an unknown name an error quotes back.
const QUOTED_CHARS: usize = 64;

/// A bad name as an error quotes it, as `model::quoted` quotes every bad
/// value: whole (debug-quoted) when short, else its first [`QUOTED_CHARS`]
/// characters and its length (this crate has no dependencies, so it is
/// repeated here; user-service's tests hold the two to each other).
fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &s[..end], s.len()),
    }
}

/// Each stock transport and its tuned twin: the same call to the same server,
/// with the client built or decoding differently from what tonic and hyper
/// give by default (see each twin's own comment).
pub const TWINS: [(&str, &str); 4] = [
    (H2C_PROTO, H2C_PROTO_TUNED),
    (GRPC, GRPC_TUNED),
    (GRPC_STREAM, GRPC_STREAM_TUNED),
    (GRPC_BIDI, GRPC_BIDI_TUNED),
];

/// Each HTTP/3 transport and the TCP transport that makes the same call
/// over HTTP/2: the pairs a comparison of QUIC against TCP sets side by
/// side.
pub const QUIC_TWINS: [(&str, &str); 3] =
    [(H3_JSON, H2C_JSON), (H3_PROTO, H2C_PROTO), (GRPC_H3, GRPC)];

/// The tuned twin of stock transport `name`, if it has one.
pub fn twin_of(name: &str) -> Option<&'static str> {
    TWINS.iter().find(|(stock, _)| *stock == name).map(|t| t.1)
}

/// Whether `name` is one of [`ALL`] (exactly: names are case-sensitive).
pub fn is_known(name: &str) -> bool {
    position(name).is_some()
}

/// Whether `name` is a transport over QUIC ([`Transport::is_quic`]).
pub fn is_quic(name: &str) -> bool {
    name.parse::<Transport>().is_ok_and(Transport::is_quic)
}

/// The position of `name` in [`ALL`], if it is one.
pub fn position(name: &str) -> Option<usize> {
    ALL.iter().position(|n| *n == name)
}

/// Every name, in order, with `sep` between them: `joined(", ")` for a help
/// text or an error message, `joined("|")` for an alternation.
pub fn joined(sep: &str) -> String {
    ALL.join(sep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a, b, "{a} is listed twice");
            }
        }
    }

    #[test]
    fn names_are_kebab_case() {
        for name in ALL {
            assert!(!name.is_empty());
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name:?} is not lowercase letters, digits and hyphens"
            );
            assert!(
                name.starts_with(|c: char| c.is_ascii_lowercase()),
                "{name:?} does not start with a letter"
            );
            assert!(
                !name.ends_with('-') && !name.contains("--"),
                "{name:?} has an empty word"
            );
        }
    }

    #[test]
    fn names_are_in_the_design_order() {
        assert_eq!(
            ALL,
            [
                "h1-json",
                "h1-json-close",
                "h2c-json",
                "h1-proto",
                "h2c-proto",
                "h2c-proto-tuned",
                "connect-h1-proto",
                "connect-h2c-proto",
                "grpc",
                "grpc-tuned",
                "grpc-stream",
                "grpc-stream-tuned",
                "grpc-bidi",
                "grpc-bidi-tuned",
                "tcp-proto",
                "grpc-v1",
                "h3-json",
                "h3-proto",
                "grpc-h3",
            ]
        );
    }

    #[test]
    fn every_twin_is_its_stock_name_and_tuned_and_both_are_known() {
        for (stock, twin) in TWINS {
            assert!(is_known(stock) && is_known(twin), "{stock} / {twin}");
            assert_eq!(twin, format!("{stock}-tuned"));
            assert_eq!(twin_of(stock), Some(twin));
            assert_eq!(twin_of(twin), None, "a twin has no twin");
        }
        // Every `-tuned` name is someone's twin.
        let tuned = ALL.iter().filter(|n| n.ends_with("-tuned")).count();
        assert_eq!(tuned, TWINS.len());
        assert_eq!(twin_of(H1_PROTO), None);
    }

    #[test]
    fn every_quic_transport_has_one_tcp_twin() {
        let quic: Vec<&str> = Transport::ALL
            .iter()
            .filter(|t| t.is_quic())
            .map(|t| t.name())
            .collect();
        assert_eq!(quic, QUIC_TWINS.map(|p| p.0).to_vec());
        for (q, t) in QUIC_TWINS {
            assert!(is_quic(q) && !is_quic(t), "{q}'s twin {t} is TCP");
        }
        assert!(!is_quic("carrier-pigeon"));
    }

    #[test]
    fn the_baselines_are_known() {
        assert!(is_known(H1_JSON));
        assert!(is_known(TCP_PROTO));
        assert_eq!(position(H1_JSON), Some(0));
    }

    #[test]
    fn every_name_is_known_at_its_position() {
        for (i, name) in ALL.iter().enumerate() {
            assert!(is_known(name));
            assert_eq!(position(name), Some(i));
        }
    }

    #[test]
    fn unknown_names_are_not_known() {
        for name in [
            "",
            "carrier-pigeon",
            "H1-JSON",
            "h1-json ",
            " grpc",
            "grpc-",
            "h1",
        ] {
            assert!(!is_known(name), "{name:?}");
            assert_eq!(position(name), None, "{name:?}");
        }
    }

    #[test]
    fn every_transport_parses_back_from_its_name() {
        for t in Transport::ALL {
            assert_eq!(t.name().parse::<Transport>(), Ok(t));
            assert_eq!(Transport::ALL[t.index()], t);
            assert_eq!(ALL[t.index()], t.name());
            assert_eq!(t.to_string(), t.name());
        }
    }

    #[test]
    fn an_unknown_transport_lists_the_valid_ones() {
        let e = "carrier-pigeon".parse::<Transport>().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("\"carrier-pigeon\""), "{msg}");
        for t in Transport::ALL {
            assert!(msg.contains(t.name()), "{msg} lacks {t}");
        }
        assert_eq!(
            msg,
            format!(
                "unknown transport \"carrier-pigeon\"; valid transports are: {}",
                joined(", ")
            )
        );
        let long = "x".repeat(100);
        let msg = long.parse::<Transport>().unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "unknown transport {:?}… (100 bytes);",
                "x".repeat(64)
            )),
            "{msg}"
        );
    }

    #[test]
    fn joined_lists_every_name_in_order() {
        assert_eq!(
            joined(", "),
            "h1-json, h1-json-close, h2c-json, h1-proto, h2c-proto, h2c-proto-tuned, connect-h1-proto, connect-h2c-proto, grpc, grpc-tuned, grpc-stream, grpc-stream-tuned, grpc-bidi, grpc-bidi-tuned, tcp-proto, grpc-v1, h3-json, h3-proto, grpc-h3"
        );
        assert_eq!(joined("|").split('|').collect::<Vec<_>>(), ALL);
    }
}
