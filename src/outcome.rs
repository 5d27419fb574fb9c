//! What a delivery came to.

use chrono::{DateTime, Utc};

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
}

impl<T> Outcome<T> {
    /// `true` when the effect ran for this delivery.
    pub fn is_processed(&self) -> bool {
        matches!(self, Self::Processed(_))
    }

    /// `true` when this delivery was a duplicate.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, Self::Duplicate(_))
    }

    /// The effect's value, if it ran.
    pub fn processed(self) -> Option<T> {
        match self {
            Self::Processed(value) => Some(value),
            Self::Duplicate(_) => None,
        }
    }

    /// The existing record, if this delivery was a duplicate.
    pub fn duplicate(&self) -> Option<&Duplicate> {
        match self {
            Self::Duplicate(duplicate) => Some(duplicate),
            Self::Processed(_) => None,
        }
    }

    /// Maps the effect's value, keeping a duplicate as it is.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Self::Processed(value) => Outcome::Processed(f(value)),
            Self::Duplicate(duplicate) => Outcome::Duplicate(duplicate),
        }
    }
}

/// The inbox record that made a delivery a duplicate, as it stands after counting this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub(crate) processed_at: DateTime<Utc>,
    pub(crate) deliveries: u64,
}

impl Duplicate {
    /// When the event first took effect.
    pub fn processed_at(&self) -> DateTime<Utc> {
        self.processed_at
    }

    /// How many deliveries the record has seen, this one and the first included (so at least 2).
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }
}
