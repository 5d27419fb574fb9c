//! What the inbox can learn from a handler's error: the Diesel error inside it (to tell
//! contention and a lost connection from a real failure), the inbox's own error inside it (to
//! tell a broker loop what to ack), and whether the handler marked it permanent or transient.

use std::fmt::Display;

use crate::{AdminError, Error};

/// How the failure policy treats a handler's error.
///
/// ```
/// use diesel_inbox::{Error, FailureKind, HandlerError};
///
/// assert_eq!(Error::permanent("unknown order 77").failure_kind(), FailureKind::Permanent);
/// assert_eq!(Error::transient("pricing service down").failure_kind(), FailureKind::Transient);
/// assert_eq!(diesel::result::Error::NotFound.failure_kind(), FailureKind::Counted);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The default: the attempt is recorded and counts toward
    /// [`Inbox::max_attempts`](crate::Inbox::max_attempts); the event runs again on
    /// redelivery until it reaches the limit and is dead-lettered.
    Counted,
    /// It will fail the same way every time (an unknown order, a payload the handler cannot
    /// read): the event is dead-lettered at once, on this first attempt, whatever
    /// `max_attempts` says.
    Permanent,
    /// It will likely pass later (a downstream service is down): nothing is recorded or
    /// counted; redeliver the message.
    Transient,
}

/// A handler's error type, as the inbox sees it.
///
/// Handlers return `Result<T, E>` with `E: HandlerError`. Implemented for
/// [`diesel::result::Error`](https://docs.rs/diesel/2/diesel/result/enum.Error.html) (so handlers returning [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html) work as they are),
/// for the inbox's own [`Error`], for `Box<dyn std::error::Error + Send + Sync>`, and with the
/// features of the same names for `anyhow::Error` and `eyre::Report`. The last three look for
/// a Diesel or inbox error along the error's chain of sources, context layers included, so
/// `tx.execute(..).context("crediting")?` is still retried when it meets contention. For an
/// error type of your own, implement the two accessors that apply, so that contention raised
/// by your statements is retried and never counted as a failed attempt, and so that
/// [`Ack::of`](crate::Ack::of) finds the inbox's errors inside yours:
///
/// ```
/// use diesel_inbox::{Error, FailureKind, HandlerError};
///
/// #[derive(Debug, thiserror::Error)]
/// enum OrderError {
///     #[error(transparent)]
///     Db(#[from] diesel::result::Error),
///     #[error(transparent)]
///     Inbox(#[from] Error),
///     #[error("unknown order {0}")]
///     UnknownOrder(u64),
/// }
///
/// impl HandlerError for OrderError {
///     fn diesel_error(&self) -> Option<&diesel::result::Error> {
///         match self {
///             OrderError::Db(error) => Some(error),
///             _ => None,
///         }
///     }
///     fn inbox_error(&self) -> Option<&Error> {
///         match self {
///             OrderError::Inbox(error) => Some(error),
///             _ => None,
///         }
///     }
///     fn failure_kind(&self) -> FailureKind {
///         match self {
///             OrderError::UnknownOrder(_) => FailureKind::Permanent,
///             _ => FailureKind::Counted,
///         }
///     }
/// }
/// # assert_eq!(OrderError::UnknownOrder(7).failure_kind(), FailureKind::Permanent);
/// ```
///
/// The defaults: no Diesel error, no inbox error, [`FailureKind::Counted`] (or the kind of the
/// inbox error inside, for [`Error::permanent`] and [`Error::transient`]).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an error the inbox can read from a handler",
    label = "the handler returns this error",
    note = "return `diesel::QueryResult`, `diesel_inbox::Error` or `Box<dyn std::error::Error + Send + Sync>`; turn on the `anyhow` or `eyre` feature for `anyhow::Result` or `eyre::Result`; or implement `diesel_inbox::HandlerError` for your error type (its docs show how)"
)]
pub trait HandlerError: From<Error> + Display {
    /// The Diesel error this error carries, if any. A serialization failure, deadlock, lock
    /// timeout or busy SQLite in it is contention: the inbox rolls back and runs the handler
    /// again under its [`RetryPolicy`](crate::RetryPolicy), and never counts it as a failed
    /// attempt. A lost connection is not counted either.
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        None
    }

    /// The inbox's own error this error carries, if any: what `From<Error>` put in.
    fn inbox_error(&self) -> Option<&Error> {
        None
    }

    /// How the failure policy treats this error. Defaults to the kind of the inbox error
    /// inside, else [`FailureKind::Counted`].
    fn failure_kind(&self) -> FailureKind {
        self.inbox_error()
            .map_or(FailureKind::Counted, HandlerError::failure_kind)
    }
}

impl HandlerError for Error {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        match self {
            Error::Database(error) => Some(error),
            _ => None,
        }
    }

    fn inbox_error(&self) -> Option<&Error> {
        Some(self)
    }

    /// [`Error::permanent`] and [`Error::transient`] say so, and a replay's lost lease is
    /// transient; the rest are counted.
    fn failure_kind(&self) -> FailureKind {
        match self {
            Error::Permanent(_) => FailureKind::Permanent,
            // Also another runner's lease, or a probe's refusal: nothing is recorded for the
            // event.
            Error::Transient(_)
            | Error::Replay(
                crate::replay::Refused::Fenced { .. }
                | crate::replay::Refused::Held { .. }
                | crate::replay::Refused::WouldRun,
            ) => FailureKind::Transient,
            _ => FailureKind::Counted,
        }
    }
}

/// For a redrive's effect that returns the operations' error: the inbox's error inside, if
/// any, says what it is.
impl HandlerError for AdminError {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        self.inbox_error()?.diesel_error()
    }

    fn inbox_error(&self) -> Option<&Error> {
        AdminError::inbox_error(self)
    }
}

impl HandlerError for diesel::result::Error {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        match Error::from_diesel(self) {
            Some(inbox) => inbox.diesel_error(),
            None => Some(self),
        }
    }

    fn inbox_error(&self) -> Option<&Error> {
        Error::from_diesel(self)
    }
}

/// A Diesel or inbox error found along an error's chain of sources.
enum Found<'a> {
    Diesel(&'a diesel::result::Error),
    Inbox(&'a Error),
}

impl<'a> Found<'a> {
    /// The first Diesel or inbox error of `error` and its sources, outermost first.
    fn in_chain(error: &'a (dyn std::error::Error + 'static)) -> Option<Self> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(diesel) = error.downcast_ref::<diesel::result::Error>() {
                return Some(Found::Diesel(diesel));
            }
            if let Some(inbox) = error.downcast_ref::<Error>() {
                return Some(Found::Inbox(inbox));
            }
            if let Some(inbox) = error
                .downcast_ref::<AdminError>()
                .and_then(AdminError::inbox_error)
            {
                return Some(Found::Inbox(inbox));
            }
            next = error.source();
        }
        None
    }

    fn diesel_error(error: Option<Self>) -> Option<&'a diesel::result::Error> {
        match error? {
            Found::Diesel(error) => error.diesel_error(),
            Found::Inbox(error) => error.diesel_error(),
        }
    }

    fn inbox_error(error: Option<Self>) -> Option<&'a Error> {
        match error? {
            Found::Diesel(error) => error.inbox_error(),
            Found::Inbox(error) => Some(error),
        }
    }
}

/// `HandlerError` for an error type that is a chain of `std::error::Error`s: `$outermost`
/// is the outermost, from `&self` named `$error`.
macro_rules! handler_error_by_chain {
    ($type:ty, |$error:ident| $outermost:expr) => {
        impl HandlerError for $type {
            fn diesel_error(&self) -> Option<&diesel::result::Error> {
                let $error = self;
                Found::diesel_error(Found::in_chain($outermost))
            }

            fn inbox_error(&self) -> Option<&Error> {
                let $error = self;
                Found::inbox_error(Found::in_chain($outermost))
            }
        }
    };
}

handler_error_by_chain!(Box<dyn std::error::Error + Send + Sync>, |error| &**error);
#[cfg(feature = "anyhow")]
handler_error_by_chain!(anyhow::Error, |error| error.as_ref());
#[cfg(feature = "eyre")]
handler_error_by_chain!(eyre::Report, |error| error.as_ref());

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlock() -> diesel::result::Error {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::SerializationFailure,
            Box::new("deadlock".to_owned()),
        )
    }

    #[test]
    fn an_admin_error_shows_the_inbox_error_inside_also_along_a_chain() {
        let admin = AdminError::from(Error::ConnectionLost { source: deadlock() });
        assert!(matches!(
            HandlerError::inbox_error(&admin),
            Some(Error::ConnectionLost { .. })
        ));
        assert!(HandlerError::diesel_error(&AdminError::from(deadlock())).is_some());
        assert!(HandlerError::inbox_error(&AdminError::PruneRunning).is_none());

        // `Inbox` is transparent: its source is the Diesel error, one step past the inbox's.
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(admin);
        assert!(matches!(
            boxed.inbox_error(),
            Some(Error::ConnectionLost { .. })
        ));
    }

    #[test]
    fn a_query_result_error_exposes_itself_or_the_inbox_error_it_wraps() {
        let own = deadlock();
        assert!(own.diesel_error().is_some());
        assert!(own.inbox_error().is_none());

        let wrapped = diesel::result::Error::from(Error::permanent("no such order"));
        assert!(wrapped.diesel_error().is_none());
        assert_eq!(wrapped.failure_kind(), FailureKind::Permanent);
    }

    #[test]
    fn a_boxed_error_is_looked_into() {
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(deadlock());
        assert!(boxed.diesel_error().is_some());
        let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(Error::transient("later"));
        assert_eq!(boxed.failure_kind(), FailureKind::Transient);
        let boxed: Box<dyn std::error::Error + Send + Sync> = "plain".into();
        assert_eq!(boxed.failure_kind(), FailureKind::Counted);
    }

    /// An error whose source is `inner`: what a context layer looks like.
    #[derive(Debug, thiserror::Error)]
    #[error("while crediting")]
    struct Context(#[source] Box<dyn std::error::Error + Send + Sync>);

    #[test]
    fn a_boxed_error_is_looked_into_through_its_sources() {
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            Box::new(Context(Box::new(deadlock())));
        assert!(boxed.diesel_error().is_some());
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            Box::new(Context(Box::new(Error::permanent("no such order"))));
        assert_eq!(boxed.failure_kind(), FailureKind::Permanent);
    }

    #[cfg(feature = "anyhow")]
    #[test]
    fn an_anyhow_error_is_looked_into_through_its_context() {
        use anyhow::Context as _;
        let error = Err::<(), _>(deadlock()).context("crediting").unwrap_err();
        assert!(error.diesel_error().is_some());
        let error = anyhow::Error::from(Error::transient("later")).context("pricing");
        assert_eq!(error.failure_kind(), FailureKind::Transient);
        assert_eq!(
            anyhow::anyhow!("plain").failure_kind(),
            FailureKind::Counted
        );
    }

    #[cfg(feature = "eyre")]
    #[test]
    fn an_eyre_report_is_looked_into_through_its_context() {
        use eyre::WrapErr as _;
        let error = Err::<(), _>(deadlock()).wrap_err("crediting").unwrap_err();
        assert!(error.diesel_error().is_some());
        let error = eyre::Report::from(Error::permanent("no such order")).wrap_err("orders");
        assert_eq!(error.failure_kind(), FailureKind::Permanent);
        assert_eq!(eyre::eyre!("plain").failure_kind(), FailureKind::Counted);
    }
}
