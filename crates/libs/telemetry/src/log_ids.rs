//! Log lines that name their trace: `trace_id` and `span_id` of the span an
//! event is logged in, when that span is exported over OTLP (its ids are
//! then the ones Jaeger shows). A JSON line gets them as top-level fields;
//! a text line ends with `trace_id=… span_id=…`. Without an exporter, or
//! outside any span, a line is as `tracing-subscriber` writes it.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// An event format, with the ids added.
pub struct WithIds<F> {
    inner: F,
    json: bool,
}

impl<F> WithIds<F> {
    pub fn json(inner: F) -> Self {
        WithIds { inner, json: true }
    }

    pub fn text(inner: F) -> Self {
        WithIds { inner, json: false }
    }
}

/// The trace and span ids (hex) of the span the event being formatted is
/// logged in, if it is an exported, valid one.
fn ids<S, N>(ctx: &FmtContext<'_, S, N>) -> Option<(String, String)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let span = ctx.event_scope()?.next()?;
    let cx = tracing::dispatcher::get_default(|d| {
        tracing_opentelemetry::get_otel_context(&span.id(), d)
    })?;
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

impl<S, N, F> FormatEvent<S, N> for WithIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some((trace, span)) = ids(ctx) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n');
        let added = if self.json {
            // One object per line: the ids go in before its closing brace.
            match body.strip_suffix('}') {
                Some(open) => format!("{open},\"trace_id\":\"{trace}\",\"span_id\":\"{span}\"}}"),
                None => body.to_owned(),
            }
        } else {
            format!("{body} trace_id={trace} span_id={span}")
        };
        writeln!(writer, "{added}")
    }
}
