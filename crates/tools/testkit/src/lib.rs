//! The test kit both services' tests (and the lab's) share: real
//! processes, real Postgres databases, real bad clients.
//!
//! # Layout
//! - [`postgres`]: a fresh Postgres database per test, copied from a
//!   migrated and seeded template ([`postgres::fresh_database`],
//!   [`postgres::TestDb`]);
//! - [`proxy`]: a TCP proxy a test can cut or make kill connections, to put
//!   between a service and Postgres (or another service);
//! - [`compose`]: docker-compose.yml read as both services' compose tests
//!   read it, and the checks both make;
//! - [`process`]: a service binary started and stopped by SIGTERM, or run
//!   until it exits; the tests' log;
//! - [`health`]: a service's gRPC health, asked until it becomes what a
//!   test expects;
//! - [`sigterm`]: callers that load a service until SIGTERM ends it, and
//!   the tally that says whether anything sent was lost;
//! - [`flood`]: floods of bad connections (idle, trickling, announcing large
//!   frames) for the services' flood tests;
//! - [`problem`]: problem bodies as both services' tests check them;
//! - [`schemathesis`]: the schemathesis run against a service's OpenAPI
//!   document;
//! - [`http`]: a GET's body as text, whatever its status;
//! - [`modules`]: a crate's module graph read from its source, and the test
//!   that it has no import cycle.

pub mod compose;
pub mod flood;
pub mod health;
pub mod http;
pub mod modules;
pub mod postgres;
pub mod problem;
pub mod process;
pub mod proxy;
pub mod schemathesis;
pub mod sigterm;
