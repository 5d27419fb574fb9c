//! The library's errors in the tool's words: where a message names a library function as the
//! remedy, the tool names its own command instead. The rest read as the library wrote them.

use diesel_inbox::{cursor, AdminError, Error};

/// `error`'s message for a user of the command line.
pub(crate) fn message(error: &AdminError) -> String {
    match error {
        AdminError::Inbox(error) => inbox_message(error),
        AdminError::DeadLetterNotFound { event_id } => format!(
            "no dead letter for event {event_id:?} of this consumer; list them with `diesel-inbox dead-letters list` (and `--consumer NAME` for another consumer)"
        ),
        AdminError::GapNotFound { id } => format!(
            "no gap {id} for this consumer; list the gaps with `diesel-inbox gaps --all`"
        ),
        AdminError::ClaimNotFound { event_id } => format!(
            "no claim {event_id:?} for this consumer; list the claims with `diesel-inbox claims --all`"
        ),
        AdminError::RetentionBelowWindow { older_than, window } => format!(
            "refusing to prune inbox rows younger than the redelivery window: --redelivery-window is {}, and pruning rows only {} old (--older-than) would let a late redelivery run the effect again; pass a longer --older-than, or a shorter --redelivery-window if redeliveries really stop sooner",
            human(*window),
            human(*older_than)
        ),
        AdminError::MissingAudit(field) => format!(
            "an audited change needs a non-empty {field}: pass --actor and --reason"
        ),
        other => other.to_string(),
    }
}

/// The message of an error a delivery can meet as well.
fn inbox_message(error: &Error) -> String {
    match error {
        Error::Database(source) => {
            let text = format!("database error: {source}");
            if error.is_missing_table() {
                format!(
                    "{text} (a table is missing: apply the inbox schema; `diesel-inbox migration print` shows its SQL, `diesel-inbox migration install <DIR>` adds it to the app's migrations)"
                )
            } else {
                text
            }
        }
        Error::Cursor(cursor::Refused::TooManyOpenGaps { stream, open }) => format!(
            "stream {stream:?} already has {open} open gaps: resolve those given up on with `diesel-inbox gaps resolve`"
        ),
        other => other.to_string(),
    }
}

/// A duration in the units `--older-than` takes.
fn human(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds >= size && seconds % size == 0 {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use diesel_inbox::{
        claim::ClaimState, cursor::GapState, dead_letter::DeadLetterState, outbox::OutboxState,
        EventId,
    };

    use super::*;

    /// Every error the tool's commands can meet: connecting, listing, showing, changing,
    /// pruning, the doctor, migrations.
    fn every_error_the_tool_shows() -> Vec<AdminError> {
        let id = || EventId::new("evt-1").unwrap();
        let db = || diesel::result::Error::NotFound;
        let inbox = [
            Error::Database(db()),
            Error::RetriesExhausted {
                attempts: 3,
                source: db(),
            },
            Error::ConnectionLost { source: db() },
            Error::TransactionAborted { source: None },
            Error::StoredResult(serde_json::from_str::<u8>("x").unwrap_err()),
            Error::Pool("timed out".to_owned()),
            Error::Cursor(cursor::Refused::TooManyOpenGaps {
                stream: "s".to_owned(),
                open: 3,
            }),
        ];
        let admin = [
            AdminError::InvalidTransition {
                event_id: id(),
                state: DeadLetterState::Discarded,
                attempted: DeadLetterState::Released,
            },
            AdminError::DeadLetterNotFound { event_id: id() },
            AdminError::MissingAudit("actor"),
            AdminError::OutboxRowNotFound { position: 1 },
            AdminError::OutboxRowNotFailed {
                position: 1,
                state: OutboxState::Pending,
            },
            AdminError::RetentionBelowWindow {
                older_than: Duration::from_secs(86_400),
                window: Duration::from_secs(7 * 86_400),
            },
            AdminError::PruneRunning,
            AdminError::GapNotFound { id: 1 },
            AdminError::GapNotOpen {
                id: 1,
                state: GapState::Resolved,
            },
            AdminError::ClaimNotFound { event_id: id() },
            AdminError::ClaimNotInDoubt {
                event_id: id(),
                state: ClaimState::Completed,
            },
            AdminError::MigrationInstall {
                path: "x".into(),
                source: std::io::Error::other("denied"),
            },
        ];
        inbox
            .into_iter()
            .map(AdminError::from)
            .chain(admin)
            .collect()
    }

    #[test]
    fn no_message_names_a_library_function() {
        for error in every_error_the_tool_shows() {
            let text = message(&error);
            assert!(!text.contains("::"), "{error:?}: {text}");
        }
    }

    #[test]
    fn the_schema_remedy_names_the_tools_commands() {
        let text = message(&Error::Database(diesel::result::Error::NotFound).into());
        assert!(!text.contains("migration"), "not a missing table: {text}");
        let text = message(&AdminError::RetentionBelowWindow {
            older_than: Duration::from_secs(86_400),
            window: Duration::from_secs(7 * 86_400),
        });
        assert!(
            text.contains("--redelivery-window is 1w") && text.contains("1d old"),
            "{text}"
        );
    }
}
