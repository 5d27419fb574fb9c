//! A claim this worker holds: the side effect runs under it, and one of its finishing calls
//! records what came of it. Every write is fenced by the claim's attempt.

use std::panic;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tracing::{error, info, warn};

use super::outcome::{Abandoned, Completed, InDoubt, InProgress, Suppressed};
use super::sql::{ClaimChange, ClaimSql};
use super::verdict::{self, InDoubtPolicy};
use super::{ClaimState, Refused};
use crate::decide::{Failure, HandlerFailure, Then};
use crate::duration::{after, now};
use crate::engine::{self, run_ready, Body, Effect};
use crate::rows::Key;
use crate::sql::{Blocking, Db, Sql};
use crate::{claim::Claims, observe, Error, EventId, HandlerError, InboxConnection};

/// A claim held by this worker: [`Claimed::Acquired`](crate::claim::Claimed::Acquired).
///
/// Run the side effect, passing [`idempotency_key`](Self::idempotency_key) downstream where
/// the service takes one, then finish the claim with what you know:
///
/// - it happened: [`complete`](Self::complete), or [`complete_with`](Self::complete_with) to
///   commit database writes that record it in the same transaction;
/// - it did not happen, and may run again: [`release`](Self::release);
/// - it did not happen, and must never run: [`abandon`](Self::abandon);
/// - you cannot tell (a timeout, a dropped connection): [`outcome_unknown`](Self::outcome_unknown).
///
/// A long side effect keeps the claim with [`extend`](Self::extend). Each of these writes is
/// fenced by the claim's attempt: once another worker has taken the claim over, they fail
/// with [`claim::Refused::Fenced`](super::Refused::Fenced) and change nothing.
///
/// **Dropped unfinished** (an early return, a panic, a crash), the claim cannot do I/O: it
/// stays in progress until its lease runs out, and is then in doubt (or taken over under
/// [`InDoubtPolicy::RerunAfterLease`](crate::claim::InDoubtPolicy)). The drop is logged at warn.
#[must_use = "finish a claim with complete, release, abandon or outcome_unknown; dropped, it stays in progress until its lease runs out, then it is in doubt"]
#[derive(Debug)]
pub struct Claim {
    claims: Claims,
    event_id: EventId,
    attempt: i64,
    lease_until: DateTime<Utc>,
    finished: bool,
}

impl Claim {
    pub(crate) fn new(
        claims: &Claims,
        event_id: EventId,
        attempt: i64,
        lease_until: DateTime<Utc>,
    ) -> Self {
        Self {
            claims: claims.clone(),
            event_id,
            attempt,
            lease_until,
            finished: false,
        }
    }

    /// The claimed event.
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }

    /// This holder's attempt: 1 for the first, higher when the claim was released or taken
    /// over before. It is the claim's fencing token.
    pub fn attempt(&self) -> u64 {
        self.attempt.unsigned_abs()
    }

    /// When this holder's lease runs out.
    pub fn lease_until(&self) -> DateTime<Utc> {
        self.lease_until
    }

    /// The key to pass downstream as the side effect's idempotency key (Stripe's and
    /// Resend's `Idempotency-Key`, PayPal's `PayPal-Request-Id`, Square's `idempotency_key`):
    /// a UUID derived from the consumer and the event id, the same for every attempt, in every
    /// process. A re-run then reaches the downstream service as a repeat, which it applies
    /// once, within the window it keeps keys for.
    pub fn idempotency_key(&self) -> String {
        idempotency_key(self.claims.consumer(), self.event_id.as_str())
    }

    /// Keeps the claim for `by` from now, for a side effect that runs longer than its lease.
    /// Any connection will do (the claim's own may be busy): it is one statement.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced) once the lease has run out and a delivery
    /// found it so (the claim is in doubt; complete it all the same if the side effect happened),
    /// another worker has taken the claim over, or ops resolved it; [`Error::Database`].
    pub fn extend<C: InboxConnection>(&mut self, conn: &mut C, by: Duration) -> Result<(), Error> {
        run_ready(self.extend_in::<Blocking, _>(conn, by))
    }

    /// [`extend`](Self::extend) in either flavour.
    pub(crate) async fn extend_in<F, C: Db<F, Backend: Sql>>(
        &mut self,
        conn: &mut C,
        by: Duration,
    ) -> Result<(), Error> {
        let lease_until = after(now(), by);
        let in_progress = ClaimState::InProgress;
        let until = Some(lease_until);
        self.write(conn, in_progress, until, None, None).await?;
        self.lease_until = lease_until;
        Ok(())
    }

    /// The side effect happened: stores `result` (as JSON), which later deliveries get back,
    /// and completes the claim.
    ///
    /// # Errors
    ///
    /// As [`complete_with`](Self::complete_with).
    pub fn complete<C: InboxConnection, T: Serialize>(
        self,
        conn: &mut C,
        result: &T,
    ) -> Result<(), Error> {
        self.complete_with(conn, result, |_tx| Ok::<_, Error>(()))
    }

    /// The side effect happened: runs `record` (database writes that record it, such as the
    /// charge id on the order) and completes the claim with `result`, in one transaction.
    ///
    /// If the completion cannot commit, the side effect still happened: the failure is logged
    /// at error level with `result`, and the claim is put in doubt, so that ops can resolve it
    /// with that result; under [`InDoubtPolicy::RerunAfterLease`](crate::claim::InDoubtPolicy) it is
    /// released instead, and the next delivery runs it again with the same idempotency key.
    /// Contention is retried, `record` included.
    ///
    /// # Errors
    ///
    /// `record`'s own error, unchanged; or the inbox's [`Error`] converted into `E`:
    /// [`claim::Refused::Fenced`](super::Refused::Fenced) (another worker took the claim over, or
    /// ops completed it: nothing commits, `record`'s writes included), [`Error::StoredResult`],
    /// [`Error::Database`], [`Error::ConnectionLost`], [`Error::CommitUnknown`].
    pub fn complete_with<C, T, E, F>(self, conn: &mut C, result: &T, mut record: F) -> Result<(), E>
    where
        C: InboxConnection,
        T: Serialize,
        E: HandlerError,
        F: FnMut(&mut C) -> Result<(), E>,
    {
        let record = async |tx: &mut C| record(tx);
        run_ready(self.complete_in::<Blocking, _, _, _>(conn, result, record))
    }

    /// [`complete_with`](Self::complete_with) in either flavour.
    pub(crate) async fn complete_in<F, C, T, E>(
        mut self,
        conn: &mut C,
        result: &T,
        mut record: impl Effect<C, Output = (), Error = E>,
    ) -> Result<(), E>
    where
        C: Db<F, Backend: Sql>,
        T: Serialize,
        E: HandlerError,
    {
        self.finished = true;
        let json = match serde_json::to_string(result) {
            Ok(json) => json,
            Err(e) => {
                let error = Error::StoredResult(e);
                self.completion_failed(conn, None, &error.to_string()).await;
                return Err(error.into());
            }
        };
        let body = Complete {
            claim: &self,
            json: &json,
            record: &mut record,
        };
        let completed = self.run(conn, body).await;
        let failure = match completed {
            Ok(()) => {
                observe::claim_transition(self.claims.consumer(), ClaimState::Completed);
                info!(
                    consumer = self.claims.consumer(),
                    event_id = self.event_id.as_str(),
                    attempt = self.attempt,
                    "claim completed"
                );
                return Ok(());
            }
            Err(failure) => failure,
        };
        match failure {
            Failure::Inbox(fenced @ Error::Claim(Refused::Fenced { .. })) => {
                self.fenced(&fenced, Some(&json));
                Err(fenced.into())
            }
            Failure::Handler(error) => {
                self.completion_failed(conn, Some(&json), &error.to_string())
                    .await;
                Err(error)
            }
            Failure::Panicked(panic) => {
                let message = crate::dead_letter::failure::panic_message(&*panic);
                self.completion_failed(conn, Some(&json), &message).await;
                panic::resume_unwind(panic)
            }
            failure @ (Failure::Inbox(_) | Failure::Database(_)) => {
                let error: E = failure.into_error();
                self.completion_failed(conn, Some(&json), &error.to_string())
                    .await;
                Err(error)
            }
        }
    }

    /// The side effect did not happen, and may run again (a connection refused, a request
    /// the service rejected before acting): the claim is released, and the next delivery
    /// acquires it.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub fn release<C: InboxConnection>(mut self, conn: &mut C, reason: &str) -> Result<(), Error> {
        run_ready(self.finish::<Blocking, _>(conn, ClaimState::Released, reason))
    }

    /// The side effect did not happen, and must never run (an address the mailer refuses, a
    /// card the processor declined for good): the claim is abandoned, and later deliveries
    /// get [`Claimed::Abandoned`](crate::claim::Claimed::Abandoned).
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub fn abandon<C: InboxConnection>(mut self, conn: &mut C, reason: &str) -> Result<(), Error> {
        run_ready(self.finish::<Blocking, _>(conn, ClaimState::Abandoned, reason))
    }

    /// Whether the side effect happened is unknown (a timeout, a connection dropped
    /// mid-request): the claim is in doubt, for ops to resolve, or released under
    /// [`InDoubtPolicy::RerunAfterLease`](crate::claim::InDoubtPolicy). Returns which.
    ///
    /// # Errors
    ///
    /// [`claim::Refused::Fenced`](super::Refused::Fenced); [`Error::Database`].
    pub fn outcome_unknown<C: InboxConnection>(
        self,
        conn: &mut C,
        reason: &str,
    ) -> Result<ClaimState, Error> {
        run_ready(self.outcome_unknown_in::<Blocking, _>(conn, reason))
    }

    /// [`outcome_unknown`](Self::outcome_unknown) in either flavour.
    pub(crate) async fn outcome_unknown_in<F, C: Db<F, Backend: Sql>>(
        mut self,
        conn: &mut C,
        reason: &str,
    ) -> Result<ClaimState, Error> {
        let state = verdict::after_failure(None, self.claims.policy);
        self.finish(conn, state, reason).await.map(|()| state)
    }

    /// After the side effect failed with `failure` (`None`: it panicked): moves the claim to
    /// what the failure says and returns that state, or logs why it could not.
    pub(crate) async fn failed<F, C: Db<F, Backend: Sql>>(
        mut self,
        conn: &mut C,
        failure: Option<HandlerFailure>,
        reason: &str,
    ) -> Option<ClaimState> {
        let state = verdict::after_failure(failure, self.claims.policy);
        match self.finish(conn, state, reason).await {
            Ok(()) => Some(state),
            Err(error) => {
                warn!(consumer = self.claims.consumer(), event_id = self.event_id.as_str(), %error, "the side effect failed and the claim could not record it; it stays in progress until its lease runs out");
                None
            }
        }
    }

    /// Moves the claim to `state`, logged and counted once committed.
    pub(crate) async fn finish<F, C: Db<F, Backend: Sql>>(
        &mut self,
        conn: &mut C,
        state: ClaimState,
        reason: &str,
    ) -> Result<(), Error> {
        self.finished = true;
        let written = self.write(conn, state, None, None, Some(reason)).await;
        if let Err(fenced @ Error::Claim(Refused::Fenced { .. })) = &written {
            self.fenced(fenced, None);
            return written;
        }
        written?;
        observe::claim_transition(self.claims.consumer(), state);
        let (consumer, event_id) = self.key();
        if state == ClaimState::InDoubt {
            warn!(consumer, event_id, attempt = self.attempt, reason, "claim in doubt: the side effect may or may not have happened; resolve it (diesel-inbox claims resolve)");
        } else {
            info!(consumer, event_id, attempt = self.attempt, reason, state = %state, "claim finished without completing");
        }
        Ok(())
    }

    /// After a completion that did not commit: the side effect happened, so the claim must
    /// not wait out its lease in progress. Logs the result and puts the claim in doubt (or
    /// releases it, under the re-run policy), best effort.
    async fn completion_failed<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        json: Option<&str>,
        why: &str,
    ) {
        let (consumer, event_id) = self.key();
        error!(consumer, event_id, attempt = self.attempt, result = json, error = why, "the side effect happened but its claim's completion did not commit; resolve the claim with this result");
        let state = verdict::after_failure(None, self.claims.policy);
        let note = format!(
            "the side effect happened, with result {}, but its completion did not commit: {why}",
            json.unwrap_or("(not serializable)")
        );
        match self.write(conn, state, None, None, Some(&note)).await {
            Ok(()) => observe::claim_transition(consumer, state),
            Err(error) => {
                warn!(consumer, event_id, %error, "could not record the failed completion (if the completion did commit after all, the claim is completed); otherwise the claim stays in progress until its lease runs out");
            }
        }
    }

    /// Logs and counts a refused write of this former holder.
    fn fenced(&self, error: &Error, json: Option<&str>) {
        observe::claim_fenced(self.claims.consumer());
        let (consumer, event_id) = self.key();
        error!(consumer, event_id, attempt = self.attempt, result = json, %error, "a former holder's write to its claim was refused");
    }

    /// Applies one change of this holder, in a transaction of its own.
    async fn write<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        state: ClaimState,
        lease_until: Option<DateTime<Utc>>,
        result: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), Error> {
        let body = Write {
            claim: self,
            state,
            lease_until,
            result,
            note,
        };
        self.run(conn, body).await.map_err(Failure::into_error)
    }

    /// Runs `body` in a transaction (or a savepoint inside the caller's), retrying contention.
    async fn run<F, C: Db<F, Backend: Sql>, E: HandlerError>(
        &self,
        conn: &mut C,
        body: impl Body<F, C, Output = (), Error = E>,
    ) -> Result<(), Failure<E>> {
        let scope = engine::scope_of(conn)?;
        let subject = self.claims.inbox.subject(Some(self.event_id.as_str()));
        let policy = self.claims.inbox.retry_policy();
        engine::run(conn, scope, policy, subject, body).await
    }

    /// Applies one change of this holder inside the open transaction; fenced unless the claim
    /// is still this attempt's and in a state the change may leave.
    async fn write_in<F, C: Db<F, Backend: Sql>, E>(
        &self,
        conn: &mut C,
        state: ClaimState,
        lease_until: Option<DateTime<Utc>>,
        result: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), Failure<E>> {
        let key = self.key();
        let now = now();
        let change = ClaimChange {
            state,
            acquire: false,
            // A holder that cannot tell ends its lease: the claim is in doubt from now.
            lease_until: lease_until.or((state == ClaimState::InDoubt).then_some(now)),
            result,
            note,
            audit: None,
            now,
        };
        let from = verdict::holder_may_move_from(state);
        if C::Backend::update_claim(conn, key, self.attempt, from, &change).await? {
            return Ok(());
        }
        let row = C::Backend::claim(conn, key, false).await?;
        Err(Failure::Inbox(Error::Claim(match row {
            Some(row) => Refused::Fenced {
                event_id: self.event_id.clone(),
                attempt: self.attempt(),
                current: row.attempt.unsigned_abs(),
                state: verdict::state_at(&row, change.now),
            },
            None => Refused::Deleted {
                event_id: self.event_id.clone(),
            },
        })))
    }

    fn key(&self) -> Key<'_> {
        (self.claims.consumer(), self.event_id.as_str())
    }
}

/// A holder's write to its claim, in a transaction of its own.
struct Write<'a> {
    claim: &'a Claim,
    state: ClaimState,
    lease_until: Option<DateTime<Utc>>,
    result: Option<&'a str>,
    note: Option<&'a str>,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Write<'_> {
    type Output = ();
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<(), Failure<Error>> {
        let Self {
            claim,
            state,
            lease_until,
            result,
            note,
        } = *self;
        claim.write_in(tx, state, lease_until, result, note).await
    }
}

/// The completion's transaction: the claim completed with its result, and the writes that
/// record it.
struct Complete<'a, R> {
    claim: &'a Claim,
    json: &'a str,
    record: &'a mut R,
}

impl<F, C, E, R> Body<F, C> for Complete<'_, R>
where
    C: Db<F, Backend: Sql>,
    R: Effect<C, Output = (), Error = E>,
{
    type Output = ();
    type Error = E;

    async fn attempt(&mut self, tx: &mut C) -> Result<(), Failure<E>> {
        let completed = Some(self.json);
        let claim = self.claim;
        claim
            .write_in(tx, ClaimState::Completed, None, completed, None)
            .await?;
        engine::call_user(tx, &mut *self.record, Then::Statements).await
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.finished {
            let (consumer, event_id) = self.key();
            let then = match self.claims.policy {
                InDoubtPolicy::Hold => "then it is in doubt",
                InDoubtPolicy::RerunAfterLease => "then the next delivery runs it again",
            };
            warn!(consumer, event_id, attempt = self.attempt, lease_until = %self.lease_until, "a claim was dropped unfinished: it stays in progress until its lease runs out, {then}");
        }
    }
}

/// The idempotency key of the claim of `event_id` by `consumer`: a version-8 UUID of the
/// SHA-256 of both, stable across attempts, processes and versions of this crate.
pub(crate) fn idempotency_key(consumer: &str, event_id: &str) -> String {
    let mut hasher = Sha256::new();
    for part in ["diesel-inbox claim", consumer, event_id] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    let digest: [u8; 32] = hasher.finalize().into();
    let mut bytes = [0; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Uuid::new_v8(bytes).hyphenated().to_string()
}

#[cfg(test)]
mod tests {
    use super::idempotency_key;

    #[test]
    fn the_idempotency_key_is_a_stable_uuid_of_consumer_and_event() {
        let key = idempotency_key("mailer", "welcome:42");
        assert_eq!(key, idempotency_key("mailer", "welcome:42"));
        assert_eq!(key.len(), 36);
        let parsed = uuid::Uuid::parse_str(&key).unwrap();
        assert_eq!(parsed.get_version_num(), 8);
        assert_ne!(key, idempotency_key("billing", "welcome:42"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(idempotency_key("ab", "c"), idempotency_key("a", "bc"));
    }
}

/// What [`Claims::claim`](crate::claim::Claims::claim) found: the claim to run the side effect
/// under, or why not to run it. `H` is the held claim's type: [`Claim`], or the async
/// flavour's `asynch::Claim`.
#[must_use = "only Claimed::Acquired may run the side effect"]
#[derive(Debug)]
#[non_exhaustive]
pub enum Claimed<H = Claim> {
    /// This delivery holds the claim: run the side effect now, then finish the claim
    /// ([`Claim::complete`] and the others).
    Acquired(H),
    /// The side effect happened before: its stored result, and the side effect must not run.
    Completed(Completed),
    /// Another worker holds the claim and its lease runs: do not run the side effect;
    /// redeliver after the lease.
    InProgress(InProgress),
    /// Whether the side effect happened is unknown: do not run it; ops resolve the claim.
    InDoubt(InDoubt),
    /// The side effect did not happen and must not run.
    Abandoned(Abandoned),
    /// Under a replay that does not call out: nothing was claimed and the side effect must
    /// not run; what a live delivery would have done is noted in the replay.
    Suppressed(Suppressed),
}

impl<H> Claimed<H> {
    /// The same finding, with the held claim (if any) made into another type.
    #[cfg(feature = "async")]
    pub(crate) fn map_held<K>(self, held: impl FnOnce(H) -> K) -> Claimed<K> {
        match self {
            Self::Acquired(claim) => Claimed::Acquired(held(claim)),
            Self::Completed(done) => Claimed::Completed(done),
            Self::InProgress(progress) => Claimed::InProgress(progress),
            Self::InDoubt(doubt) => Claimed::InDoubt(doubt),
            Self::Abandoned(abandoned) => Claimed::Abandoned(abandoned),
            Self::Suppressed(suppressed) => Claimed::Suppressed(suppressed),
        }
    }
}
