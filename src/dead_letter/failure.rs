//! Recording a failed attempt after its transaction rolled back, and dead-lettering the event
//! when the failure policy gives up on it.

use std::any::Any;
use std::num::NonZeroU32;

use chrono::{DateTime, Utc};
use tracing::{error, warn};

use super::sql::{FailureSql, HistoryRow};
use super::{DeadLetterState, HistoryKind};
use crate::decide::{self, HandlerFailure, Scope};
use crate::engine::{self, Body, Subject};
use crate::observe;
use crate::rows::Key;
use crate::sql::{Db, InboxSql, Sql};
use crate::state::{Counter, InboxState};
use crate::{DeadLettered, Delivery, Error, RetryPolicy};

/// The longest error text kept per failure, in bytes.
const MAX_ERROR_BYTES: usize = 8 * 1024;

/// The failure policy of one consumer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy<'a> {
    pub(crate) consumer: &'a str,
    pub(crate) retry: &'a RetryPolicy,
    pub(crate) max_attempts: Option<NonZeroU32>,
}

/// Records a failed attempt at `delivery` in a transaction of its own, and dead-letters the
/// event when that attempt reaches the limit. A failure to record is logged, not returned:
/// the handler's error is what the caller needs.
pub(crate) async fn record<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    policy: Policy<'_>,
    delivery: &Delivery,
    error: &str,
    failure: HandlerFailure,
) -> Option<DeadLettered> {
    let error = truncate(error, MAX_ERROR_BYTES);
    let (consumer, event_id) = (policy.consumer, delivery.id.as_str());
    let key = (consumer, event_id);
    let subject = Subject {
        consumer,
        event_id: Some(event_id),
    };
    let body = RecordAttempt {
        key,
        max_attempts: policy.max_attempts,
        error,
        delivery,
        failure,
    };
    let recorded =
        engine::run::<F, C, _, Error>(conn, Scope::TopLevel, policy.retry, subject, body).await;
    match recorded {
        Ok((attempts, None)) => {
            observe::failed_attempt(consumer);
            warn!(
                consumer,
                event_id,
                attempts,
                error,
                "handler failed; rolled back, the event will run again on redelivery"
            );
            None
        }
        Ok((attempts, Some(dead))) => {
            observe::failed_attempt(consumer);
            observe::dead_lettered(consumer);
            error!(
                consumer,
                event_id,
                attempts,
                error,
                "event dead-lettered: its handler failed permanently or too often"
            );
            Some(dead)
        }
        Err(failure) => {
            warn!(consumer, event_id, handler_error = error, record_error = %failure.into_error(), "handler failed, and recording the failure failed too");
            None
        }
    }
}

/// The recording transaction's body: [`record_attempt`], once per attempt.
struct RecordAttempt<'a> {
    key: Key<'a>,
    max_attempts: Option<NonZeroU32>,
    error: &'a str,
    delivery: &'a Delivery,
    failure: HandlerFailure,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for RecordAttempt<'_> {
    type Output = (i64, Option<DeadLettered>);
    type Error = Error;

    async fn attempt(
        &mut self,
        conn: &mut C,
    ) -> Result<(i64, Option<DeadLettered>), decide::Failure<Error>> {
        let Self {
            key,
            max_attempts,
            error,
            delivery,
            failure,
        } = *self;
        record_attempt(conn, key, max_attempts, error, delivery, failure).await
    }
}

/// The body of the recording transaction: count the attempt, and at the limit hold the event
/// back with a dead-lettered inbox row.
async fn record_attempt<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    key: Key<'_>,
    max_attempts: Option<NonZeroU32>,
    error: &str,
    delivery: &Delivery,
    failure: HandlerFailure,
) -> Result<(i64, Option<DeadLettered>), decide::Failure<Error>> {
    let now = Utc::now();
    let (attempts, mut state) =
        C::Backend::record_failure(conn, key, now, error, delivery.payload.as_ref()).await?;
    if state == DeadLetterState::Released {
        // Ops released it and it failed again: it is failing, as before it was dead-lettered.
        C::Backend::set_failure_state(conn, key, state, DeadLetterState::Retrying, now).await?;
        state = DeadLetterState::Retrying;
    }
    let dead = if decide::dead_letters_now(attempts, state, max_attempts, failure) {
        dead_letter(conn, key, (attempts, state), error, failure, now).await?
    } else {
        None
    };
    // Counted last, so the hot counter row is locked for the shortest time and always after
    // the event's own rows, as every inbox transaction takes them.
    C::Backend::bump_counter(conn, key, Counter::FailedAttempt, 1, now).await?;
    if dead.is_some() {
        C::Backend::bump_counter(conn, key, Counter::DeadLettered, 1, now).await?;
    }
    Ok((attempts, dead))
}

/// Holds the event back with a dead-lettered inbox row and marks its failure row; `None` when
/// another delivery processed it meanwhile and there is nothing to give up on.
async fn dead_letter<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    key: Key<'_>,
    (attempts, state): (i64, DeadLetterState),
    error: &str,
    failure: HandlerFailure,
    now: DateTime<Utc>,
) -> Result<Option<DeadLettered>, decide::Failure<Error>> {
    if !C::Backend::insert_held_row(conn, key, now, InboxState::DeadLettered).await? {
        return Ok(None);
    }
    C::Backend::set_failure_state(conn, key, state, DeadLetterState::DeadLettered, now).await?;
    C::Backend::append_history(
        conn,
        key,
        &HistoryRow {
            kind: HistoryKind::DeadLettered,
            attempt: Some(attempts),
            error: Some(error.to_owned()),
            actor: None,
            reason: Some(match (failure, attempts) {
                (HandlerFailure::Permanent, _) => {
                    "the handler marked the failure permanent".to_owned()
                }
                (_, 1) => "failed once, the limit".to_owned(),
                (_, n) => format!("failed {n} times, the limit"),
            }),
            at: now,
        },
    )
    .await?;
    Ok(Some(DeadLettered {
        since: now,
        deliveries: 1,
        discarded: false,
    }))
}

/// The text recorded for a panic.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-string payload");
    format!("handler panicked: {message}")
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("short", 100), "short");
    }

    #[test]
    fn panic_messages_name_the_payload() {
        assert_eq!(panic_message(&"boom"), "handler panicked: boom");
        assert_eq!(
            panic_message(&String::from("bang")),
            "handler panicked: bang"
        );
        assert_eq!(panic_message(&7), "handler panicked: a non-string payload");
    }
}
