//! The W3C trace context of the current `tracing` span.
//!
//! `TraceContextLayer` (feature `trace-context`) gives every span a trace id, a span id of its
//! own and trace flags, kept in the span's extensions in the `tracing-subscriber` registry.
//! [`Envelope::new`](crate::envelope::Envelope::new) reads the current span's context through
//! [`current_traceparent`] and sends it as the event's `traceparent`. A `traceparent` read off
//! the wire is checked by [`TraceContext::parse`] with or without the feature.

use std::fmt;

use crate::Error;

#[cfg(feature = "trace-context")]
mod layer;
#[cfg(feature = "trace-context")]
pub(crate) use layer::current_traceparent;
#[cfg(feature = "trace-context")]
pub use layer::TraceContextLayer;

/// Without the feature `trace-context`, no span carries a trace context.
#[cfg(not(feature = "trace-context"))]
pub(crate) fn current_traceparent() -> Option<String> {
    None
}

/// A W3C trace context: a trace id, a parent (span) id, and trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceContext {
    pub(crate) trace_id: u128,
    pub(crate) parent_id: u64,
    pub(crate) flags: u8,
}

impl TraceContext {
    /// Reads a `traceparent` header value: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase, ids not
    /// all zero. A later version (`01` to `fe`) is read the same way, and may go on after a
    /// `-`, as the W3C recommendation asks.
    pub(crate) fn parse(value: &str) -> Result<Self, Error> {
        Self::read(value).map_err(|reason| {
            Error::invalid_envelope(format!(
                "traceparent {value:?} is not a W3C trace context ({reason}): give \
                 00-<32 hex digits trace id>-<16 hex digits parent id>-<2 hex digits flags>, \
                 lowercase, with ids not all zero"
            ))
        })
    }

    fn read(value: &str) -> Result<Self, &'static str> {
        let bytes = value.as_bytes();
        if bytes.len() < 55 {
            return Err("too short");
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err("its fields are not where they belong");
        }
        let version = hex(&value[..2]).ok_or("the version is not 2 lowercase hex digits")?;
        match version {
            0xff => return Err("version ff is invalid"),
            0 if bytes.len() != 55 => return Err("version 00 has exactly 55 characters"),
            _ if bytes.len() > 55 && bytes[55] != b'-' => {
                return Err("a later version goes on only after a -")
            }
            _ => {}
        }
        let trace_id = hex(&value[3..35]).ok_or("the trace id is not 32 lowercase hex digits")?;
        let parent_id =
            hex(&value[36..52]).ok_or("the parent id is not 16 lowercase hex digits")?;
        let flags = hex(&value[53..55]).ok_or("the flags are not 2 lowercase hex digits")?;
        if trace_id == 0 {
            return Err("the trace id is all zero");
        }
        if parent_id == 0 {
            return Err("the parent id is all zero");
        }
        Ok(Self {
            trace_id,
            parent_id: u64::try_from(parent_id).map_err(|_| "the parent id is too long")?,
            flags: u8::try_from(flags).map_err(|_| "the flags are too long")?,
        })
    }
}

/// Lowercase hex digits only (no sign, no uppercase), at most 32 of them.
fn hex(digits: &str) -> Option<u128> {
    if digits.is_empty()
        || digits.len() > 32
        || !digits
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    u128::from_str_radix(digits, 16).ok()
}

/// Formats as a version 00 `traceparent`.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.parent_id, self.flags
        )
    }
}
