//! The inbox table's states stored as text, and the machinery every area's states share: an
//! enum with one mapping to and from its text (`stored_as_text!`; each area's own states are in
//! its folder's `state.rs`), and what an unknown text is.
//!
//! Each enum reads and writes its column through Diesel (`FromSql`/`ToSql` for `Text`, on every
//! backend), so its text appears only in its mapping. Text no variant maps to is an error
//! ([`UnknownState`]), never a guess: it would come from a newer version of the crate.

use diesel::deserialize::FromSqlRow;
use diesel::expression::AsExpression;
use diesel::sql_types::Text;

/// Implements the stored-text mapping of a state enum: `as_str`, `FromStr` and Diesel's
/// `FromSql`/`ToSql` for `Text`. The variants and their texts are its explicit input.
macro_rules! stored_as_text {
    ($state:ident, $column:literal { $($variant:ident = $text:literal),+ $(,)? }) => {
        impl $state {
            /// Every text stored for a state of this version.
            #[allow(dead_code, reason = "used for the state columns that listings read as text")]
            pub(crate) const TEXTS: &'static [&'static str] = &[$($text),+];

            /// The text stored for this state.
            pub(crate) fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl ::std::str::FromStr for $state {
            type Err = $crate::state::UnknownState;

            fn from_str(text: &str) -> Result<Self, $crate::state::UnknownState> {
                match text {
                    $($text => Ok(Self::$variant),)+
                    _ => Err($crate::state::UnknownState {
                        column: $column,
                        text: text.to_owned(),
                        known: Self::TEXTS,
                    }),
                }
            }
        }

        impl<DB> diesel::deserialize::FromSql<diesel::sql_types::Text, DB> for $state
        where
            DB: diesel::backend::Backend,
            String: diesel::deserialize::FromSql<diesel::sql_types::Text, DB>,
        {
            fn from_sql(bytes: DB::RawValue<'_>) -> diesel::deserialize::Result<Self> {
                let text =
                    <String as diesel::deserialize::FromSql<diesel::sql_types::Text, DB>>::from_sql(
                        bytes,
                    )?;
                Ok(text.parse()?)
            }
        }

        impl<DB> diesel::serialize::ToSql<diesel::sql_types::Text, DB> for $state
        where
            DB: diesel::backend::Backend,
            str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
        {
            fn to_sql<'b>(
                &'b self,
                out: &mut diesel::serialize::Output<'b, '_, DB>,
            ) -> diesel::serialize::Result {
                diesel::serialize::ToSql::<diesel::sql_types::Text, DB>::to_sql(self.as_str(), out)
            }
        }
    };
}
pub(crate) use stored_as_text;

/// Where an event stands in the inbox table: settled one way or the other. A delivery whose
/// handler failed leaves no row at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
pub enum InboxState {
    /// The effect ran and committed with the row.
    Processed,
    /// The failure policy gave up on it: deliveries skip the effect.
    DeadLettered,
    /// Ops discarded the dead letter: it never runs.
    Discarded,
    /// A chain reorg orphaned the block it took effect in, and its revert handler undid the
    /// effect: the next block that includes it runs it again (see [`crate::chain`]).
    Reverted,
}

stored_as_text!(InboxState, "diesel_inbox_events.state" {
    Processed = "processed",
    DeadLettered = "dead_lettered",
    Discarded = "discarded",
    Reverted = "reverted",
});

/// What the hourly counters of `diesel_inbox_counters` count: the rare events worth watching.
/// Processed events are counted from the inbox table itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow)]
#[diesel(sql_type = Text)]
pub enum Counter {
    /// A delivery of an event already processed.
    Duplicate,
    /// A delivery that reused an id with another payload.
    PayloadConflict,
    /// A failed attempt the failure policy counted.
    FailedAttempt,
    /// An event dead-lettered by the failure policy.
    DeadLettered,
    /// A dead letter discarded by ops.
    Discarded,
    /// A dead letter redriven by ops.
    Redriven,
    /// A dead letter released by ops.
    Released,
}

stored_as_text!(Counter, "diesel_inbox_counters.counter" {
    Duplicate = "duplicate",
    PayloadConflict = "payload_conflict",
    FailedAttempt = "failed_attempt",
    DeadLettered = "dead_lettered",
    Discarded = "discarded",
    Redriven = "redriven",
    Released = "released",
});

/// A state column held text that no state of this version maps to. It is read as an error,
/// never guessed: the row was written by a newer version of the crate, or edited by hand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{column} holds {text:?}, which this version of diesel-inbox does not know: upgrade the crate, or repair the row")]
pub struct UnknownState {
    pub(crate) column: &'static str,
    pub(crate) text: String,
    pub(crate) known: &'static [&'static str],
}

impl UnknownState {
    /// The column's qualified name, such as `diesel_inbox_failures.state`.
    pub fn column(&self) -> &str {
        self.column
    }

    /// The text the column holds.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// This row of `table` at `key` held the text: a [`CorruptRow`] naming all three.
    pub(crate) fn in_row(self, key: &[(&str, &str)]) -> CorruptRow {
        let (table, column) = self.column.split_once('.').unwrap_or(("", self.column));
        let known = self
            .known
            .iter()
            .map(|t| quote(t))
            .collect::<Vec<_>>()
            .join(", ");
        let remedy = format!(
            "set it to one of {known} with UPDATE {table} SET {column} = '...' WHERE {}, or upgrade diesel-inbox if a newer version wrote it",
            where_clause(key)
        );
        CorruptRow::new(table, key, column, self.text, remedy)
    }
}

/// A row that cannot be read as it is: a column holds text this version does not accept
/// (a state no variant maps to, an empty or over-long event id). It names the table, the
/// row's key, the column and the text, and says how to repair the row. Listings show such
/// a row as unreadable instead of leaving it out; [`Stats`](crate::retention::Stats) counts it; a
/// delivery of its event is rejected with it ([`Error::CorruptRow`](crate::Error::CorruptRow)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unreadable row in {table} ({}): {column} holds {text:?}; {remedy}", where_clause_owned(.key))]
pub struct CorruptRow {
    table: &'static str,
    key: Vec<(String, String)>,
    column: &'static str,
    text: String,
    remedy: String,
}

impl CorruptRow {
    pub(crate) fn new(
        table: &str,
        key: &[(&str, &str)],
        column: &str,
        text: String,
        remedy: String,
    ) -> Self {
        Self {
            table: static_name(table),
            key: key
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            column: static_name(column),
            text,
            remedy,
        }
    }

    /// A stored event id that is not a valid one (empty, too long): the row can only be
    /// repaired by hand or deleted.
    pub(crate) fn invalid_id(table: &str, key: &[(&str, &str)], column: &str, text: &str) -> Self {
        let remedy = format!(
            "not a valid event id: give the row a valid one with UPDATE {table} SET {column} = '...' WHERE {}, or delete it",
            where_clause(key)
        );
        Self::new(table, key, column, text.to_owned(), remedy)
    }

    /// The table, such as `diesel_inbox_failures`.
    pub fn table(&self) -> &str {
        self.table
    }

    /// The row's key, column by column, such as `[("consumer", "orders"), ("event_id", "evt-1")]`.
    pub fn key(&self) -> &[(String, String)] {
        &self.key
    }

    /// The column that cannot be read.
    pub fn column(&self) -> &str {
        self.column
    }

    /// The text it holds.
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// The inbox's table and column names are few and fixed: keep them as `&'static str`.
fn static_name(name: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "diesel_inbox_events",
        "diesel_inbox_failures",
        "diesel_inbox_claims",
        "diesel_inbox_gaps",
        "diesel_inbox_outbox",
        "diesel_inbox_failure_log",
        "diesel_inbox_counters",
        "state",
        "event_id",
        "kind",
        "cause",
        "counter",
        "entry",
    ];
    NAMES.iter().find(|n| **n == name).copied().unwrap_or("?")
}

/// `'text'` as an SQL string literal.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

fn where_clause(key: &[(&str, &str)]) -> String {
    key.iter()
        .map(|(k, v)| format!("{k} = {}", quote(v)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

fn where_clause_owned(key: &[(String, String)]) -> String {
    key.iter()
        .map(|(k, v)| format!("{k} = {}", quote(v)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// A statement's error, when it is a column this version cannot read, as the row at `key` it
/// came from; any other error back as it is.
pub(crate) fn unreadable(
    error: diesel::result::Error,
    key: &[(&str, &str)],
) -> Result<CorruptRow, diesel::result::Error> {
    match unknown_in(&error) {
        Some(unknown) => Ok(unknown.clone().in_row(key)),
        None => Err(error),
    }
}

/// The state text a statement's error could not read, if that is what it is.
fn unknown_in(error: &diesel::result::Error) -> Option<&UnknownState> {
    let diesel::result::Error::DeserializationError(inner) = error else {
        return None;
    };
    inner.downcast_ref::<UnknownState>().or_else(|| {
        inner
            .downcast_ref::<diesel::result::DeserializeFieldError>()
            .and_then(|field| field.error.downcast_ref::<UnknownState>())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dead_letter::state::DeadLetterState;

    #[test]
    fn every_state_reads_back_from_its_own_text() {
        for state in [
            InboxState::Processed,
            InboxState::DeadLettered,
            InboxState::Discarded,
            InboxState::Reverted,
        ] {
            assert_eq!(state.as_str().parse(), Ok(state));
        }
        for counter in [
            Counter::Duplicate,
            Counter::PayloadConflict,
            Counter::FailedAttempt,
            Counter::DeadLettered,
            Counter::Discarded,
            Counter::Redriven,
            Counter::Released,
        ] {
            assert_eq!(counter.as_str().parse(), Ok(counter));
        }
    }

    #[test]
    fn unknown_text_is_an_error_that_names_the_column() {
        let error = "paused".parse::<DeadLetterState>().unwrap_err();
        assert_eq!(error.column, "diesel_inbox_failures.state");
        assert!(error.to_string().contains("\"paused\""));
        assert!("Processed".parse::<InboxState>().is_err());
    }

    #[test]
    fn a_corrupt_row_names_its_table_key_and_text_and_the_update_that_repairs_it() {
        let error = "bogus"
            .parse::<DeadLetterState>()
            .unwrap_err()
            .in_row(&[("consumer", "orders"), ("event_id", "it's")]);
        assert_eq!(error.table(), "diesel_inbox_failures");
        assert_eq!(error.column(), "state");
        assert_eq!(error.text(), "bogus");
        let message = error.to_string();
        assert!(
            message.contains("diesel_inbox_failures (consumer = 'orders' AND event_id = 'it''s')"),
            "{message}"
        );
        assert!(message.contains("UPDATE diesel_inbox_failures SET state = '...' WHERE consumer = 'orders' AND event_id = 'it''s'"), "{message}");
        assert!(message.contains("'dead_lettered'"), "{message}");
        assert!(message.contains("\"bogus\""), "{message}");
    }
}
