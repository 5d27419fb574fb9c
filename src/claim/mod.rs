//! Claims: at most once (or once downstream) for side effects a database rollback cannot undo,
//! such as an email, a card charge or a call to another service.
//!
//! A claim on `(consumer, event_id)` commits in a short transaction of its own *before* the
//! side effect; the side effect runs outside any transaction; its completion commits after,
//! with its result and the writes that record it.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::claim::ClaimOutcome;
//! use diesel_inbox::{Ack, Delivery, Error, Inbox};
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! diesel::sql_query("CREATE TABLE charges (order_id TEXT, charge TEXT)").execute(&mut conn)?;
//! let charges = Inbox::new("billing")?.claims(); // at most once, 60 s lease
//!
//! let delivery = Delivery::new("order-7")?.json(serde_json::json!({"total": 1200}));
//! let result = charges.run_and_record(
//!     &mut conn,
//!     &delivery,
//!     // Outside any transaction: payments.charge(1200, claim.idempotency_key())
//!     |_claim| Ok::<_, Error>("ch_81".to_owned()),
//!     // Commits with the completion.
//!     |tx, charge| {
//!         diesel::sql_query("INSERT INTO charges VALUES ('order-7', ?)")
//!             .bind::<diesel::sql_types::Text, _>(charge)
//!             .execute(tx)?;
//!         Ok(())
//!     },
//! );
//! match &result {
//!     Ok(ClaimOutcome::Ran(charge) | ClaimOutcome::Completed(charge)) => {
//!         assert_eq!(charge, "ch_81"); // charged, now or before
//!     }
//!     Ok(ClaimOutcome::InDoubt(_)) => { /* unknown: ops resolve it; never re-run on its own */ }
//!     _ => {}
//! }
//! assert_eq!(Ack::of(&result), Ack::Ack);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - **Claim, act, complete.** [`Claims::claim`] inserts `(consumer, event_id)` into
//!   `diesel_inbox_claims` and commits, in a short transaction of its own, before the side
//!   effect runs (called inside an open transaction it is refused:
//!   `Error::InsideTransaction`). The side effect gets the [`Claim`], whose
//!   [`idempotency_key`](Claim::idempotency_key) is a UUID derived from the consumer and the
//!   event id: the same for every attempt and every process. The completion stores the result
//!   as JSON and commits any writes that record it ([`Claims::run_and_record`],
//!   [`Claim::complete_with`]) in one transaction.
//! - **Duplicates get the stored result.** A delivery of a completed claim returns
//!   [`ClaimOutcome::Completed`] and the side effect does not run. A delivery while another
//!   worker holds the claim gets [`ClaimOutcome::InProgress`] with the lease's deadline, and
//!   does not run it either (`Ack::Redeliver`).
//! - **In doubt, never silently re-run, never silently stuck.** A worker that dies between the
//!   claim and the completion leaves a claim nobody can read the outcome from. Once its lease
//!   runs out it is **in doubt**. By default ([`InDoubtPolicy::Hold`]) nothing runs it again:
//!   at most once, the side to err on for money and for messages to people. It is visible to
//!   [`Claims::in_doubt`], `diesel-inbox claims`, a warn line, the metric
//!   `diesel_inbox_claim_transitions_total{state="in_doubt"}` and the gauge
//!   `diesel_inbox_claims_in_doubt`. Ops resolve it with an audit, once they have looked at the
//!   service (its log, the idempotency key): [`Claims::resolve`] with a [`Resolution`]
//!   (completed with a result, retry, or abandon). A completed claim returns ops' result to
//!   later deliveries; a retried one runs on its next delivery (the claim keeps the payload, to
//!   publish again).
//! - **What a failure says.** A side effect whose error is marked transient
//!   ([`Error::transient`]: it did not happen, try later) releases the claim, and the error
//!   comes back (`Ack::Redeliver`). One marked permanent ([`Error::permanent`]) abandons it:
//!   [`ClaimOutcome::Abandoned`]. Any other error, and a panic, does not say whether the side
//!   effect happened: [`ClaimOutcome::InDoubt`], with the error as its reason. Mark an error
//!   transient only when the request cannot have reached the service; a timeout is not
//!   transient.
//! - **Re-run, for services that deduplicate.** [`InDoubtPolicy::RerunAfterLease`] re-runs a
//!   claim in doubt on its next delivery, with the same idempotency key, so the service applies
//!   it once. Use it only for side effects that pass the key downstream, and only within the
//!   window the service keeps keys for (below).
//! - **Leases and fencing.** [`Claims::lease`] (default 60 s) is how long a holder has; give
//!   the side effect's own timeout plus a margin, and extend a long one with
//!   [`Claim::extend`]. Each acquisition bumps the claim's attempt, and every write of a holder
//!   is fenced by it: a late completion after another worker took over is refused and commits
//!   nothing, its record writes included. A late completion by the holder still stands over
//!   ops' retry or abandonment (it shows the side effect did happen), but not over ops'
//!   completion.
//! - **Two phases, where a closure does not fit.** [`Claims::claim`] returns
//!   [`Claimed::Acquired`] (or completed, in progress, in doubt, abandoned). Finish the
//!   [`Claim`] with `complete`, `complete_with`, `release` (did not happen), `abandon` (never
//!   will) or `outcome_unknown`. A `Claim` dropped unfinished cannot do I/O: it logs at warn
//!   and stays in progress until its lease runs out, then in doubt.
//! - **Payloads are fingerprinted** as in the inbox: the same id with another payload is
//!   `Error::PayloadMismatch`, and claims nothing.
//!
//! Which services honour an idempotency key, and for how long (from their documentation; check
//! yours, windows change):
//!
//! | service | key | kept for |
//! |---|---|---|
//! | Stripe | `Idempotency-Key` header, up to 255 characters | at least 24 hours |
//! | Adyen | `Idempotency-Key` header, up to 64 characters | at least 31 days |
//! | Braintree (GraphQL) | `ApiRequestKey` | 30 days (limited release) |
//! | Checkout.com | `Cko-Idempotency-Key` header | 24 hours by default |
//! | PayPal REST | `PayPal-Request-Id` header, on the APIs that take it | per API: Orders v2 keeps 6 hours |
//! | Square | `idempotency_key` in the body, up to 45 characters (`CreatePayment`) | not published |
//! | Resend (email) | `Idempotency-Key` header, up to 256 characters | 24 hours |
//! | AWS EC2 | `ClientToken`, up to 64 ASCII characters | at least 24 hours |
//! | Google Cloud | `requestId`, a UUID | at least 60 minutes on many APIs; not stated for Compute Engine |
//! | NATS JetStream (publish) | `Nats-Msg-Id` header | the stream's duplicate window, 2 minutes by default |
//! | Amazon SES, Postmark, SendGrid, Mailgun, Twilio SMS | none | keep these at most once (`Hold`) |
//!
//! `examples/claims.rs` plays it through on embedded SQLite: a welcome email sent once, a card
//! charge re-run after a crash and applied once by the payment API, and an email in doubt that
//! ops resolve from the mailer's log.
//!
//! What a claim's row means is decided in `verdict.rs`, apart from the I/O here, in `held.rs`
//! (the holder's writes) and in `ledger.rs` (listing and ops' resolutions).

#[cfg(feature = "async")]
pub(crate) mod asynch;
pub(crate) mod error;
mod held;
mod ledger;
pub(crate) mod outcome;
pub(crate) mod sql;
pub(crate) mod state;
mod verdict;

use std::future::Future;
use std::panic;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tracing::{info, warn};

use crate::decide;
use crate::decide::{Failure, Scope};
use crate::duration::{after, now};
use crate::engine::{self, run_ready, Body, Effect};
use crate::sql::{Blocking, Db, Sql};
use crate::{observe, Delivery, Error, HandlerError, Inbox, InboxConnection, IntoDelivery};
use sql::{ClaimChange, ClaimRow, ClaimSql, NewClaim};

pub use error::Refused;
pub use held::Claim;
pub use held::Claimed;
pub use ledger::{ClaimRecord, Resolution};
pub use outcome::{Abandoned, ClaimOutcome, Completed, InDoubt, InProgress, Suppressed};
pub use state::ClaimState;
pub(crate) use verdict::state_at;
pub use verdict::InDoubtPolicy;

/// How long a claim's holder has, by default, before its claim is in doubt; see
/// [`Claims::lease`].
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// Claims on side effects outside the database, for one consumer: [`Inbox::claims`].
///
/// A transaction makes the inbox's effects exactly once, because a rollback undoes them. An
/// email sent or a card charged cannot be rolled back, so a claim orders things the other way:
///
/// 1. The claim on `(consumer, event_id)` commits, in a short transaction of its own, before
///    the side effect runs. Its lease ([`lease`](Self::lease), 60 seconds by default) says
///    how long the holder has.
/// 2. The side effect runs, outside any transaction, with the claim's stable
///    [idempotency key](Claim::idempotency_key) to pass downstream.
/// 3. Its completion commits with the side effect's result and any database writes that
///    record it.
///
/// A later delivery of a completed claim gets the stored result back, and the side effect
/// does not run. A delivery while another worker's lease runs gets
/// [`ClaimOutcome::InProgress`], and does not run it either.
///
/// No order of "record" and "act" is safe against every crash. A worker that dies between
/// the claim and the completion leaves a claim whose side effect may or may not have
/// happened. Once its lease runs out, that claim is **in doubt**:
///
/// - by default ([`InDoubtPolicy::Hold`]) it is never run again on its own: at most once,
///   the side to err on for money and for messages to people;
/// - it is visible: [`Claims::in_doubt`], the `diesel_inbox_claim_transitions_total{state="in_doubt"}`
///   metric, a warn-level log line, and `diesel-inbox claims`;
/// - ops resolve it, with an audit: completed with a given result, retried, or abandoned
///   ([`Claims::resolve`]);
/// - [`InDoubtPolicy::RerunAfterLease`] re-runs it instead, for side effects that pass the
///   idempotency key downstream so that the service applies a repeat once.
///
/// A late completion by a holder whose claim another worker took over is fenced by the
/// claim's attempt number ([`claim::Refused::Fenced`](Refused::Fenced)) and cannot overwrite it.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{claim::ClaimOutcome, Delivery, Inbox};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let welcome = Inbox::new("welcome-mailer")?.claims();
///
/// let mut sent = 0;
/// let mut send = |claim: &diesel_inbox::claim::Claim| {
///     sent += 1; // mailer.send(to, template, claim.idempotency_key())
///     Ok::<_, diesel_inbox::Error>(format!("msg-{}", claim.attempt()))
/// };
/// let delivery = Delivery::new("user-42:welcome")?;
/// let first = welcome.run(&mut conn, &delivery, &mut send)?;
/// let again = welcome.run(&mut conn, &delivery, &mut send)?;
/// assert_eq!(first, ClaimOutcome::Ran("msg-1".to_owned()));
/// assert_eq!(again, ClaimOutcome::Completed("msg-1".to_owned()));
/// assert_eq!(sent, 1);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Claims {
    inbox: Inbox,
    lease: Duration,
    policy: InDoubtPolicy,
    /// Under a replay that does not call out: where suppressed claims are noted.
    suppressed: Option<Suppression>,
}

/// Where the claims of a replay that does not call out note what they would have done,
/// shared with the replay's delivery.
#[derive(Debug, Clone, Default)]
pub(crate) struct Suppression(Arc<Mutex<Vec<String>>>);

impl Suppression {
    /// Notes a side effect that did not happen.
    pub(crate) fn note(&self, what: String) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(what);
    }

    /// What was noted since the last take.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Inbox {
    /// Claims on side effects outside the database, for this consumer; see [`Claims`]. They
    /// share the consumer's name and retry policy, and are keyed by event id as its inbox
    /// is, in a table of their own.
    pub fn claims(&self) -> Claims {
        Claims {
            inbox: self.clone(),
            lease: DEFAULT_LEASE,
            policy: InDoubtPolicy::default(),
            suppressed: None,
        }
    }
}

impl Claims {
    /// How long a holder has to complete its claim before the claim is in doubt. Defaults to
    /// [`DEFAULT_LEASE`], 60 seconds. Give the side effect's own timeout plus a margin: a
    /// lease that runs out under a live holder makes its claim in doubt (or, under
    /// [`InDoubtPolicy::RerunAfterLease`], lets another worker run it again). Leases are read
    /// on each worker's clock, so keep the clocks in sync.
    ///
    /// # Panics
    ///
    /// When `lease` is zero.
    pub fn lease(mut self, lease: Duration) -> Self {
        assert!(!lease.is_zero(), "a claim's lease must be longer than zero");
        self.lease = lease;
        self
    }

    /// What happens to a claim in doubt. Defaults to [`InDoubtPolicy::Hold`]: at most once.
    pub fn policy(mut self, policy: InDoubtPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.inbox.consumer()
    }

    /// These claims, suppressed: they call nothing, claim nothing, and note in `suppression`
    /// what they would have done.
    pub(crate) fn suppressed(mut self, suppression: Suppression) -> Self {
        self.suppressed = Some(suppression);
        self
    }

    /// What a suppressed claim finds: the claim's state, read and noted.
    async fn suppress<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        suppression: &Suppression,
    ) -> Result<Suppressed, Error> {
        let key = (self.consumer(), delivery.id.as_str());
        let row = C::Backend::claim(conn, key, false).await?;
        let found = Suppressed {
            state: row.map(|row| state_at(&row, now())),
        };
        suppression.note(found.describe(key.0, key.1));
        Ok(found)
    }

    /// Claims `delivery`'s event, in a transaction of its own that commits before this
    /// returns: the two-phase form, for flows the closure form does not fit.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{claim::Claimed, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let charges = Inbox::new("billing")?.claims();
    ///
    /// match charges.claim(&mut conn, "order-7:charge")? {
    ///     Claimed::Acquired(claim) => {
    ///         // let charge = payments.charge(1250, claim.idempotency_key())?;
    ///         let charge_id = "ch_1".to_owned();
    ///         claim.complete_with(&mut conn, &charge_id, |tx| {
    ///             // Recorded in the completion's transaction: both commit, or neither.
    ///             diesel::sql_query("SELECT 1").execute(tx).map(drop)
    ///         })?;
    ///     }
    ///     Claimed::Completed(done) => println!("charged before: {}", done.result::<String>()?),
    ///     other => println!("not charging now: {other:?}"),
    /// }
    /// assert!(matches!(charges.claim(&mut conn, "order-7:charge")?, Claimed::Completed(_)));
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InsideTransaction`] inside an open transaction (the claim must commit
    /// before the side effect runs); [`Error::InvalidEventId`]; [`Error::PayloadMismatch`]
    /// when the id was first claimed with another payload; [`Error::Database`],
    /// [`Error::RetriesExhausted`], [`Error::ConnectionLost`], [`Error::CommitUnknown`]: do
    /// not run the side effect; redeliver. After the last two the claim may have committed
    /// with no one to run it: it is then in progress, and in doubt once its lease runs out,
    /// though its side effect never ran (ops resolve it with a retry).
    pub fn claim<C: InboxConnection>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
    ) -> Result<Claimed, Error> {
        let delivery = delivery.into_delivery()?;
        run_ready(self.claim_on::<Blocking, _>(conn, delivery))
    }

    /// [`claim`](Self::claim) in either flavour.
    pub(crate) async fn claim_on<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        delivery: Delivery,
    ) -> Result<Claimed, Error> {
        if let Some(suppression) = &self.suppressed {
            let found = self.suppress(conn, &delivery, suppression).await?;
            return Ok(Claimed::Suppressed(found));
        }
        if engine::scope_of(conn)? == Scope::Savepoint {
            return Err(Error::InsideTransaction {
                operation: "Claims::claim or Claims::run",
            });
        }
        let subject = self.inbox.subject(Some(delivery.id.as_str()));
        let body = Take {
            claims: self,
            delivery: &delivery,
        };
        let policy = self.inbox.retry_policy();
        let (found, lapsed) = engine::run(conn, Scope::TopLevel, policy, subject, body)
            .await
            .map_err(Failure::into_error)?;
        // The guard is made once the claim has committed: one dropped with a transaction
        // that did not commit would warn of a claim that does not exist.
        let claimed = match found {
            Found::Acquired {
                attempt,
                lease_until,
            } => Claimed::Acquired(Claim::new(self, delivery.id.clone(), attempt, lease_until)),
            Found::Other(claimed) => claimed,
        };
        let (consumer, event_id) = (self.consumer(), delivery.id.as_str());
        let taken_over = lapsed && matches!(claimed, Claimed::Acquired(_));
        match &claimed {
            Claimed::Acquired(claim) => {
                observe::claim_transition(consumer, ClaimState::InProgress);
                let attempt = claim.attempt();
                let lease_until = claim.lease_until();
                if taken_over {
                    warn!(consumer, event_id, attempt, %lease_until, "claim taken over after its holder's lease ran out: the side effect runs again, with the same idempotency key");
                } else {
                    info!(consumer, event_id, attempt, %lease_until, "claim acquired");
                }
            }
            Claimed::InDoubt(doubt) if lapsed => {
                observe::claim_transition(consumer, ClaimState::InDoubt);
                warn!(consumer, event_id, attempt = doubt.attempt(), reason = doubt.reason(), "claim in doubt: the side effect may or may not have happened; resolve it (diesel-inbox claims resolve)");
            }
            _ => {}
        }
        Ok(claimed)
    }

    /// The body of the claim's transaction: insert the claim, or read the existing one and
    /// decide. Returns what it found, and whether it found a holder's lease run out: then it
    /// has just recorded the claim in doubt, or taken it over.
    async fn claim_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
    ) -> Result<(Found, bool), Failure<Error>> {
        let key = (self.consumer(), delivery.id.as_str());
        let now = now();
        let lease_until = after(now, self.lease);
        let fingerprint = delivery.payload.as_ref().map(crate::Payload::fingerprint);
        let new = NewClaim {
            lease_until,
            now,
            payload_hash: fingerprint.as_ref().map(|f| &f[..]),
            payload: delivery.payload.as_ref(),
        };
        let Some(row) = C::Backend::record_claim(conn, key, &new).await? else {
            let acquired = Found::Acquired {
                attempt: 1,
                lease_until,
            };
            return Ok((acquired, false));
        };
        let found = verdict::on_delivery(&row, fingerprint.as_ref(), now, self.policy);
        let claimed = match found {
            verdict::OnDelivery::PayloadConflict => {
                return Err(Failure::Inbox(Error::PayloadMismatch {
                    event_id: delivery.id.clone(),
                }));
            }
            verdict::OnDelivery::Acquire { lapsed } => {
                let change = ClaimChange {
                    state: ClaimState::InProgress,
                    acquire: true,
                    lease_until: Some(lease_until),
                    result: None,
                    note: None,
                    audit: None,
                    now,
                };
                // The row is locked: no one else can have moved it since it was read.
                C::Backend::update_claim(conn, key, row.attempt, &[row.state], &change).await?;
                let acquired = Found::Acquired {
                    attempt: row.attempt + 1,
                    lease_until,
                };
                return Ok((acquired, lapsed));
            }
            verdict::OnDelivery::Completed => Claimed::Completed(Completed::from_row(&row)),
            verdict::OnDelivery::InProgress => Claimed::InProgress(InProgress {
                attempt: row.attempt.unsigned_abs(),
                lease_until: row.lease_until,
            }),
            verdict::OnDelivery::InDoubt { lapsed } => {
                let doubt = InDoubt::from_row(&row);
                if lapsed {
                    record_lapse(conn, key, &row, &doubt).await?;
                }
                return Ok((Found::Other(Claimed::InDoubt(doubt)), lapsed));
            }
            verdict::OnDelivery::Abandoned => Claimed::Abandoned(Abandoned::from_row(&row)),
        };
        Ok((Found::Other(claimed), false))
    }

    /// Runs the side effect `effect` once per event, at most once by default: the closure form
    /// of [`claim`](Self::claim). `effect` runs outside any transaction, given the claim for
    /// its [idempotency key](Claim::idempotency_key); its result is stored as JSON and
    /// returned to later deliveries ([`ClaimOutcome::Completed`]).
    ///
    /// When `effect` fails, what its error says decides (see
    /// [`FailureKind`](crate::FailureKind)):
    ///
    /// - marked transient ([`Error::transient`]): it did not happen; the claim is released
    ///   and the error comes back, to redeliver;
    /// - marked permanent ([`Error::permanent`]): it did not happen and never will:
    ///   [`ClaimOutcome::Abandoned`];
    /// - anything else, a panic included, does not say whether the side effect happened:
    ///   [`ClaimOutcome::InDoubt`], with the error's text as its reason (a panic then goes
    ///   on unwinding). Under [`InDoubtPolicy::RerunAfterLease`] the claim is released and
    ///   the error comes back instead.
    ///
    /// Mark an error transient only when the request cannot have reached the service: a
    /// timeout is not transient.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{claim::ClaimOutcome, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let mailer = Inbox::new("mailer")?.claims();
    /// // The side effect outside the database: an email, a payment; its key dedups on their side.
    /// let send = |claim: &diesel_inbox::claim::Claim| Ok::<_, diesel_inbox::Error>(format!("sent with {}", claim.idempotency_key()));
    ///
    /// let first = mailer.run(&mut conn, "evt-1", send)?;
    /// let again = mailer.run(&mut conn, "evt-1", send)?;
    /// assert!(matches!(first, ClaimOutcome::Ran(_)));
    /// assert!(matches!(again, ClaimOutcome::Completed(_))); // the stored result; not sent twice
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim); `effect`'s own error, unchanged, when the claim was
    /// released; as [`Claim::complete_with`] when the completion cannot commit.
    pub fn run<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        effect: F,
    ) -> Result<ClaimOutcome<T>, E>
    where
        C: InboxConnection,
        T: Serialize + DeserializeOwned,
        E: HandlerError,
        F: FnOnce(&Claim) -> Result<T, E>,
    {
        self.run_and_record(conn, delivery, effect, |_tx, _value| Ok(()))
    }

    /// [`run`](Self::run), committing `record`'s database writes (the charge id on the
    /// order, say) in the completion's transaction: the claim is completed with them, or
    /// neither commits. Contention retries `record`.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{claim::ClaimOutcome, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// diesel::sql_query("CREATE TABLE charges (id TEXT NOT NULL)").execute(&mut conn)?;
    /// let payments = Inbox::new("payments")?.claims();
    ///
    /// let charged = payments.run_and_record(
    ///     &mut conn,
    ///     "order-42",
    ///     |_claim| Ok::<_, diesel_inbox::Error>("ch_1".to_owned()), // the payment API's charge id
    ///     |tx, charge| {
    ///         diesel::sql_query(format!("INSERT INTO charges VALUES ('{charge}')")).execute(tx)?;
    ///         Ok(())
    ///     },
    /// )?;
    /// assert!(matches!(charged, ClaimOutcome::Ran(_)));
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run), and `record`'s own error.
    pub fn run_and_record<C, T, E, F, R>(
        &self,
        conn: &mut C,
        delivery: impl IntoDelivery,
        effect: F,
        record: R,
    ) -> Result<ClaimOutcome<T>, E>
    where
        C: InboxConnection,
        T: Serialize + DeserializeOwned,
        E: HandlerError,
        F: FnOnce(&Claim) -> Result<T, E>,
        R: FnMut(&mut C, &T) -> Result<(), E>,
    {
        let delivery = delivery.into_delivery().map_err(Error::from)?;
        run_ready(self.run_in::<Blocking, _, _, _>(conn, delivery, effect, record))
    }

    /// [`run_and_record`](Self::run_and_record) in either flavour.
    pub(crate) async fn run_in<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: Delivery,
        effect: impl SideEffect<T, E>,
        mut record: impl Record<C, T, Error = E>,
    ) -> Result<ClaimOutcome<T>, E>
    where
        C: Db<F, Backend: Sql>,
        T: Serialize + DeserializeOwned,
        E: HandlerError,
    {
        let claim = match self.claim_on(conn, delivery).await? {
            Claimed::Acquired(claim) => claim,
            Claimed::Completed(done) => return Ok(ClaimOutcome::Completed(done.result()?)),
            Claimed::InProgress(held) => return Ok(ClaimOutcome::InProgress(held)),
            Claimed::InDoubt(doubt) => return Ok(ClaimOutcome::InDoubt(doubt)),
            Claimed::Abandoned(abandoned) => return Ok(ClaimOutcome::Abandoned(abandoned)),
            Claimed::Suppressed(suppressed) => return Ok(ClaimOutcome::Suppressed(suppressed)),
        };
        let attempt = claim.attempt();
        let (value, failure) = match engine::catch_unwind(effect.run(&claim)).await {
            Ok(Ok(value)) => {
                let recorded = Recorded(&mut record, &value);
                claim.complete_in(conn, &value, recorded).await?;
                return Ok(ClaimOutcome::Ran(value));
            }
            Ok(Err(error)) => {
                let kind = decide::handler_failure(
                    &error,
                    <C::Backend as crate::sql::TransactionSql>::classify,
                );
                (Err(error), Some(kind))
            }
            Err(panic) => (Ok(panic), None),
        };
        let reason = match &value {
            Err(error) => error.to_string(),
            Ok(panic) => crate::dead_letter::failure::panic_message(&**panic),
        };
        let state = claim.failed(conn, failure, &reason).await;
        let since = now();
        let error = match value {
            Ok(panic) => panic::resume_unwind(panic),
            Err(error) => error,
        };
        match state {
            Some(ClaimState::InDoubt) => Ok(ClaimOutcome::InDoubt(InDoubt {
                attempt,
                since,
                reason,
            })),
            Some(ClaimState::Abandoned) => Ok(ClaimOutcome::Abandoned(Abandoned {
                reason: Some(reason),
            })),
            _ => Err(error),
        }
    }
}

/// The side effect a claim guards, run once outside any transaction with the claim: a
/// closure in the sync flavour, an async closure in the async one.
pub(crate) trait SideEffect<T, E> {
    /// Runs it; a panic is caught when the future is polled.
    fn run(self, claim: &Claim) -> impl Future<Output = Result<T, E>>;
}

impl<T, E, G: FnOnce(&Claim) -> Result<T, E>> SideEffect<T, E> for G {
    async fn run(self, claim: &Claim) -> Result<T, E> {
        self(claim)
    }
}

/// The database writes that record a side effect's value, in the completion's transaction.
pub(crate) trait Record<C, T> {
    /// The writes' error.
    type Error;

    /// Writes them on the transaction's connection.
    fn record(&mut self, tx: &mut C, value: &T) -> impl Future<Output = Result<(), Self::Error>>;
}

impl<C, T, E, G: FnMut(&mut C, &T) -> Result<(), E>> Record<C, T> for G {
    type Error = E;

    fn record(&mut self, tx: &mut C, value: &T) -> impl Future<Output = Result<(), E>> {
        std::future::ready(self(tx, value))
    }
}

/// A [`Record`] with its value, as the completion's user code.
struct Recorded<'a, R, T>(&'a mut R, &'a T);

impl<C, T, R: Record<C, T>> Effect<C> for Recorded<'_, R, T> {
    type Output = ();
    type Error = R::Error;

    fn call(&mut self, tx: &mut C) -> impl Future<Output = Result<(), R::Error>> {
        self.0.record(tx, self.1)
    }
}

/// The claim's transaction: [`Claims::claim_in`], once per attempt.
struct Take<'a> {
    claims: &'a Claims,
    delivery: &'a Delivery,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Take<'_> {
    type Output = (Found, bool);
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<(Found, bool), Failure<Error>> {
        self.claims.claim_in(tx, self.delivery).await
    }
}

/// What a claim's transaction found: the claim acquired, by this attempt until then, or
/// anything else.
enum Found {
    Acquired {
        attempt: i64,
        lease_until: chrono::DateTime<chrono::Utc>,
    },
    Other(Claimed),
}

/// Records that the claim `row`'s lease ran out before its holder completed it.
async fn record_lapse<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    key: crate::rows::Key<'_>,
    row: &ClaimRow,
    doubt: &InDoubt,
) -> Result<(), Failure<Error>> {
    let change = ClaimChange {
        state: ClaimState::InDoubt,
        acquire: false,
        lease_until: None,
        result: None,
        note: Some(doubt.reason()),
        audit: None,
        now: now(),
    };
    C::Backend::update_claim(conn, key, row.attempt, &[ClaimState::InProgress], &change).await?;
    Ok(())
}
