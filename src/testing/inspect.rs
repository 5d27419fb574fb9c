//! Reading the inbox table back: the rows that tests assert on.

use std::fmt;

use chrono::{DateTime, Utc};
use diesel::QueryResult;

use crate::engine::run_ready;
use crate::rows::InboxRow;
use crate::sql::{Blocking, Db, InboxSql, Sql};
use crate::state::InboxState;
use crate::{Error, EventId, Inbox, InboxConnection, IntoEventId};

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

/// The row the inbox keeps for `event_id` under `inbox`'s consumer, or `None` when the event
/// was never settled.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel_inbox::testing::{inbox_record, TestDatabase};
/// use diesel_inbox::{with_inbox, Inbox};
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// assert_eq!(inbox_record(&mut conn, &Inbox::default(), "evt-1")?, None);
///
/// for _ in 0..3 {
///     let _ = with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
/// }
/// let record = inbox_record(&mut conn, &Inbox::default(), "evt-1")?.expect("processed");
/// assert_eq!(record.deliveries(), 3);
/// # }
/// # Ok::<(), diesel_inbox::Error>(())
/// ```
///
/// # Errors
///
/// [`Error::InvalidEventId`] for an id the inbox would reject, [`Error::Database`] when the
/// table cannot be read.
pub fn inbox_record<C: InboxConnection>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: impl IntoEventId,
) -> Result<Option<InboxRecord>, Error> {
    let event_id = event_id.into_event_id()?;
    run_ready(inbox_record_in::<Blocking, _>(conn, inbox, &event_id))
}

/// [`inbox_record`] in either flavour.
pub(crate) async fn inbox_record_in<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    inbox: &Inbox,
    event_id: &EventId,
) -> Result<Option<InboxRecord>, Error> {
    let key = (inbox.consumer(), event_id.as_str());
    let row = C::Backend::inbox_row(conn, key).await?;
    Ok(row.map(InboxRecord::from))
}

/// Up to `limit` rows of the whole table in key order, for failure messages.
pub(crate) async fn first_records<F, C: Db<F, Backend: Sql>>(
    conn: &mut C,
    limit: usize,
) -> QueryResult<Vec<InboxRecord>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = C::Backend::inbox_rows(conn, limit).await?;
    Ok(rows.into_iter().map(InboxRecord::from).collect())
}
