//! What ops read from the outbox and do with it: records, totals, retrying a failed row, and
//! retention for published rows.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::info;

use super::sql::{OutboxRow, OutboxSql};
use super::{Outbox, OutboxState};
use crate::duration::{before, now};
use crate::engine::run_ready;
use crate::replay::sql::ReplaySql;
use crate::sql::{Blocking, Db, Sql};
use crate::state::CorruptRow;
use crate::{observe, AdminError, Audit, Error, InboxConnection};

/// One outbox row, as ops see it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OutboxRecord {
    /// Enqueue order.
    pub position: i64,
    /// The event id.
    pub event_id: String,
    /// Where it is published.
    pub topic: String,
    /// The aggregate's type.
    pub aggregate_type: String,
    /// The aggregate's id.
    pub aggregate_id: String,
    /// The event type.
    pub event_type: String,
    /// Where it stands.
    pub state: OutboxState,
    /// Failed publish attempts.
    pub attempts: i64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub enqueued_at: DateTime<Utc>,
    /// When the relay may take it next (its backoff).
    pub available_at: DateTime<Utc>,
    /// When the broker accepted it.
    pub published_at: Option<DateTime<Utc>>,
}

impl From<OutboxRow> for OutboxRecord {
    fn from(row: OutboxRow) -> Self {
        Self {
            position: row.position,
            event_id: row.event_id,
            topic: row.topic,
            aggregate_type: row.aggregate_type,
            aggregate_id: row.aggregate_id,
            event_type: row.event_type,
            state: row.state,
            attempts: row.attempts,
            last_error: row.last_error,
            enqueued_at: row.enqueued_at,
            available_at: row.available_at,
            published_at: row.published_at,
        }
    }
}

/// The outbox's rows per state, and how old the oldest pending one is: the relay's lag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxStats {
    /// Rows waiting for the relay.
    pub pending: i64,
    /// Rows the broker accepted (until retention deletes them).
    pub published: i64,
    /// Rows failed for good, waiting for ops.
    pub failed: i64,
    /// When the oldest pending row was enqueued.
    pub oldest_pending: Option<DateTime<Utc>>,
    /// Rows whose state this version cannot read (a corrupt row, or one a newer version
    /// wrote), counted here instead of failing the stats; `diesel-inbox outbox --all` names
    /// them.
    pub unreadable: i64,
}

impl Outbox {
    /// Up to `limit` rows after position `after`, in position order, in `state` where given.
    ///
    /// A row this version cannot read (a state it does not know) is listed in its place as
    /// an `Err` naming the table, the key (its position, to page on) and the text, never left
    /// out, whatever `state` asks for.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn list<C: InboxConnection>(
        conn: &mut C,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error> {
        run_ready(Self::list_in::<Blocking, _>(conn, state, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        state: Option<OutboxState>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Result<OutboxRecord, CorruptRow>>, Error> {
        let rows = C::Backend::outbox_rows(conn, state, after, limit).await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                row.map(OutboxRecord::from)
                    .map_err(|bad| bad.in_row(&[], "position"))
            })
            .collect())
    }

    /// The row at `position`.
    ///
    /// # Errors
    ///
    /// [`AdminError::OutboxRowNotFound`]; [`AdminError::Inbox`] with [`Error::CorruptRow`] when
    /// the row cannot be read as it is, or with the database's error.
    pub fn record<C: InboxConnection>(
        conn: &mut C,
        position: i64,
    ) -> Result<OutboxRecord, AdminError> {
        run_ready(Self::record_in::<Blocking, _>(conn, position))
    }

    /// [`record`](Self::record) in either flavour.
    pub(crate) async fn record_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        position: i64,
    ) -> Result<OutboxRecord, AdminError> {
        let at = position.to_string();
        C::Backend::outbox_row(conn, position)
            .await
            .map_err(
                |e| match crate::state::unreadable(e, &[("position", &at)]) {
                    Ok(corrupt) => AdminError::from(corrupt),
                    Err(e) => AdminError::from(e),
                },
            )?
            .map(OutboxRecord::from)
            .ok_or(AdminError::OutboxRowNotFound { position })
    }

    /// Makes the failed row at `position` pending again with a fresh set of attempts, once
    /// what failed it is fixed; `audit` says who and why (logged). It is published after the
    /// rows of its aggregate that were published while it was failed.
    ///
    /// # Errors
    ///
    /// [`AdminError::OutboxRowNotFound`], [`AdminError::OutboxRowNotFailed`];
    /// [`AdminError::Inbox`] for the database's errors.
    pub fn retry<C: InboxConnection>(
        conn: &mut C,
        position: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        run_ready(Self::retry_in::<Blocking, _>(conn, position, audit))
    }

    /// [`retry`](Self::retry) in either flavour.
    pub(crate) async fn retry_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        position: i64,
        audit: &Audit,
    ) -> Result<(), AdminError> {
        if C::Backend::retry_outbox(conn, position, now()).await? {
            info!(
                position,
                actor = audit.actor(),
                reason = audit.reason(),
                "failed outbox row made pending again"
            );
            return Ok(());
        }
        let record = Self::record_in(conn, position).await?;
        Err(AdminError::OutboxRowNotFailed {
            position,
            state: record.state,
        })
    }

    /// Deletes the rows published more than `older_than` ago, in batches of `batch` rows (at
    /// least 1); returns how many. Pending and failed rows are never deleted. The aggregates'
    /// order locks (MySQL/MariaDB) that no enqueue used since then go too.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn prune<C: InboxConnection>(
        conn: &mut C,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, Error> {
        run_ready(Self::prune_in::<Blocking, _>(conn, older_than, batch))
    }

    /// [`prune`](Self::prune) in either flavour: each delete is a statement of its own, run
    /// until one deletes fewer than a batch.
    pub(crate) async fn prune_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        older_than: Duration,
        batch: usize,
    ) -> Result<u64, Error> {
        let cutoff = before(now(), older_than);
        let limit = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        // Rows an open replay of the outbox reads wait for it to be decided.
        let ranges = C::Backend::open_replay_ranges(conn, crate::replay::OUTBOX_SOURCE).await?;
        let below = crate::replay::outbox_kept_from(&ranges);
        let mut deleted = 0_u64;
        loop {
            let n = C::Backend::delete_published_outbox(conn, cutoff, below, limit).await?;
            deleted += n as u64;
            if !full(n, limit) {
                break;
            }
        }
        observe::pruned("outbox", "diesel_inbox_outbox", deleted);
        // The aggregates' order locks that no enqueue used since then (MySQL/MariaDB).
        let mut idle = 0_u64;
        loop {
            let n = C::Backend::delete_idle_outbox_aggregates(conn, cutoff, limit).await?;
            idle += n as u64;
            if !full(n, limit) {
                break;
            }
        }
        observe::pruned("outbox", "diesel_inbox_outbox_aggregates", idle);
        Ok(deleted)
    }

    /// The rows per state and the oldest pending row; also sets the gauge
    /// `diesel_inbox_outbox_pending` (with the `metrics` feature).
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn stats<C: InboxConnection>(conn: &mut C) -> Result<OutboxStats, Error> {
        run_ready(Self::stats_in::<Blocking, _>(conn))
    }

    /// [`stats`](Self::stats) in either flavour.
    pub(crate) async fn stats_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
    ) -> Result<OutboxStats, Error> {
        let mut stats = OutboxStats::default();
        for (state, rows, oldest) in C::Backend::outbox_totals(conn).await? {
            match state {
                Ok(OutboxState::Pending) => {
                    stats.pending = rows;
                    stats.oldest_pending = oldest;
                }
                Ok(OutboxState::Published) => stats.published = rows,
                Ok(OutboxState::Failed) => stats.failed = rows,
                Err(_) => stats.unreadable += rows,
            }
        }
        observe::outbox_pending(stats.pending);
        Ok(stats)
    }
}

/// Whether a delete of up to `limit` rows took `n`, all it could: there may be more.
fn full(n: usize, limit: i64) -> bool {
    i64::try_from(n).unwrap_or(i64::MAX) >= limit
}
