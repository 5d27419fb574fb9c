//! What ops see of a consumer's claims, and the audited resolution of one in doubt.

use chrono::{DateTime, Utc};
use tracing::info;

use super::held::idempotency_key;
use super::sql::reason_in_doubt;
use super::sql::{ClaimChange, ClaimRow, ClaimSql};
use super::ClaimState;
use super::{verdict, Claims};
use crate::decide::Failure;
use crate::duration::now;
use crate::engine::{self, run_ready, Body};
use crate::rows::ConsumerRows;
use crate::sql::{Blocking, Db, RetentionSql, Sql};
use crate::state::CorruptRow;
use crate::{observe, AdminError, Audit, Error, EventId, InboxConnection, IntoEventId, Payload};

/// A claim as the table keeps it, for ops.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimRecord {
    /// The claimed event.
    pub event_id: EventId,
    /// Where it stands when read: in progress past its lease reads as in doubt.
    pub state: ClaimState,
    /// Since when it is in doubt, when it is: the end of the lapsed lease, or the failure that
    /// did not say whether the side effect happened.
    pub in_doubt_since: Option<DateTime<Utc>>,
    /// The current holder's attempt (the fencing token).
    pub attempt: u64,
    /// Deliveries the claim has seen, the first included.
    pub deliveries: u64,
    /// When the current holder's lease runs (or ran) out.
    pub lease_until: DateTime<Utc>,
    /// When it was first claimed.
    pub claimed_at: DateTime<Utc>,
    /// Its last change or delivery.
    pub updated_at: DateTime<Utc>,
    /// When it was completed.
    pub completed_at: Option<DateTime<Utc>>,
    /// The side effect's result, as JSON, once completed.
    pub result: Option<String>,
    /// Why it was released, abandoned or is in doubt (a lapse no delivery has recorded yet
    /// included).
    pub reason: Option<String>,
    /// Who resolved it last and why, when ops did (completed, retried or abandoned); kept
    /// after a retried claim runs again.
    pub resolution: Option<Audit>,
    /// The payload as first delivered, when one was given: to publish again after a retry
    /// (only from [`Claims::show`] and [`Claims::resolve`]: a listing leaves payloads out).
    pub payload: Option<Payload>,
    /// What the stored payload is, `"json"` or `"bytes"`; `None` when the first delivery
    /// carried none. Listings fill it too.
    pub payload_kind: Option<String>,
    /// The idempotency key its side effect was given ([`Claim::idempotency_key`](crate::claim::Claim::idempotency_key)).
    pub idempotency_key: String,
}

impl ClaimRecord {
    fn from_row(consumer: &str, row: ClaimRow, now: DateTime<Utc>) -> Result<Self, CorruptRow> {
        let event_id = EventId::new(row.event_id.as_str()).map_err(|_| {
            let key = [("consumer", consumer), ("event_id", row.event_id.as_str())];
            CorruptRow::invalid_id("diesel_inbox_claims", &key, "event_id", &row.event_id)
        })?;
        let state = verdict::state_at(&row, now);
        let in_doubt = state == ClaimState::InDoubt;
        let resolution = audit_of(&row);
        let reason = if in_doubt {
            Some(reason_in_doubt(&row))
        } else {
            row.last_error
        };
        let payload = match (row.payload_kind.as_deref(), row.payload) {
            (Some(kind), Some(bytes)) => Payload::from_stored(kind, bytes),
            _ => None,
        };
        let payload_kind = row.payload_kind;
        Ok(Self {
            // A holder that cannot tell ends its lease: in doubt since the lease's end.
            in_doubt_since: in_doubt.then_some(row.lease_until),
            idempotency_key: idempotency_key(consumer, &row.event_id),
            event_id,
            state,
            attempt: row.attempt.unsigned_abs(),
            deliveries: row.deliveries.unsigned_abs(),
            lease_until: row.lease_until,
            claimed_at: row.claimed_at,
            updated_at: row.updated_at,
            completed_at: row.completed_at,
            result: row.result,
            reason,
            resolution,
            payload,
            payload_kind,
        })
    }
}

/// How ops settle a claim in doubt ([`Claims::resolve`]), once they found out what happened.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Resolution {
    /// The side effect happened, with this result (the charge id the payment provider shows,
    /// say; `null` where there is none): later deliveries get it back. Give it in the shape the
    /// handler's result serializes to, or [`Claims::run`] cannot read it back
    /// ([`Error::StoredResult`]).
    Completed(serde_json::Value),
    /// The side effect did not happen: the next delivery acquires the claim and runs it.
    /// Publish the message again (the claim keeps its payload) if the broker will not.
    Retry,
    /// The side effect must not happen: later deliveries are told it was abandoned.
    Abandon,
}

impl Resolution {
    /// The state it moves the claim to.
    fn state(&self) -> ClaimState {
        match self {
            Self::Completed(_) => ClaimState::Completed,
            Self::Retry => ClaimState::Released,
            Self::Abandon => ClaimState::Abandoned,
        }
    }
}

impl Claims {
    /// The consumer's claims in doubt, oldest first (every one: they wait for ops and stay
    /// few), without their payloads (see [`show`](Self::show)): each one's side effect may or may not
    /// have happened, and waits for ops ([`resolve`](Self::resolve)). Sets the gauge
    /// `diesel_inbox_claims_in_doubt` (with the `metrics` feature): call it from a periodic
    /// health check, and a claim whose lease ran out with no delivery since still shows.
    ///
    /// # Errors
    ///
    /// [`Error::CorruptRow`] for a claim in doubt whose event id is not a valid one;
    /// [`Error::Database`].
    pub fn in_doubt<C: InboxConnection>(&self, conn: &mut C) -> Result<Vec<ClaimRecord>, Error> {
        run_ready(self.in_doubt_in::<Blocking, _>(conn))
    }

    /// [`in_doubt`](Self::in_doubt) in either flavour.
    pub(crate) async fn in_doubt_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<ClaimRecord>, Error> {
        let states = [ClaimState::InProgress, ClaimState::InDoubt];
        let records = self.read(conn, Some(&states), None, i64::MAX).await?;
        let mut in_doubt = Vec::new();
        for record in records {
            // The states are compared as text: only a row with an invalid id is unreadable.
            let record = record?;
            if record.state == ClaimState::InDoubt {
                in_doubt.push(record);
            }
        }
        observe::claims_in_doubt(self.consumer(), in_doubt.len());
        Ok(in_doubt)
    }

    /// Every consumer with a claim, in any state, sorted by name (byte order).
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn consumers<C: InboxConnection>(conn: &mut C) -> Result<Vec<String>, Error> {
        run_ready(Self::consumers_in::<Blocking, _>(conn))
    }

    /// [`consumers`](Self::consumers) in either flavour.
    pub(crate) async fn consumers_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
    ) -> Result<Vec<String>, Error> {
        Ok(C::Backend::consumers(conn, ConsumerRows::Claims).await?)
    }

    /// Up to `limit` of the consumer's claims, in any state, after event id `after` where
    /// given, in event id order, without their payloads (see [`show`](Self::show)). The next
    /// page starts after the last event id of this one; a page shorter than `limit` is the
    /// last.
    ///
    /// A row this version cannot read (a state it does not know, an invalid event id) is
    /// listed in its place as an `Err` naming the table, the key and the text, never left
    /// out; it sorts by its stored event id as the others do.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn list<C: InboxConnection>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<ClaimRecord, CorruptRow>>, Error> {
        run_ready(self.list_in::<Blocking, _>(conn, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Result<ClaimRecord, CorruptRow>>, Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(conn, None, after, limit).await
    }

    /// The claim of `event_id`, if there is one, with its payload.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidEventId`]; [`Error::CorruptRow`] when its row cannot be read as it
    /// is; [`Error::Database`].
    pub fn show<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
    ) -> Result<Option<ClaimRecord>, Error> {
        let event_id = event_id.into_event_id()?;
        run_ready(self.show_in::<Blocking, _>(conn, &event_id))
    }

    /// [`show`](Self::show) in either flavour.
    pub(crate) async fn show_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        event_id: &EventId,
    ) -> Result<Option<ClaimRecord>, Error> {
        let key = [
            ("consumer", self.consumer()),
            ("event_id", event_id.as_str()),
        ];
        let row = C::Backend::claim(conn, (self.consumer(), event_id.as_str()), false)
            .await
            .map_err(|e| match crate::state::unreadable(e, &key) {
                Ok(corrupt) => Error::CorruptRow(corrupt),
                Err(e) => Error::Database(e),
            })?;
        Ok(row
            .map(|row| ClaimRecord::from_row(self.consumer(), row, now()))
            .transpose()?)
    }

    /// Resolves the claim of `event_id`, in doubt, as `resolution` says; `audit` says who
    /// decided and why, and is kept on the claim. Returns the claim as it now stands.
    ///
    /// A completion by the claim's holder that arrives later still stands over a retry or an
    /// abandonment (it shows the side effect did happen), but not over a completion. A retry
    /// re-runs the side effect on the next delivery: choose it when the side effect did not
    /// happen, or when the downstream service deduplicates its idempotency key.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use std::time::Duration;
    /// use diesel::prelude::*;
    /// use diesel_inbox::{claim::{ClaimState, Claimed, Resolution}, Audit, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let charges = Inbox::new("billing")?.claims().lease(Duration::from_millis(1));
    ///
    /// // A worker claims, charges the card, and dies before completing.
    /// let Claimed::Acquired(claim) = charges.claim(&mut conn, "order-7:charge")? else { panic!() };
    /// std::mem::forget(claim);
    /// std::thread::sleep(Duration::from_millis(5));
    ///
    /// let doubt = &charges.in_doubt(&mut conn)?[0];
    /// // Ops find ch_81 at the payment provider under doubt.idempotency_key.
    /// let audit = Audit::new("ops@example.com", "charge ch_81 found at the provider")?;
    /// let resolved = charges.resolve(&mut conn, "order-7:charge", Resolution::Completed("ch_81".into()), &audit)?;
    /// assert_eq!(resolved.state, ClaimState::Completed);
    /// let Claimed::Completed(done) = charges.claim(&mut conn, "order-7:charge")? else { panic!() };
    /// assert_eq!(done.result::<String>()?, "ch_81");
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`AdminError::ClaimNotFound`]; [`AdminError::ClaimNotInDoubt`] for a claim whose
    /// holder's lease still runs or that is settled already; [`AdminError::Inbox`] for an
    /// invalid event id and the database's errors.
    pub fn resolve<C: InboxConnection>(
        &self,
        conn: &mut C,
        event_id: impl IntoEventId,
        resolution: Resolution,
        audit: &Audit,
    ) -> Result<ClaimRecord, AdminError> {
        let event_id = event_id.into_event_id()?;
        run_ready(self.resolve_in::<Blocking, _>(conn, &event_id, resolution, audit))
    }

    /// [`resolve`](Self::resolve) in either flavour.
    pub(crate) async fn resolve_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        event_id: &EventId,
        resolution: Resolution,
        audit: &Audit,
    ) -> Result<ClaimRecord, AdminError> {
        let scope = engine::scope_of(conn)?;
        let subject = self.inbox.subject(Some(event_id.as_str()));
        let state = resolution.state();
        let result = match resolution {
            Resolution::Completed(value) => Some(value.to_string()),
            Resolution::Retry | Resolution::Abandon => None,
        };
        let body = Resolve {
            claims: self,
            event_id,
            state,
            result: result.as_deref(),
            audit,
        };
        let policy = self.inbox.retry_policy();
        let record = engine::run(conn, scope, policy, subject, body)
            .await
            .map_err(Failure::into_error)?;
        observe::claim_transition(self.consumer(), state);
        info!(
            consumer = self.consumer(),
            event_id = event_id.as_str(),
            state = %state,
            actor = audit.actor(),
            reason = audit.reason(),
            "claim resolved"
        );
        Ok(record)
    }

    async fn read<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        states: Option<&[ClaimState]>,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Result<ClaimRecord, CorruptRow>>, Error> {
        let now = now();
        let consumer = self.consumer();
        let rows = C::Backend::claims(conn, consumer, states, after, limit).await?;
        Ok(rows
            .into_iter()
            .map(|row| match row {
                Ok(row) => ClaimRecord::from_row(consumer, row, now),
                Err(bad) => Err(bad.in_row(&[("consumer", consumer)], "event_id")),
            })
            .collect())
    }
}

/// [`Claims::resolve`]'s transaction: the claim read under its lock, checked in doubt,
/// settled as the resolution says with the audit, and read back.
struct Resolve<'a> {
    claims: &'a Claims,
    event_id: &'a EventId,
    state: ClaimState,
    result: Option<&'a str>,
    audit: &'a Audit,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Resolve<'_> {
    type Output = ClaimRecord;
    type Error = AdminError;

    async fn attempt(&mut self, conn: &mut C) -> Result<ClaimRecord, Failure<AdminError>> {
        let consumer = self.claims.consumer();
        let key = (consumer, self.event_id.as_str());
        let now = now();
        let not_found = || {
            Failure::refused(AdminError::ClaimNotFound {
                event_id: self.event_id.clone(),
            })
        };
        let row = C::Backend::claim(conn, key, true)
            .await?
            .ok_or_else(not_found)?;
        if let Err(state) = verdict::resolvable(&row, now) {
            return Err(Failure::refused(AdminError::ClaimNotInDoubt {
                event_id: self.event_id.clone(),
                state,
            }));
        }
        let change = ClaimChange {
            state: self.state,
            acquire: false,
            lease_until: None,
            result: self.result,
            note: None,
            audit: Some(self.audit),
            now,
        };
        // The row is locked: it is as it was read.
        C::Backend::update_claim(conn, key, row.attempt, &[row.state], &change).await?;
        let row = C::Backend::claim(conn, key, false)
            .await?
            .ok_or_else(not_found)?;
        ClaimRecord::from_row(consumer, row, now).map_err(|c| Failure::Inbox(c.into()))
    }
}

/// Who resolved the claim and why, when ops did.
fn audit_of(row: &ClaimRow) -> Option<Audit> {
    match (&row.resolved_by, &row.resolution) {
        (Some(actor), Some(reason)) => Audit::new(actor.clone(), reason.clone()).ok(),
        _ => None,
    }
}
