//! What several adapters share, and none of them owns: the connections,
//! codecs and helpers under more than one transport. Nothing here imports
//! an adapter, so the adapters import this and never each other.
//!
//! - [`exchange`]: one HTTP exchange with the REST port (what goes out, what
//!   comes back, where to), read whole up to the message limit.
//! - [`h1`]: HTTP/1.1 connection pools (keep-alive, or one connection per
//!   call), with an exact budget.
//! - [`h2`]: the slots of N multiplexed HTTP/2 connections, and hyper's
//!   HTTP/2 client on them.
//! - [`pool`]: a REST pool, HTTP/1.1 or h2c, as the REST and Connect
//!   adapters send on it.
//! - [`h2direct`]: the tuned twins' connections, the `h2` crate's used
//!   directly.
//! - [`h3`]: N HTTP/3 (QUIC) channels, counted as the sockets are.
//! - [`codec`]: the gRPC twins' codec (each answer decoded from one `Bytes`).
//! - [`rpc`]: the gRPC adapters' channels, status mapping, resends and
//!   requests.
//! - [`mux`]: many lookups on one connection, matched by request id
//!   (`grpc-bidi`, `tcp-proto`).

pub mod codec;
pub mod exchange;
pub mod h1;
pub mod h2;
pub mod h2direct;
pub mod h3;
pub mod mux;
pub mod pool;
pub mod rpc;
