//! What a claim's row means, apart from I/O: to a delivery, to ops, and after a side effect
//! failed. The claim modules do the reads and writes these decide.

use chrono::{DateTime, Utc};

use super::sql::ClaimRow;
use super::ClaimState;
use crate::decide::HandlerFailure;

/// What happens to a claim whose outcome is unknown once its lease has run out.
///
/// The default, [`Hold`](Self::Hold), is at most once: nothing runs the side effect again
/// until ops decide. [`RerunAfterLease`](Self::RerunAfterLease) is for side effects that pass
/// [`Claim::idempotency_key`](crate::claim::Claim::idempotency_key) downstream, so that the
/// downstream service applies a repeated call once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum InDoubtPolicy {
    /// At most once: an unknown outcome is in doubt, never run again on its own; it is
    /// visible (`Claims::in_doubt`, the metric, `diesel-inbox claims`) until ops resolve it.
    #[default]
    Hold,
    /// At least once, made once downstream: after the lease runs out, or after a failure
    /// that does not say whether the side effect happened, the next delivery acquires the
    /// claim again and re-runs the side effect with the same idempotency key.
    RerunAfterLease,
}

/// The state a claim row is in at `now`: stored `in_progress` past its lease is in doubt.
pub(crate) fn state_at(row: &ClaimRow, now: DateTime<Utc>) -> ClaimState {
    match row.state {
        ClaimState::InProgress if row.lease_until <= now => ClaimState::InDoubt,
        state => state,
    }
}

/// What a delivery of a claimed event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDelivery {
    /// Take the claim and run the side effect: it was released, or is in doubt and the
    /// policy re-runs it. `lapsed`: its holder's lease ran out.
    Acquire { lapsed: bool },
    /// Return the stored result.
    Completed,
    /// Leave it to its holder, whose lease runs.
    InProgress,
    /// Report it in doubt. `lapsed`: its holder's lease ran out, and no one has recorded that
    /// yet.
    InDoubt { lapsed: bool },
    /// Report it abandoned.
    Abandoned,
    /// Refuse it: the id came first with another payload.
    PayloadConflict,
}

/// What a delivery, with the payload fingerprint `fingerprint` if any, does with the existing
/// claim `row` at `now`. A fingerprint is compared only when both deliveries carried a payload.
pub(crate) fn on_delivery(
    row: &ClaimRow,
    fingerprint: Option<&[u8; 32]>,
    now: DateTime<Utc>,
    policy: InDoubtPolicy,
) -> OnDelivery {
    if let (Some(given), Some(stored)) = (fingerprint, &row.payload_hash) {
        if given[..] != stored[..] {
            return OnDelivery::PayloadConflict;
        }
    }
    match (state_at(row, now), policy) {
        (ClaimState::Completed, _) => OnDelivery::Completed,
        (ClaimState::Abandoned, _) => OnDelivery::Abandoned,
        (ClaimState::InProgress, _) => OnDelivery::InProgress,
        (ClaimState::Released, _) => OnDelivery::Acquire { lapsed: false },
        (ClaimState::InDoubt, InDoubtPolicy::RerunAfterLease) => OnDelivery::Acquire {
            lapsed: row.state == ClaimState::InProgress,
        },
        (ClaimState::InDoubt, InDoubtPolicy::Hold) => OnDelivery::InDoubt {
            lapsed: row.state == ClaimState::InProgress,
        },
    }
}

/// Where a claim goes when its side effect failed (`None`: it panicked), by what the failure
/// says about whether the side effect happened.
///
/// - Transient: it did not happen, and may pass later: released, to run again.
/// - Permanent: it did not happen, and never will: abandoned.
/// - Anything else (an error the handler did not mark, a panic) does not say: in doubt, or
///   released where the policy re-runs the side effect with its idempotency key.
pub(crate) fn after_failure(failure: Option<HandlerFailure>, policy: InDoubtPolicy) -> ClaimState {
    match (failure, policy) {
        (Some(HandlerFailure::Permanent), _) => ClaimState::Abandoned,
        (Some(HandlerFailure::Transient), _) | (_, InDoubtPolicy::RerunAfterLease) => {
            ClaimState::Released
        }
        (_, InDoubtPolicy::Hold) => ClaimState::InDoubt,
    }
}

/// The stored states from which the holder of the current attempt may move its claim to `to`.
///
/// Its word stands while the claim is in progress or in doubt, but an extension only while its
/// lease runs (a delivery may have found it run out already). A completion also stands over
/// ops' retry or abandonment (decided without knowing; a completion is evidence the side
/// effect happened), but never over another completion. A new attempt fences it regardless.
pub(crate) fn holder_may_move_from(to: ClaimState) -> &'static [ClaimState] {
    const RUNNING: &[ClaimState] = &[ClaimState::InProgress];
    const HELD: &[ClaimState] = &[ClaimState::InProgress, ClaimState::InDoubt];
    const NOT_COMPLETED: &[ClaimState] = &[
        ClaimState::InProgress,
        ClaimState::InDoubt,
        ClaimState::Released,
        ClaimState::Abandoned,
    ];
    match to {
        ClaimState::Completed => NOT_COMPLETED,
        // An extension keeps a running lease; one already found run out stays in doubt.
        ClaimState::InProgress => RUNNING,
        _ => HELD,
    }
}

/// Whether ops may resolve the claim `row` at `now`: only one in doubt. `Err` holds its state.
pub(crate) fn resolvable(row: &ClaimRow, now: DateTime<Utc>) -> Result<(), ClaimState> {
    match state_at(row, now) {
        ClaimState::InDoubt => Ok(()),
        state => Err(state),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn row(state: ClaimState, lease_left_secs: i64) -> (ClaimRow, DateTime<Utc>) {
        let now = crate::duration::now();
        let row = ClaimRow {
            event_id: "evt-1".to_owned(),
            state,
            attempt: 1,
            deliveries: 1,
            lease_until: now + TimeDelta::seconds(lease_left_secs),
            claimed_at: now,
            updated_at: now,
            completed_at: None,
            payload_hash: Some(vec![7; 32]),
            payload: None,
            payload_kind: None,
            result: None,
            last_error: None,
            resolved_by: None,
            resolution: None,
        };
        (row, now)
    }

    #[test]
    fn an_in_progress_claim_is_in_doubt_from_the_instant_its_lease_runs_out() {
        let (running, now) = row(ClaimState::InProgress, 1);
        assert_eq!(state_at(&running, now), ClaimState::InProgress);
        let (lapsed, now) = row(ClaimState::InProgress, 0);
        assert_eq!(state_at(&lapsed, now), ClaimState::InDoubt);
        let (completed, now) = row(ClaimState::Completed, -5);
        assert_eq!(state_at(&completed, now), ClaimState::Completed);
    }

    #[test]
    fn a_lapsed_claim_is_held_in_doubt_by_default_and_rerun_only_when_opted_in() {
        let (lapsed, now) = row(ClaimState::InProgress, -1);
        assert_eq!(
            on_delivery(&lapsed, None, now, InDoubtPolicy::Hold),
            OnDelivery::InDoubt { lapsed: true }
        );
        assert_eq!(
            on_delivery(&lapsed, None, now, InDoubtPolicy::RerunAfterLease),
            OnDelivery::Acquire { lapsed: true }
        );
        let (recorded, now) = row(ClaimState::InDoubt, 30);
        assert_eq!(
            on_delivery(&recorded, None, now, InDoubtPolicy::Hold),
            OnDelivery::InDoubt { lapsed: false }
        );
    }

    #[test]
    fn a_running_lease_keeps_every_other_delivery_out_under_both_policies() {
        let (running, now) = row(ClaimState::InProgress, 30);
        for policy in [InDoubtPolicy::Hold, InDoubtPolicy::RerunAfterLease] {
            assert_eq!(
                on_delivery(&running, None, now, policy),
                OnDelivery::InProgress
            );
        }
    }

    #[test]
    fn settled_claims_answer_as_they_stand_and_a_released_one_is_taken() {
        for (state, expected) in [
            (ClaimState::Completed, OnDelivery::Completed),
            (ClaimState::Abandoned, OnDelivery::Abandoned),
            (ClaimState::Released, OnDelivery::Acquire { lapsed: false }),
        ] {
            let (settled, now) = row(state, -60);
            assert_eq!(
                on_delivery(&settled, None, now, InDoubtPolicy::Hold),
                expected
            );
        }
    }

    #[test]
    fn another_payload_is_a_conflict_and_a_missing_one_is_not() {
        let (completed, now) = row(ClaimState::Completed, 0);
        let other = [8; 32];
        assert_eq!(
            on_delivery(&completed, Some(&other), now, InDoubtPolicy::Hold),
            OnDelivery::PayloadConflict
        );
        assert_eq!(
            on_delivery(&completed, Some(&[7; 32]), now, InDoubtPolicy::Hold),
            OnDelivery::Completed
        );
        assert_eq!(
            on_delivery(&completed, None, now, InDoubtPolicy::Hold),
            OnDelivery::Completed
        );
    }

    #[test]
    fn a_failure_that_does_not_say_leaves_the_claim_in_doubt_unless_rerun_is_opted_in() {
        use HandlerFailure::{ConnectionLost, Contention, Counted, Permanent, Transient};
        for unknown in [None, Some(Counted), Some(Contention), Some(ConnectionLost)] {
            assert_eq!(
                after_failure(unknown, InDoubtPolicy::Hold),
                ClaimState::InDoubt
            );
            assert_eq!(
                after_failure(unknown, InDoubtPolicy::RerunAfterLease),
                ClaimState::Released
            );
        }
        assert_eq!(
            after_failure(Some(Transient), InDoubtPolicy::Hold),
            ClaimState::Released
        );
        for policy in [InDoubtPolicy::Hold, InDoubtPolicy::RerunAfterLease] {
            assert_eq!(
                after_failure(Some(Permanent), policy),
                ClaimState::Abandoned
            );
        }
    }

    #[test]
    fn a_completion_stands_over_ops_retry_or_abandonment_but_not_over_a_completion() {
        let from = holder_may_move_from(ClaimState::Completed);
        assert!(from.contains(&ClaimState::Released) && from.contains(&ClaimState::Abandoned));
        assert!(!from.contains(&ClaimState::Completed));
        let from = holder_may_move_from(ClaimState::Released);
        assert_eq!(from, &[ClaimState::InProgress, ClaimState::InDoubt]);
        assert_eq!(
            holder_may_move_from(ClaimState::InProgress),
            &[ClaimState::InProgress]
        );
    }

    #[test]
    fn only_a_claim_in_doubt_is_resolvable() {
        let (lapsed, now) = row(ClaimState::InProgress, 0);
        assert_eq!(resolvable(&lapsed, now), Ok(()));
        let (running, now) = row(ClaimState::InProgress, 10);
        assert_eq!(resolvable(&running, now), Err(ClaimState::InProgress));
        let (done, now) = row(ClaimState::Completed, -10);
        assert_eq!(resolvable(&done, now), Err(ClaimState::Completed));
    }
}
