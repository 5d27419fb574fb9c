//! The W3C trace context of the current `tracing` span.

/// Keeps a W3C trace context on each span, so an [`Envelope`](crate::Envelope) made inside one
/// carries its `traceparent`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TraceContextLayer;
