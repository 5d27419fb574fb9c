//! The schema versions a consumer accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use crate::{envelope::Envelope, Error};

/// The schema versions a consumer accepts, per event type.
///
/// A consumer checks each envelope before it reads the payload. An event type it does not
/// list, or a version it does not accept, is a permanent failure: returned from an inbox
/// handler, it dead-letters the event at once with the reason
/// ([`UnsupportedSchemaVersion`]), and the message is acked, so it never crash-loops. Once a
/// consumer that reads the version is deployed, ops redrive the dead letters.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{envelope::{Envelope, SchemaVersions}, Ack, Inbox, Outcome};
///
/// let accepted = SchemaVersions::new().accept("order.placed", [1, 2]);
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let orders = Inbox::new("orders")?;
///
/// let from_the_future = Envelope::new("order.placed", "order", "42").with_schema_version(3);
/// let result = orders.process(&mut conn, &from_the_future, |_tx| {
///     accepted.check(&from_the_future)?;
///     // ... decode the payload and take effect ...
///     Ok::<(), diesel_inbox::Error>(())
/// });
/// assert!(matches!(result, Ok(Outcome::DeadLettered(_))));
/// assert_eq!(Ack::of(&result), Ack::Ack);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaVersions {
    accepted: BTreeMap<String, BTreeSet<u32>>,
}

impl SchemaVersions {
    /// Accepts no event at all, until [`accept`](SchemaVersions::accept) adds some.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also accepts `versions` of `event_type` (added to those accepted already).
    #[must_use]
    pub fn accept(mut self, event_type: &str, versions: impl IntoIterator<Item = u32>) -> Self {
        self.accepted
            .entry(event_type.to_owned())
            .or_default()
            .extend(versions);
        self
    }

    /// Whether version `version` of `event_type` is accepted.
    pub fn accepts(&self, event_type: &str, version: u32) -> bool {
        self.accepted
            .get(event_type)
            .is_some_and(|versions| versions.contains(&version))
    }

    /// Checks that the envelope's event type and schema version are accepted.
    ///
    /// # Errors
    ///
    /// [`Error::permanent`] with an [`UnsupportedSchemaVersion`] as its reason (its
    /// [`source`](std::error::Error::source)), when they are not.
    pub fn check(&self, envelope: &Envelope) -> Result<(), Error> {
        if self.accepts(envelope.event_type(), envelope.schema_version()) {
            return Ok(());
        }
        Err(Error::permanent(UnsupportedSchemaVersion {
            event_type: envelope.event_type().to_owned(),
            version: envelope.schema_version(),
            accepted: self
                .accepted
                .get(envelope.event_type())
                .map(|versions| versions.iter().copied().collect())
                .unwrap_or_default(),
        }))
    }

    /// Every accepted event type and version, in order.
    pub fn accepted(&self) -> impl Iterator<Item = (&str, u32)> {
        self.accepted.iter().flat_map(|(event_type, versions)| {
            versions
                .iter()
                .map(move |version| (event_type.as_str(), *version))
        })
    }
}

/// An event whose type or schema version the consumer does not accept: the reason of the
/// permanent failure [`SchemaVersions::check`] returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "event type {event_type:?} schema version {version} is not accepted by this consumer ({}): \
     deploy a consumer that reads version {version}, then redrive the event",
    accepts(accepted)
)]
#[non_exhaustive]
pub struct UnsupportedSchemaVersion {
    /// The event type.
    pub event_type: String,
    /// Its schema version.
    pub version: u32,
    /// The versions of that type the consumer accepts, in order; empty if none.
    pub accepted: Vec<u32>,
}

fn accepts(versions: &[u32]) -> String {
    let Some((first, rest)) = versions.split_first() else {
        return "it accepts no version of this event type".to_owned();
    };
    rest.iter()
        .fold(format!("accepts {first}"), |mut list, version| {
            let _ = write!(list, ", {version}");
            list
        })
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::{FailureKind, HandlerError};

    fn orders() -> SchemaVersions {
        SchemaVersions::new()
            .accept("order.placed", [1, 2])
            .accept("order.cancelled", [1])
    }

    fn reason(error: &Error) -> &UnsupportedSchemaVersion {
        error
            .source()
            .and_then(|source| source.downcast_ref())
            .expect("the reason is an UnsupportedSchemaVersion")
    }

    #[test]
    fn an_accepted_version_passes() {
        let event = Envelope::new("order.placed", "order", "42").with_schema_version(2);
        assert!(orders().check(&event).is_ok());
    }

    #[test]
    fn an_unaccepted_version_is_a_permanent_failure_that_says_what_to_do() {
        let event = Envelope::new("order.placed", "order", "42").with_schema_version(3);
        let error = orders().check(&event).unwrap_err();
        assert_eq!(error.failure_kind(), FailureKind::Permanent);
        assert_eq!(
            reason(&error),
            &UnsupportedSchemaVersion {
                event_type: "order.placed".to_owned(),
                version: 3,
                accepted: vec![1, 2],
            }
        );
        assert_eq!(
            reason(&error).to_string(),
            "event type \"order.placed\" schema version 3 is not accepted by this consumer \
             (accepts 1, 2): deploy a consumer that reads version 3, then redrive the event"
        );
    }

    #[test]
    fn an_unlisted_event_type_is_not_accepted_in_any_version() {
        let event = Envelope::new("order.shipped", "order", "42");
        let error = orders().check(&event).unwrap_err();
        assert!(reason(&error).accepted.is_empty());
        assert!(error.to_string().contains("accepts no version"), "{error}");
    }

    #[test]
    fn accepting_a_type_twice_adds_the_versions() {
        let versions = orders().accept("order.placed", [4, 1]);
        let accepted: Vec<_> = versions.accepted().collect();
        assert_eq!(
            accepted,
            [
                ("order.cancelled", 1),
                ("order.placed", 1),
                ("order.placed", 2),
                ("order.placed", 4)
            ]
        );
        assert!(versions.accepts("order.placed", 4));
        assert!(!versions.accepts("order.placed", 3));
    }
}
