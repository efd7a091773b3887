//! Span fields in JSON log lines, written straight into the span's string.
//!
//! `tracing-subscriber`'s JSON formatter keeps each span's fields as a JSON
//! string, built through a map of `serde_json` values, and every
//! `span.record(..)` parses that string back into a map, adds the field, and
//! writes it all out again. The services record a span's fields one by one
//! as a call goes on (its status, its peer, its bytes, ...), so a call paid
//! for several parses of every span it opened, and a transport whose spans
//! record more paid more, for a reason that is not the transport.
//! [`JsonSpanFields`] writes each field as a JSON member straight into the
//! string and appends later ones to the object. A field recorded twice then
//! appears twice; a JSON reader (the formatter's own, when it writes a line
//! inside the span) keeps the last, which is the field's value.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::span::Record;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::{FormatFields, Writer};

/// The JSON field format of the services' log lines (see the module doc).
#[derive(Debug, Default)]
pub struct JsonSpanFields;

impl<'a> FormatFields<'a> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'_>, fields: R) -> fmt::Result {
        let mut object = String::from("{");
        fields.record(&mut Members::new(&mut object));
        object.push('}');
        writer.write_str(&object)
    }

    fn add_fields(
        &self,
        current: &'a mut FormattedFields<Self>,
        fields: &Record<'_>,
    ) -> fmt::Result {
        let object = &mut current.fields;
        if object.len() < 2 {
            // Not an object: never written by `format_fields`, which writes
            // `{}` for a span begun without fields.
            object.clear();
            object.push('{');
        } else {
            object.pop(); // the closing brace
        }
        fields.record(&mut Members::new(object));
        object.push('}');
        Ok(())
    }
}

/// Writes each field it visits as `"name":value` onto an object's members,
/// separated by commas, the object's braces left to the caller.
struct Members<'a> {
    out: &'a mut String,
}

impl<'a> Members<'a> {
    fn new(out: &'a mut String) -> Self {
        Members { out }
    }

    /// `"name":` after a comma if members precede it.
    fn name(&mut self, field: &Field) {
        if !self.out.ends_with('{') {
            self.out.push(',');
        }
        let name = field.name();
        string(self.out, name.strip_prefix("r#").unwrap_or(name));
        self.out.push(':');
    }
}

/// `s` as a JSON string: the runs that need no escape copied whole.
fn string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            b if b < b' ' => "",
            _ => continue,
        };
        // An ASCII byte: never inside a character of several bytes.
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

impl Visit for Members<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.name(field);
        if value.is_finite() {
            let _ = write!(self.out, "{value}");
        } else {
            self.out.push_str("null");
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.name(field);
        let _ = write!(self.out, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.name(field);
        let _ = write!(self.out, "{value}");
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.name(field);
        self.out.push_str(if value { "true" } else { "false" });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.name(field);
        string(self.out, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A `log` record's metadata, which the line already carries.
        if field.name().starts_with("log.") {
            return;
        }
        self.name(field);
        string(self.out, &format!("{value:?}"));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing::field::Empty;

    use super::*;

    /// Log lines written into memory (the crate's tests share it).
    #[derive(Clone, Default)]
    pub(crate) struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Lines {
        /// Each line written so far, parsed as the JSON it must be.
        pub(crate) fn json(&self) -> Vec<serde_json::Value> {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
                .collect()
        }
    }

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The `span` object of each JSON line logged while `f` runs.
    fn spans_logged(f: impl FnOnce()) -> Vec<serde_json::Value> {
        let lines = Lines::default();
        let out = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .fmt_fields(JsonSpanFields)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        lines
            .json()
            .into_iter()
            .map(|line| line["span"].clone())
            .collect()
    }

    #[test]
    fn fields_recorded_later_are_in_the_lines_with_their_last_value() {
        let spans = spans_logged(|| {
            let span = tracing::info_span!("call", user = "u1", code = Empty, bytes = Empty);
            let _in = span.enter();
            tracing::info!("started");
            span.record("code", 200);
            span.record("bytes", 17);
            tracing::info!("answered");
            span.record("code", 503);
            tracing::info!("failed");
        });
        let want = [
            serde_json::json!({"name": "call", "user": "u1"}),
            serde_json::json!({"name": "call", "user": "u1", "code": 200, "bytes": 17}),
            serde_json::json!({"name": "call", "user": "u1", "code": 503, "bytes": 17}),
        ];
        assert_eq!(spans, want);
    }

    #[test]
    fn a_span_made_without_fields_takes_the_ones_recorded() {
        let spans = spans_logged(|| {
            let span = tracing::info_span!("bare", later = Empty);
            let _in = span.enter();
            tracing::info!("before");
            span.record("later", "yes");
            tracing::info!("after");
        });
        assert_eq!(
            spans,
            [
                serde_json::json!({"name": "bare"}),
                serde_json::json!({"name": "bare", "later": "yes"}),
            ]
        );
    }

    #[test]
    fn every_kind_of_value_is_valid_json_with_its_value() {
        #[derive(Debug)]
        struct Thing;
        let spans = spans_logged(|| {
            let span = tracing::info_span!(
                "kinds",
                text = "a \"quoted\"\\ line\n\u{1}é",
                neg = -3i64,
                big = u64::MAX,
                yes = true,
                ratio = 0.25,
                nan = f64::NAN,
                thing = ?Thing,
                r#type = "raw",
            );
            let _in = span.enter();
            tracing::info!("inside");
        });
        assert_eq!(
            spans,
            [serde_json::json!({
                "name": "kinds",
                "text": "a \"quoted\"\\ line\n\u{1}é",
                "neg": -3,
                "big": u64::MAX,
                "yes": true,
                "ratio": 0.25,
                "nan": null,
                "thing": "Thing",
                "type": "raw",
            })]
        );
    }
}
