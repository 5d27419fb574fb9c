//! What the inbox table records of an event: a settled event stays observable, its
//! duplicates counted on it.

use std::fmt;

use chrono::{DateTime, Utc};

use super::Inbox;
use crate::rows::InboxRow;
use crate::sql::{Db, InboxSql, Sql};
use crate::state::InboxState;
use crate::{Error, EventId};

/// What the inbox table records about one event of one consumer.
///
/// A row means the event was settled: processed, or given up on by the failure policy
/// (dead-lettered, perhaps discarded since). A delivery whose handler failed leaves no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxRecord {
    row_consumer: String,
    row_event_id: String,
    state: InboxState,
    processed_at: DateTime<Utc>,
    last_seen_at: DateTime<Utc>,
    deliveries: u64,
}

impl From<InboxRow> for InboxRecord {
    fn from(row: InboxRow) -> Self {
        Self {
            row_consumer: row.consumer,
            row_event_id: row.event_id,
            state: row.state,
            processed_at: row.processed_at,
            last_seen_at: row.last_seen_at,
            deliveries: row.deliveries.unsigned_abs(),
        }
    }
}

impl InboxRecord {
    /// The consumer the row belongs to.
    pub fn consumer(&self) -> &str {
        &self.row_consumer
    }

    /// The event id, as stored.
    pub fn event_id(&self) -> &str {
        &self.row_event_id
    }

    /// `true` when the event took effect; `false` when the failure policy gave up on it.
    pub fn is_processed(&self) -> bool {
        self.state == InboxState::Processed
    }

    /// `true` when the event is dead-lettered or was discarded: its effect never ran.
    pub fn is_dead_lettered(&self) -> bool {
        matches!(self.state, InboxState::DeadLettered | InboxState::Discarded)
    }

    /// When the event took effect, or was dead-lettered.
    pub fn processed_at(&self) -> DateTime<Utc> {
        self.processed_at
    }

    /// When the latest delivery of the event reached the inbox.
    pub fn last_seen_at(&self) -> DateTime<Utc> {
        self.last_seen_at
    }

    /// Deliveries the row counts: the one that settled the event and every one after it.
    /// Deliveries whose handler failed rolled back and are not counted.
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }
}

impl fmt::Display for InboxRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{{ consumer: {:?}, event_id: {:?}, state: {}, processed_at: {}, last_seen_at: {}, deliveries: {} }}",
            self.row_consumer,
            self.row_event_id,
            self.state.as_str(),
            self.processed_at,
            self.last_seen_at,
            self.deliveries
        )
    }
}

impl<K> Inbox<K> {
    /// [`Inbox::record`] and [`crate::asynch::Inbox::record`], in either flavour.
    pub(crate) async fn record_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        event_id: &EventId,
    ) -> Result<Option<InboxRecord>, Error> {
        let key = (self.consumer(), event_id.as_str());
        let row = C::Backend::inbox_row(conn, key).await?;
        Ok(row.map(InboxRecord::from))
    }

    /// [`Inbox::records`] and [`crate::asynch::Inbox::records`], in either flavour.
    pub(crate) async fn records_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        limit: usize,
    ) -> Result<Vec<InboxRecord>, Error> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = C::Backend::inbox_rows(conn, limit).await?;
        Ok(rows.into_iter().map(InboxRecord::from).collect())
    }
}
