//! The relay's decisions, apart from its I/O: which rows a pass publishes and in what order,
//! and what each publish result writes back. The sync and the async relay share them.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::sql::OutboxRow;
use crate::duration::after;
use crate::outbox::PublishError;

/// The delay before a failed publish is tried again: doubling from `first`, at most `max`,
/// with full jitter over its upper half, so relays that failed together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The delay after the `failures`-th failed attempt (from 1).
    pub(crate) fn delay(self, failures: u32, rng: &mut fastrand::Rng) -> Duration {
        let doubled = self
            .first
            .saturating_mul(2_u32.saturating_pow(failures.saturating_sub(1)));
        let ceiling = doubled.min(self.max);
        let half = ceiling / 2;
        half + half.mul_f64(rng.f64())
    }
}

/// A pass's rows in publish order: each head and the pending rows of its aggregate after it,
/// by position, at most `limit` in all.
pub(crate) fn in_publish_order(
    groups: Vec<(OutboxRow, Vec<OutboxRow>)>,
    limit: usize,
) -> Vec<OutboxRow> {
    let mut rows: Vec<OutboxRow> = groups
        .into_iter()
        .flat_map(|(head, followers)| std::iter::once(head).chain(followers))
        .collect();
    rows.sort_by_key(|row| row.position);
    rows.truncate(limit);
    rows
}

/// The leading followers of a head that this pass may take: up to the first one another relay
/// holds under a live lease, or that waits out a backoff (a row ops retried can be both).
pub(crate) fn free_run(followers: Vec<OutboxRow>, now: DateTime<Utc>) -> Vec<OutboxRow> {
    followers
        .into_iter()
        .take_while(|row| {
            row.available_at <= now && row.lease_until.is_none_or(|until| until <= now)
        })
        .collect()
}

/// What a relay writes back to one row it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// The broker accepted it.
    Published,
    /// Failed; due again at `at`.
    Retry { error: String, at: DateTime<Utc> },
    /// Failed for good: permanent, unreadable, or out of attempts.
    Failed { error: String },
    /// Not attempted: an earlier row of its aggregate failed in this pass, and order per
    /// aggregate holds it back.
    Released,
}

/// What a publish result writes back, for a row that had failed `failures_before` times.
pub(crate) fn after_publish(
    result: Result<(), &PublishError>,
    failures_before: i64,
    max_attempts: u32,
    backoff: Backoff,
    now: DateTime<Utc>,
    rng: &mut fastrand::Rng,
) -> Settle {
    let error = match result {
        Ok(()) => return Settle::Published,
        Err(error) => error,
    };
    let failures = u32::try_from(failures_before.saturating_add(1)).unwrap_or(u32::MAX);
    let reason = error.to_string();
    if !error.is_transient() {
        return Settle::Failed { error: reason };
    }
    if failures >= max_attempts {
        return Settle::Failed {
            error: format!("gave up after {failures} attempts: {reason}"),
        };
    }
    Settle::Retry {
        error: reason,
        at: after(now, backoff.delay(failures, rng)),
    }
}

/// Walks a pass's rows in publish order and keeps order per aggregate: once a row of an
/// aggregate did not publish, the aggregate's later rows in the pass are released untried.
#[derive(Debug, Default)]
pub(crate) struct Blocked(HashSet<(String, String)>);

impl Blocked {
    /// Whether `row` must wait for an earlier row of its aggregate.
    pub(crate) fn holds(&self, row: &OutboxRow) -> bool {
        self.0
            .contains(&(row.aggregate_type.clone(), row.aggregate_id.clone()))
    }

    /// Records what happened to `row`; a row that did not publish blocks its aggregate's
    /// later rows. A failed row does not: it is set aside for ops, and the rows after it go on.
    pub(crate) fn note(&mut self, row: &OutboxRow, settle: &Settle) {
        if matches!(settle, Settle::Retry { .. } | Settle::Released) {
            self.0
                .insert((row.aggregate_type.clone(), row.aggregate_id.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::state::OutboxState;

    fn row(position: i64, aggregate: &str) -> OutboxRow {
        let now = Utc::now();
        OutboxRow {
            position,
            event_id: format!("evt-{position}"),
            topic: "orders".into(),
            aggregate_type: "order".into(),
            aggregate_id: aggregate.into(),
            event_type: "order.placed".into(),
            headers: "{}".into(),
            body: Vec::new(),
            state: OutboxState::Pending,
            attempts: 0,
            available_at: now,
            lease_until: None,
            last_error: None,
            enqueued_at: now,
            published_at: None,
        }
    }

    const BACKOFF: Backoff = Backoff {
        first: Duration::from_secs(1),
        max: Duration::from_secs(60),
    };

    #[test]
    fn backoff_doubles_up_to_its_ceiling_with_jitter_in_the_upper_half() {
        let mut rng = fastrand::Rng::with_seed(7);
        for (failures, ceiling) in [(1, 1), (2, 2), (3, 4), (7, 60), (40, 60)] {
            for _ in 0..50 {
                let delay = BACKOFF.delay(failures, &mut rng);
                let ceiling = Duration::from_secs(ceiling);
                assert!(
                    delay >= ceiling / 2 && delay <= ceiling,
                    "{failures}: {delay:?}"
                );
            }
        }
    }

    #[test]
    fn a_pass_publishes_heads_and_followers_by_position_up_to_the_limit() {
        let groups = vec![
            (row(1, "a"), vec![row(4, "a"), row(5, "a")]),
            (row(2, "b"), vec![]),
            (row(3, "c"), vec![row(6, "c")]),
        ];
        let order: Vec<i64> = in_publish_order(groups, 5)
            .iter()
            .map(|row| row.position)
            .collect();
        assert_eq!(order, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_pass_takes_followers_only_up_to_one_leased_elsewhere_or_backing_off() {
        // The test rows are due at their creation, a moment before this.
        let now = Utc::now() + chrono::Duration::seconds(1);
        let later = now + chrono::Duration::seconds(30);
        let mut leased = row(3, "a");
        leased.lease_until = Some(later);
        let mut waiting = row(3, "a");
        waiting.available_at = later;
        for blocker in [leased, waiting] {
            let run = free_run(vec![row(2, "a"), blocker, row(4, "a")], now);
            assert_eq!(run.iter().map(|r| r.position).collect::<Vec<_>>(), [2]);
        }
        let mut lapsed = row(3, "a");
        lapsed.lease_until = Some(now - chrono::Duration::seconds(1));
        assert_eq!(
            free_run(vec![row(2, "a"), lapsed, row(4, "a")], now).len(),
            3
        );
    }

    #[test]
    fn a_transient_failure_retries_until_the_last_attempt_fails_the_row() {
        let now = Utc::now();
        let mut rng = fastrand::Rng::with_seed(1);
        let down = PublishError::transient("broker down");
        match after_publish(Err(&down), 0, 3, BACKOFF, now, &mut rng) {
            Settle::Retry { at, error } => {
                assert!(at > now && at <= after(now, Duration::from_secs(1)));
                assert!(error.contains("broker down"));
            }
            other => panic!("{other:?}"),
        }
        match after_publish(Err(&down), 2, 3, BACKOFF, now, &mut rng) {
            Settle::Failed { error } => assert!(error.starts_with("gave up after 3 attempts")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_permanent_failure_fails_the_row_at_once_with_its_reason() {
        let mut rng = fastrand::Rng::new();
        let too_big = PublishError::permanent("payload too large");
        let settle = after_publish(Err(&too_big), 0, 10, BACKOFF, Utc::now(), &mut rng);
        assert_eq!(
            settle,
            Settle::Failed {
                error: "permanent publish failure: payload too large".into()
            }
        );
        let ok = after_publish(Ok(()), 4, 10, BACKOFF, Utc::now(), &mut rng);
        assert_eq!(ok, Settle::Published);
    }

    #[test]
    fn a_row_that_will_be_retried_holds_back_its_aggregate_but_a_failed_one_does_not() {
        let mut blocked = Blocked::default();
        let retry = Settle::Retry {
            error: "down".into(),
            at: Utc::now(),
        };
        blocked.note(&row(1, "a"), &retry);
        blocked.note(
            &row(2, "b"),
            &Settle::Failed {
                error: "poison".into(),
            },
        );
        assert!(blocked.holds(&row(3, "a")));
        assert!(!blocked.holds(&row(4, "b")));
        assert!(!blocked.holds(&row(5, "c")));
    }
}
