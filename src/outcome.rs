//! What a delivery came to.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

/// The result of offering one delivery to the inbox.
///
/// ```
/// use diesel_inbox::Outcome;
///
/// fn ack<T>(outcome: &Outcome<T>) -> &'static str {
///     match outcome {
///         Outcome::Processed(_) => "took effect",
///         Outcome::Duplicate(_) => "already handled, effect skipped",
///         _ => "other",
///     }
/// }
/// # let _ = ack::<()>;
/// ```
#[must_use = "an Outcome says whether the effect ran; ack the delivery either way, but don't ignore which"]
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome<T> {
    /// The event was new: the effect ran and committed together with its inbox row.
    Processed(T),
    /// The event had already been processed: the effect did not run this time.
    Duplicate(Duplicate),
    /// The event failed [`Inbox::max_attempts`](crate::Inbox::max_attempts) times and is in
    /// the dead-letter table: the effect did not run. Ack it; ops redrive or discard it
    /// through [`DeadLetters`](crate::dead_letter::DeadLetters).
    DeadLettered(DeadLettered),
    /// A [`Cursor`](crate::cursor::Cursor) processed the sequence, and found sequences missing on the
    /// way: they are in the gap ledger, logged at warn and counted. The effect ran.
    ProcessedAfterGap {
        /// The effect's value.
        value: T,
        /// The gaps this sequence revealed.
        gaps: Vec<crate::cursor::gap::Gap>,
    },
}

impl<T> Outcome<T> {
    /// `true` when the effect ran for this delivery.
    pub fn is_processed(&self) -> bool {
        matches!(self, Self::Processed(_) | Self::ProcessedAfterGap { .. })
    }

    /// `true` when this delivery was a duplicate.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Self::Duplicate(_))
    }

    /// The effect's value, if it ran.
    pub fn processed(self) -> Option<T> {
        match self {
            Self::Processed(value) | Self::ProcessedAfterGap { value, .. } => Some(value),
            Self::Duplicate(_) | Self::DeadLettered(_) => None,
        }
    }

    /// The existing record, if this delivery was a duplicate.
    pub fn duplicate(&self) -> Option<&Duplicate> {
        match self {
            Self::Duplicate(duplicate) => Some(duplicate),
            Self::Processed(_) | Self::DeadLettered(_) | Self::ProcessedAfterGap { .. } => None,
        }
    }

    /// The gaps this delivery revealed: empty unless it is
    /// [`ProcessedAfterGap`](Self::ProcessedAfterGap).
    pub fn gaps(&self) -> &[crate::cursor::gap::Gap] {
        match self {
            Self::ProcessedAfterGap { gaps, .. } => gaps,
            _ => &[],
        }
    }

    /// `true` when the event is dead-lettered (or was discarded) and the effect did not run.
    pub fn is_dead_lettered(&self) -> bool {
        matches!(self, Self::DeadLettered(_))
    }

    /// Maps the effect's value, keeping the other outcomes as they are.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Self::Processed(value) => Outcome::Processed(f(value)),
            Self::Duplicate(duplicate) => Outcome::Duplicate(duplicate),
            Self::DeadLettered(dead) => Outcome::DeadLettered(dead),
            Self::ProcessedAfterGap { value, gaps } => Outcome::ProcessedAfterGap {
                value: f(value),
                gaps,
            },
        }
    }
}

/// What made a delivery a duplicate: the inbox record of its event id, as it stands after
/// counting this delivery, or the [`Cursor`](crate::cursor::Cursor) that had settled its sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub(crate) of: DuplicateOf,
}

/// The two things a duplicate can be a duplicate of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DuplicateOf {
    /// An event id's row.
    Event {
        processed_at: DateTime<Utc>,
        deliveries: u64,
        result: Option<String>,
    },
    /// A sequence a cursor had settled; it keeps no time or count per sequence.
    Sequence {
        sequence: u64,
        watermark: Option<i64>,
    },
}

impl Duplicate {
    pub(crate) fn event(
        processed_at: DateTime<Utc>,
        deliveries: u64,
        result: Option<String>,
    ) -> Self {
        Self {
            of: DuplicateOf::Event {
                processed_at,
                deliveries,
                result,
            },
        }
    }

    /// When the event first took effect; `None` for a sequence a cursor rejected, since a
    /// cursor keeps no time per sequence.
    pub fn processed_at(&self) -> Option<DateTime<Utc>> {
        match &self.of {
            DuplicateOf::Event { processed_at, .. } => Some(*processed_at),
            DuplicateOf::Sequence { .. } => None,
        }
    }

    /// How many deliveries the event's record has seen, this one and the first included (so
    /// at least 2); `None` for a sequence a cursor rejected, since a cursor keeps no count
    /// per sequence.
    pub fn deliveries(&self) -> Option<u64> {
        match &self.of {
            DuplicateOf::Event { deliveries, .. } => Some(*deliveries),
            DuplicateOf::Sequence { .. } => None,
        }
    }

    /// For a sequence a cursor rejected: the sequence, and the cursor's watermark then (every
    /// sequence at or below it is settled; a duplicate above it was settled out of order).
    pub fn sequence(&self) -> Option<(u64, Option<u64>)> {
        match &self.of {
            DuplicateOf::Sequence {
                sequence,
                watermark,
            } => Some((*sequence, watermark.and_then(|w| u64::try_from(w).ok()))),
            DuplicateOf::Event { .. } => None,
        }
    }

    /// The first run's return value, when it was processed with
    /// [`Inbox::process_storing_result`](crate::Inbox::process_storing_result): `None` when
    /// nothing was stored.
    ///
    /// # Errors
    ///
    /// [`Error::StoredResult`](crate::Error::StoredResult) when the stored JSON does not
    /// deserialize into `T`.
    pub fn stored_result<T: DeserializeOwned>(&self) -> Result<Option<T>, crate::Error> {
        let DuplicateOf::Event { result, .. } = &self.of else {
            return Ok(None);
        };
        result
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(crate::Error::StoredResult)
    }
}

/// A delivery of an event the failure policy gave up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLettered {
    pub(crate) since: DateTime<Utc>,
    pub(crate) deliveries: u64,
    pub(crate) discarded: bool,
}

impl DeadLettered {
    /// When the event was dead-lettered.
    pub fn since(&self) -> DateTime<Utc> {
        self.since
    }

    /// Deliveries the record counts: the one whose failure dead-lettered the event, and every
    /// one since, this one included (so at least 2).
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }

    /// `true` when ops discarded the dead letter: it will never run.
    pub fn is_discarded(&self) -> bool {
        self.discarded
    }
}
