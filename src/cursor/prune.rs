//! Pruning by cursor: the id rows of sequences at or below the watermark, which the cursor
//! alone now tells apart from new ones ([`Cursor::prune_events`]).

use crate::decide::{Failure, Scope};
use crate::engine::{self, run_ready, Body};
use crate::sql::{Blocking, Db, RetentionSql, Sql};
use crate::{AdminError, Error, InboxConnection};

use super::sql::CursorSql;
use super::Cursor;

impl Cursor {
    /// Removes the consumer's processed id rows (kept by [`Sequenced::event`]) whose sequence
    /// is at or below the watermark, in batches of `batch_size`, each in a short transaction of
    /// its own: redeliveries of those sequences are duplicates by the cursor, whatever the
    /// clock says. Dead-lettered and discarded rows stay. Returns how many rows it removed.
    ///
    /// [`Sequenced::event`]: crate::cursor::Sequenced::event
    ///
    /// # Errors
    ///
    /// [`Error::InsideTransaction`] inside an open transaction, and the database's errors,
    /// inside [`AdminError::Inbox`].
    ///
    /// # Panics
    ///
    /// When `batch_size` is 0.
    pub fn prune_events<C: InboxConnection>(
        &self,
        conn: &mut C,
        batch_size: usize,
    ) -> Result<u64, AdminError> {
        run_ready(self.prune_events_in::<Blocking, _>(conn, batch_size))
    }

    /// [`prune_events`](Self::prune_events) in either flavour.
    pub(crate) async fn prune_events_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        batch_size: usize,
    ) -> Result<u64, AdminError> {
        assert!(batch_size > 0, "batch_size must be at least 1");
        if engine::scope_of(conn)? != Scope::TopLevel {
            return Err(Error::InsideTransaction {
                operation: "Cursor::prune_events",
            }
            .into());
        }
        let Some(watermark) = C::Backend::cursor(conn, self.key())
            .await?
            .and_then(|row| row.watermark)
        else {
            return Ok(0);
        };
        let mut removed = 0;
        loop {
            let subject = self.inbox.subject(None);
            let batch = Batch {
                cursor: self,
                watermark,
                size: batch_size,
            };
            let policy = self.inbox.retry_policy();
            let (deleted, more) = engine::run(conn, Scope::TopLevel, policy, subject, batch)
                .await
                .map_err(Failure::into_error)?;
            removed += deleted as u64;
            if !more {
                return Ok(removed);
            }
        }
    }
}

/// One batch's transaction: the next `size` id rows at or below `watermark`, and their
/// failures. Returns how many rows it deleted, and whether there may be more.
struct Batch<'a> {
    cursor: &'a Cursor,
    watermark: i64,
    size: usize,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Batch<'_> {
    type Output = (usize, bool);
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<(usize, bool), Failure<Error>> {
        let key = self.cursor.key();
        let limit = i64::try_from(self.size).unwrap_or(i64::MAX);
        let batch = C::Backend::sequenced_events(tx, key, self.watermark, limit).await?;
        let Some(&(last, _)) = batch.last() else {
            return Ok((0, false));
        };
        let ids: Vec<&str> = batch.iter().map(|(_, id)| id.as_str()).collect();
        let deleted = C::Backend::delete_sequenced_events(tx, key, last, &ids).await?;
        C::Backend::delete_failures_of(tx, self.cursor.consumer(), &ids).await?;
        Ok((deleted, batch.len() == self.size))
    }
}
