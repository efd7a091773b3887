//! The domain types both services share, and their wire forms.
//!
//! # Layout
//! - [`order`]: the domain `Order`, `NewOrder` and their parts.
//! - [`fields`]: field selection (`fields=` and `FieldMask`) as a [`FieldSet`].
//! - [`json`]: the JSON form of the typed API, with OpenAPI schemas.
//! - [`v2`]: conversions to and from the typed protobuf API.
//! - [`v1`]: conversions to and from the legacy all-strings API.
//! - [`connect`]: conversions to and from the same typed API as generated for
//!   Connect (connect-rust's buffa runtime): the one place buffa meets the domain.
//! - [`PageToken`]: the opaque cursor of a page of orders.
//!
//! Parsing happens here, once: a wire message becomes a domain value through
//! `TryFrom`, and a bad field becomes a [`ParseError`] that names it.

pub mod connect;
pub mod fields;
pub mod json;
pub mod order;
pub mod v1;
pub mod v2;

pub use fields::{FieldSet, OrderField};
pub use order::{Address, Currency, NewOrder, Order, OrderStatus};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use uuid::Uuid;

/// The most characters of a bad value an error quotes back.
pub const QUOTED_CHARS: usize = 64;

/// A bad value as an error quotes it: whole (debug-quoted) when short, else
/// its first [`QUOTED_CHARS`] characters and its length, so that a huge
/// value never becomes a huge error (or a gRPC `grpc-message` header past
/// a client's metadata limit).
pub fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => format!("{s:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &s[..end], s.len()),
    }
}

/// The most bytes of text an error carries (a problem's `detail`, a
/// `grpc-message`): whatever a request held, its error stays small.
pub const MAX_ERROR_TEXT: usize = 512;

/// `s` whole when it is at most [`MAX_ERROR_TEXT`] bytes, else its start
/// (cut at a character boundary) and its length.
pub fn capped(s: String) -> String {
    if s.len() <= MAX_ERROR_TEXT {
        return s;
    }
    let mut end = MAX_ERROR_TEXT;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// A request field that could not be parsed, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ParseError {
    /// The field at fault, as the request names it.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ParseError {
    /// A parse error of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ParseError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Where the next page of a user's orders starts: after this order id.
///
/// On the wire it is the id's 16 bytes in URL-safe base64, opaque to callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageToken(pub Uuid);

impl PageToken {
    /// The token's text.
    pub fn encode(self) -> String {
        URL_SAFE_NO_PAD.encode(self.0.as_bytes())
    }

    /// Parses a token; an empty string means the first page.
    pub fn decode(s: &str) -> Result<Option<Self>, ParseError> {
        if s.is_empty() {
            return Ok(None);
        }
        let bad = || ParseError::new("page_token", "is not a token this service gave out");
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| bad())?;
        let arr: [u8; 16] = bytes.try_into().map_err(|_| bad())?;
        Ok(Some(PageToken(Uuid::from_bytes(arr))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_capped_at_a_character_boundary_with_its_length() {
        assert_eq!(capped("short".into()), "short");
        let long = "é".repeat(1000);
        let c = capped(long);
        assert!(c.ends_with("… (2000 bytes)"), "{c}");
        assert!(c.len() <= MAX_ERROR_TEXT + 20);
    }

    #[test]
    fn page_tokens_round_trip_and_garbage_is_refused() {
        let t = PageToken(Uuid::from_u128(0x1234));
        assert_eq!(PageToken::decode(&t.encode()).unwrap(), Some(t));
        assert_eq!(PageToken::decode("").unwrap(), None);
        assert_eq!(PageToken::decode("!!").unwrap_err().field, "page_token");
        assert!(PageToken::decode("AAAA").is_err());
    }

    #[test]
    fn no_module_imports_one_that_imports_it_back() {
        let g = testkit::modules::Graph::of_crate(env!("CARGO_MANIFEST_DIR"));
        g.assert_acyclic();
        // The checker reads real imports: v1's and Connect's shapes are
        // built from v2's.
        assert!(g.imports("v1").contains("v2"), "{:?}", g.edges);
        assert!(g.imports("connect").contains("v2"), "{:?}", g.edges);
    }
}
