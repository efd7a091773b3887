//! What makes an answer good: the lab's counting rules, the same as the k6
//! scripts' (`k6/lib/user-orders.js`, `judge`). A 503 with `Retry-After` is
//! shed (the service refusing work at its limit: neither good nor bad);
//! otherwise an answer is good when its status is the one expected, every
//! header asked for has its value (the transport user-service used, the
//! calls it made), and its body is as long as the answer the lab checked
//! against the data set before the run.

use crate::http1::Head;

/// How an answer was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Good,
    Bad,
    Shed,
}

/// What a good answer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    pub status: u16,
    /// Headers that must have exactly these values (names in any case).
    pub headers: Vec<(String, String)>,
    /// The body's length, when known; `None` checks status and headers only.
    pub length: Option<u64>,
}

impl Expect {
    /// The verdict on an answer whose head is `head` (its body read whole
    /// to its `Content-Length`).
    pub fn judge(&self, head: &Head) -> Verdict {
        if head.status == 503 && head.retry_after {
            return Verdict::Shed;
        }
        if head.status != self.status {
            return Verdict::Bad;
        }
        let all = if self.headers.len() >= 32 {
            u32::MAX
        } else {
            (1u32 << self.headers.len()) - 1
        };
        if head.matched & all != all {
            return Verdict::Bad;
        }
        match (head.content_length, self.length) {
            (None, _) => Verdict::Bad,
            (Some(got), Some(want)) if got != want => Verdict::Bad,
            _ => Verdict::Good,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect() -> Expect {
        Expect {
            status: 200,
            headers: vec![("X-Via".into(), "grpc".into())],
            length: Some(120),
        }
    }

    /// A head whose X-Via was `via` (the parser sets the bit only for
    /// the value asked).
    fn head(status: u16, via: Option<&str>, length: Option<u64>) -> Head {
        Head {
            status,
            content_length: length,
            matched: u32::from(via == Some("grpc")),
            ..Head::default()
        }
    }

    #[test]
    fn only_the_expected_status_transport_and_length_are_good() {
        let e = expect();
        assert_eq!(e.judge(&head(200, Some("grpc"), Some(120))), Verdict::Good);
        assert_eq!(e.judge(&head(200, Some("grpc"), Some(119))), Verdict::Bad);
        assert_eq!(
            e.judge(&head(200, Some("h1-json"), Some(120))),
            Verdict::Bad
        );
        assert_eq!(e.judge(&head(200, None, Some(120))), Verdict::Bad);
        assert_eq!(e.judge(&head(200, Some("grpc"), None)), Verdict::Bad);
        assert_eq!(e.judge(&head(500, Some("grpc"), Some(120))), Verdict::Bad);
    }

    #[test]
    fn a_503_with_retry_after_is_shed_and_without_it_bad() {
        let e = expect();
        let mut h = head(503, None, Some(0));
        assert_eq!(e.judge(&h), Verdict::Bad);
        h.retry_after = true;
        assert_eq!(e.judge(&h), Verdict::Shed);
    }

    #[test]
    fn without_a_length_any_body_of_the_right_status_and_headers_is_good() {
        let e = Expect {
            length: None,
            ..expect()
        };
        assert_eq!(e.judge(&head(200, Some("grpc"), Some(7))), Verdict::Good);
    }
}
