//! What a database error is, as the inbox decides on it: contention a retry cures, a lost
//! connection, an aborted transaction, or anything else; what a failed statement does to its
//! transaction; and whether an error says a table is missing. Pure functions over Diesel's
//! errors, below the statements and the decisions alike.

/// What kind of failure a database error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Serialization failure, deadlock, lock timeout, busy database: the transaction was
    /// rolled back, and running it again cures it.
    Contention,
    /// The connection (session) is gone; whatever was not committed is lost.
    ConnectionLost,
    /// The statement was refused because an earlier one aborted the transaction
    /// (PostgreSQL's 25P02): user code swallowed that earlier error. Nothing can commit.
    Aborted,
    /// Anything else.
    Other,
}

/// What a failed statement does to the transaction it ran in: it decides when the inbox
/// must check that the transaction can still commit what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // each variant says what happens to the transaction
pub enum FailedStatement {
    /// The transaction stays open but aborted, and COMMIT turns into a silent ROLLBACK
    /// (PostgreSQL): every later statement is refused, and the commit checks first.
    AbortsTransaction,
    /// Some errors roll the whole transaction back, and later statements would
    /// autocommit one by one (SQLite: I/O errors, a full disk): check after user code.
    MayEndTransaction,
    /// As `MayEndTransaction`, and the error that does it is a deadlock (MySQL, MariaDB):
    /// a transaction found ended was ended by contention, and running it again cures it.
    /// MariaDB's commit checks first, as PostgreSQL's does; Oracle MySQL cannot tell.
    DeadlockEndsTransaction,
}

/// Whether `error` says a table does not exist: PostgreSQL's 42P01 (`relation "…" does not
/// exist`), MySQL's 1146 (`Table '…' doesn't exist`), SQLite's `no such table`. Only these get
/// the "apply the schema" remedy; a lost connection or a refused statement does not.
pub(crate) fn is_missing_table(error: &diesel::result::Error) -> bool {
    match error {
        diesel::result::Error::DatabaseError(_, info) => missing_table_message(info.message()),
        _ => false,
    }
}

fn missing_table_message(message: &str) -> bool {
    let postgres = message.starts_with("relation \"") && message.ends_with("\" does not exist");
    let mysql = message.starts_with("Table '") && message.ends_with("' doesn't exist");
    postgres || mysql || message.starts_with("no such table")
}

/// Whether a database error message contains one of `needles`. Only for the errors Diesel
/// reports as `Unknown` (PostgreSQL deadlocks, MySQL lock-wait timeouts and lost connections,
/// SQLite busy/locked), whose codes Diesel does not expose, and as `UnableToSendCommand` (the
/// client's own errors); messages are the servers' and client libraries' English defaults.
pub(crate) fn message_contains(error: &diesel::result::Error, needles: &[&str]) -> bool {
    use diesel::result::{DatabaseErrorKind, Error};
    match error {
        Error::DatabaseError(
            DatabaseErrorKind::Unknown | DatabaseErrorKind::UnableToSendCommand,
            info,
        ) => needles.iter().any(|needle| info.message().contains(needle)),
        _ => false,
    }
}

/// Classifies `error` from the kinds Diesel reports and, for `Unknown` errors, from the
/// message needles each backend gives for contention and for a lost connection.
///
/// `UnableToSendCommand` is a lost connection whatever its message: Diesel reports it when the
/// client library could not send a statement or got no result back (libpq's `no connection to
/// the server`, `server closed the connection unexpectedly` or `SSL SYSCALL error: EOF
/// detected`; tokio-postgres's `connection closed`), which is also every later call on a
/// connection that died.
pub(crate) fn classify_by_message(
    error: &diesel::result::Error,
    contention: &[&str],
    lost_connection: &[&str],
) -> ErrorClass {
    use diesel::result::{DatabaseErrorKind, Error};
    match error {
        Error::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => ErrorClass::Contention,
        Error::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        )
        | Error::BrokenTransactionManager => ErrorClass::ConnectionLost,
        Error::RollbackErrorOnCommit { commit_error, .. } => {
            classify_by_message(commit_error, contention, lost_connection)
        }
        _ if message_contains(error, contention) => ErrorClass::Contention,
        _ if message_contains(error, lost_connection) => ErrorClass::ConnectionLost,
        _ => ErrorClass::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_table_is_classified_as_one() {
        for missing in [
            "relation \"diesel_inbox_events\" does not exist",
            "Table 'test.diesel_inbox_events' doesn't exist",
            "no such table: diesel_inbox_events",
        ] {
            assert!(missing_table_message(missing), "{missing}");
        }
        for other in [
            "server closed the connection unexpectedly",
            "Lost connection to MySQL server during query",
            "database is locked",
            "column \"state\" does not exist",
            "",
        ] {
            assert!(!missing_table_message(other), "{other}");
        }
        assert!(!is_missing_table(&diesel::result::Error::NotFound));
    }
}
