//! The layer that keeps a W3C trace context on every span (feature `trace-context`), and the
//! read of the current span's.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::{LookupSpan, Registry};

use super::TraceContext;

/// The span field whose value a span continues: `traceparent`.
const FIELD: &str = "traceparent";

/// Keeps a W3C trace context on each span, so an [`Envelope`](crate::envelope::Envelope) made inside one
/// carries its `traceparent`.
///
/// Install it once, with the registry every `tracing-subscriber` setup runs on:
///
/// ```
/// use tracing_subscriber::layer::SubscriberExt;
/// use diesel_inbox::{envelope::{Envelope, TraceContextLayer}};
///
/// let subscriber = tracing_subscriber::registry()
///     .with(TraceContextLayer)
///     .with(tracing_subscriber::fmt::layer());
/// tracing::subscriber::with_default(subscriber, || {
///     // A consumer's span records the incoming envelope's traceparent...
///     let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
///     let span = tracing::info_span!("consume", traceparent = %incoming);
///     let _entered = span.enter();
///     // ...and the follow-up event it emits continues that trace.
///     let follow_up = Envelope::new("invoice.requested", "order", "42");
///     let traceparent = follow_up.traceparent().unwrap();
///     assert!(traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
///     assert_ne!(traceparent, incoming); // the consumer span is the new parent
/// });
/// ```
///
/// (In an application, `.init()` the subscriber instead of `with_default`.)
///
/// Each new span gets a span id of its own (8 random bytes) and a trace id:
///
/// - a span with a `traceparent` field holding a valid W3C `traceparent` continues that trace,
///   with its flags; recorded later (`traceparent = tracing::field::Empty`, then
///   `span.record("traceparent", ..)`), it moves the span into that trace, though not the
///   child spans opened before;
/// - any other span inherits its parent span's trace id and flags;
/// - a root span without one starts a new trace (random trace id, flags `01`, sampled).
///
/// Outside any span, or without this layer, an envelope has no `traceparent`. The layer needs
/// the `tracing-subscriber` [`Registry`] as the innermost subscriber (as
/// `tracing_subscriber::registry()` and `fmt().init()` set up).
///
/// OpenTelemetry users keep their own context (`tracing-opentelemetry`) and set
/// [`Envelope::with_traceparent`](crate::envelope::Envelope::with_traceparent) from it instead.
#[derive(Debug, Default, Clone, Copy)]
pub struct TraceContextLayer;

impl<S> Layer<S> for TraceContextLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut incoming = Incoming::default();
        attrs.record(&mut incoming);
        let (trace_id, flags) = match incoming.0 {
            Some(context) => (context.trace_id, context.flags),
            None => span
                .parent()
                .and_then(|parent| {
                    let extensions = parent.extensions();
                    let context = extensions.get::<TraceContext>()?;
                    Some((context.trace_id, context.flags))
                })
                .unwrap_or_else(|| (fastrand::u128(1..), 1)),
        };
        let context = TraceContext {
            trace_id,
            parent_id: fastrand::u64(1..),
            flags,
        };
        span.extensions_mut().insert(context);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let mut incoming = Incoming::default();
        values.record(&mut incoming);
        let (Some(recorded), Some(span)) = (incoming.0, ctx.span(id)) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(context) = extensions.get_mut::<TraceContext>() {
            context.trace_id = recorded.trace_id;
            context.flags = recorded.flags;
        }
    }
}

/// The current span's trace context as a `traceparent`, whose parent id is that span's own
/// id: `None` outside any span, or without `TraceContextLayer` over the registry.
pub(crate) fn current_traceparent() -> Option<String> {
    tracing::Span::current()
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<Registry>()?;
            let span = registry.span(id)?;
            let extensions = span.extensions();
            extensions.get::<TraceContext>().map(ToString::to_string)
        })
        .flatten()
}

/// Finds a valid `traceparent` among a span's fields, recorded as a string or with `%`/`?`.
#[derive(Default)]
struct Incoming(Option<TraceContext>);

impl Visit for Incoming {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == FIELD {
            self.0 = TraceContext::read(value).ok();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == FIELD {
            let text = format!("{value:?}");
            // `?text` quotes a string; `%text` does not.
            let text = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(&text);
            self.0 = TraceContext::read(text).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::envelope::Envelope;

    const INCOMING: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn traced<T>(run: impl FnOnce() -> T) -> T {
        tracing::subscriber::with_default(
            tracing_subscriber::registry().with(TraceContextLayer),
            run,
        )
    }

    fn parts(traceparent: &str) -> (&str, &str, &str) {
        let context = TraceContext::read(traceparent).unwrap();
        assert_eq!(context.to_string(), traceparent);
        (
            &traceparent[3..35],
            &traceparent[36..52],
            &traceparent[53..],
        )
    }

    #[test]
    fn a_consumer_span_continues_the_incoming_trace_with_its_own_parent_id() {
        let follow_up = traced(|| {
            let span = tracing::info_span!("consume", traceparent = %INCOMING);
            let _entered = span.enter();
            Envelope::new("invoice.requested", "order", "42")
        });
        let (trace, parent, flags) = parts(follow_up.traceparent().unwrap());
        assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(parent, "00f067aa0ba902b7");
        assert_eq!(flags, "01");
    }

    #[test]
    fn a_traceparent_recorded_as_a_string_or_with_debug_is_read_too() {
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let (by_str, by_debug) = traced(|| {
            let by_str = tracing::info_span!("a", traceparent = unsampled)
                .in_scope(current_traceparent)
                .unwrap();
            let by_debug = tracing::info_span!("b", traceparent = ?unsampled)
                .in_scope(current_traceparent)
                .unwrap();
            (by_str, by_debug)
        });
        for traceparent in [&by_str, &by_debug] {
            let (trace, _, flags) = parts(traceparent);
            assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(flags, "00");
        }
    }

    #[test]
    fn nested_spans_share_the_trace_and_each_has_its_own_span_id() {
        let (outer, inner) = traced(|| {
            tracing::info_span!("request").in_scope(|| {
                let outer = current_traceparent().unwrap();
                let inner = tracing::info_span!("step")
                    .in_scope(current_traceparent)
                    .unwrap();
                (outer, inner)
            })
        });
        let (outer_trace, outer_span, outer_flags) = parts(&outer);
        let (inner_trace, inner_span, _) = parts(&inner);
        assert_eq!(outer_trace, inner_trace);
        assert_ne!(outer_span, inner_span);
        assert_eq!(outer_flags, "01");
    }

    #[test]
    fn root_spans_start_different_traces() {
        let (first, second) = traced(|| {
            (
                tracing::info_span!("one")
                    .in_scope(current_traceparent)
                    .unwrap(),
                tracing::info_span!("two")
                    .in_scope(current_traceparent)
                    .unwrap(),
            )
        });
        assert_ne!(parts(&first).0, parts(&second).0);
    }

    #[test]
    fn a_traceparent_recorded_later_moves_the_span_into_that_trace() {
        let traceparent = traced(|| {
            let span = tracing::info_span!("consume", traceparent = tracing::field::Empty);
            span.record("traceparent", INCOMING);
            span.in_scope(current_traceparent).unwrap()
        });
        assert_eq!(parts(&traceparent).0, "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn an_invalid_incoming_traceparent_is_ignored_and_the_parents_trace_kept() {
        let (outer, inner) = traced(|| {
            tracing::info_span!("request").in_scope(|| {
                let inner = tracing::info_span!("consume", traceparent = "garbage")
                    .in_scope(current_traceparent)
                    .unwrap();
                (current_traceparent().unwrap(), inner)
            })
        });
        assert_eq!(parts(&outer).0, parts(&inner).0);
    }

    #[test]
    fn without_the_layer_or_outside_spans_there_is_no_traceparent() {
        let without_layer =
            tracing::subscriber::with_default(tracing_subscriber::registry(), || {
                tracing::info_span!("request").in_scope(current_traceparent)
            });
        assert_eq!(without_layer, None);
        assert_eq!(traced(current_traceparent), None);
        assert_eq!(Envelope::new("a", "b", "c").traceparent(), None);
    }

    #[test]
    fn the_layer_works_under_a_fmt_layer_too() {
        let subscriber = tracing_subscriber::registry()
            .with(TraceContextLayer)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
        let traceparent = tracing::subscriber::with_default(subscriber, || {
            tracing::info_span!("consume", traceparent = %INCOMING).in_scope(current_traceparent)
        });
        assert_eq!(
            parts(&traceparent.unwrap()).0,
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
    }

    #[test]
    fn traceparents_are_read_as_the_w3c_recommendation_says() {
        assert!(TraceContext::read(INCOMING).is_ok());
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert!(TraceContext::read(later).is_ok());
        for invalid in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert!(TraceContext::read(invalid).is_err(), "{invalid:?}");
        }
    }
}
