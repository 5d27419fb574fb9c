//! The gap ledger: every range of sequences a consumer's cursors skipped, listed, resolved by
//! an operator, and read back by the cursor to move its watermark.

use tracing::info;

use super::sql::{CursorSql, GapRow};
use super::watermark::Stream;
use super::{Gap, GapState};
use crate::decide::Failure;
use crate::engine::{self, run_ready, Body};
use crate::rows::Listed;
use crate::sql::{Blocking, Db, Sql};
use crate::state::CorruptRow;
use crate::{AdminError, Audit, Error, Inbox, InboxConnection, RetryPolicy};

/// A consumer's gap ledger, of every stream or of one: [`Inbox::gaps`], [`Cursor::gaps`](crate::cursor::Cursor::gaps).
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{cursor::{GapState, Resume}, Audit, Inbox};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let inbox = Inbox::new("projector")?;
/// let cursor = inbox.cursor("orders-0")?;
/// let apply = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
/// cursor.process(&mut conn, 1, apply)?;
/// cursor.process(&mut conn, 5, apply)?; // 2..=4 missing
///
/// // A row this version cannot read would come back in its place as an `Err` naming it.
/// let gap = inbox.gaps().open(&mut conn)?.remove(0)?;
/// assert_eq!(cursor.resume(&mut conn)?, Resume::At(2));
/// let audit = Audit::new("ops@example.com", "2..=4 were test messages, deleted upstream")?;
/// let resolved = inbox.gaps().resolve(&mut conn, gap.id, &audit)?;
/// assert_eq!(resolved.state, GapState::Resolved);
/// assert_eq!(cursor.resume(&mut conn)?, Resume::At(6));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gaps {
    consumer: String,
    stream: Option<String>,
}

impl Inbox {
    /// The gap ledger of this consumer's cursors, every stream.
    pub fn gaps(&self) -> Gaps {
        Gaps::new(self.consumer(), None)
    }
}

impl Gaps {
    pub(crate) fn new(consumer: &str, stream: Option<&str>) -> Self {
        Self {
            consumer: consumer.to_owned(),
            stream: stream.map(str::to_owned),
        }
    }

    /// The open gaps, by stream and first sequence.
    ///
    /// A row this version cannot read (a cause or state it does not know) is listed in its
    /// place as an `Err` naming the table, the key and the text, never left out; one whose
    /// state it cannot read may be open, and is listed too.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn open<C: InboxConnection>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        run_ready(self.open_in::<Blocking, _>(conn))
    }

    /// [`open`](Self::open) in either flavour.
    pub(crate) async fn open_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        let (consumer, stream) = (&self.consumer, self.stream.as_deref());
        let rows = C::Backend::gaps(conn, consumer, stream, Some(GapState::Open)).await?;
        Ok(self.in_place(rows))
    }

    /// Up to `limit` gaps, open or closed, after gap id `after` (0: from the first), in id
    /// order (the order they were detected). The next page starts after the last id of this
    /// one; a page shorter than `limit` is the last.
    ///
    /// A row this version cannot read (a cause or state it does not know) is listed in its
    /// place as an `Err` naming the table, the key (its id, to page on) and the text, never
    /// left out.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn list<C: InboxConnection>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        run_ready(self.list_in::<Blocking, _>(conn, after, limit))
    }

    /// [`list`](Self::list) in either flavour.
    pub(crate) async fn list_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Result<Gap, CorruptRow>>, Error> {
        let (consumer, stream) = (&self.consumer, self.stream.as_deref());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = C::Backend::gap_page(conn, consumer, stream, None, after, limit).await?;
        Ok(self.in_place(rows))
    }

    /// Each row as a gap, or as the corrupt row it is, in place.
    fn in_place(&self, rows: Vec<Listed<GapRow>>) -> Vec<Result<Gap, CorruptRow>> {
        rows.into_iter()
            .map(|row| named(&self.consumer, row).map(Gap::from_row))
            .collect()
    }

    /// Resolves the open gap `id`: its sequences are given up (or were recovered some other
    /// way), `audit` says who decided and why, and the watermark moves past it. A late
    /// arrival of one of its sequences is a duplicate from then on. Returns the gap as it
    /// now stands.
    ///
    /// # Errors
    ///
    /// [`AdminError::GapNotFound`] when this consumer (and stream) has no gap `id`;
    /// [`AdminError::GapNotOpen`] when it is filled or resolved already; [`AdminError::Inbox`]
    /// for the database's errors.
    pub fn resolve<C: InboxConnection>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<Gap, AdminError> {
        run_ready(self.resolve_in::<Blocking, _>(conn, id, audit))
    }

    /// [`resolve`](Self::resolve) in either flavour.
    pub(crate) async fn resolve_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        id: i64,
        audit: &Audit,
    ) -> Result<Gap, AdminError> {
        let scope = engine::scope_of(conn)?;
        let subject = engine::Subject {
            consumer: &self.consumer,
            event_id: None,
        };
        let body = Resolve {
            gaps: self,
            id,
            audit,
        };
        let gap = engine::run(conn, scope, &RetryPolicy::default(), subject, body)
            .await
            .map_err(Failure::into_error)?;
        info!(
            consumer = self.consumer,
            stream = gap.stream,
            gap = id,
            actor = audit.actor(),
            reason = audit.reason(),
            "gap resolved"
        );
        Ok(gap)
    }
}

/// [`Gaps::resolve`]'s transaction: the gap read and checked open, the stream's ledger read
/// under the cursor row's lock, the gap closed with the audit and the watermark moved.
struct Resolve<'a> {
    gaps: &'a Gaps,
    id: i64,
    audit: &'a Audit,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Resolve<'_> {
    type Output = Gap;
    type Error = AdminError;

    async fn attempt(&mut self, conn: &mut C) -> Result<Gap, Failure<AdminError>> {
        let Self { gaps, id, audit } = *self;
        let not_found = || Failure::refused(AdminError::GapNotFound { id });
        let at = id.to_string();
        let (consumer, stream, state) = C::Backend::gap_by_id(conn, id)
            .await
            .map_err(|e| match crate::state::unreadable(e, &[("id", &at)]) {
                Ok(corrupt) => Failure::Inbox(corrupt.into()),
                Err(e) => Failure::Database(e),
            })?
            .ok_or_else(not_found)?;
        if consumer != gaps.consumer || gaps.stream.as_ref().is_some_and(|s| *s != stream) {
            return Err(not_found());
        }
        if state != GapState::Open {
            return Err(Failure::refused(AdminError::GapNotOpen { id, state }));
        }
        let key = (consumer.as_str(), stream.as_str());
        // The cursor row's lock orders this with the stream's deliveries.
        let high = C::Backend::cursor(conn, key)
            .await?
            .and_then(|row| row.high);
        let rows = C::Backend::gaps(conn, &consumer, Some(&stream), Some(GapState::Open)).await?;
        let open = open_gaps(&consumer, rows).map_err(|corrupt| Failure::Inbox(corrupt.into()))?;
        let Some(row) = open.iter().find(|gap| gap.id == id).cloned() else {
            // A delivery filled it between the two reads.
            let state = C::Backend::gap_by_id(conn, id)
                .await?
                .map_or(GapState::Filled, |g| g.2);
            return Err(Failure::refused(AdminError::GapNotOpen { id, state }));
        };
        let mut ledger = Stream::new(high, open);
        ledger.resolve(id);
        let now = crate::duration::now();
        C::Backend::close_gap(conn, id, GapState::Resolved, Some(audit), now).await?;
        let (watermark, high) = (ledger.watermark(), ledger.high());
        C::Backend::save_cursor(conn, key, watermark, high, now).await?;
        Ok(Gap::resolved(row, audit, now))
    }
}

/// A stream's open gaps, as the cursor reads them to move its watermark: one this version
/// cannot read is the [`CorruptRow`] it is, never guessed open or closed.
pub(crate) fn open_gaps(
    consumer: &str,
    rows: Vec<Listed<GapRow>>,
) -> Result<Vec<GapRow>, CorruptRow> {
    rows.into_iter().map(|row| named(consumer, row)).collect()
}

/// The gap row, or the consumer's row that this version cannot read, named by its id.
fn named(consumer: &str, row: Listed<GapRow>) -> Result<GapRow, CorruptRow> {
    row.map_err(|bad| bad.in_row(&[("consumer", consumer)], "id"))
}
