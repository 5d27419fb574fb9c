//! The inbox as the kit reads it, in either flavour: each check is written once, over
//! futures, and the sync inbox answers with futures that are ready at once.

use std::future::{ready, Future};
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use diesel_inbox::{
    dead_letter::DeadLetter, AdminError, Error, EventId, Inbox, InboxConnection, InboxRecord,
};

/// What the kit reads of an inbox on connections `C`.
pub(crate) trait Reach<C> {
    /// `id`'s row of this consumer.
    fn record(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<Option<InboxRecord>, Error>>;

    /// Up to `limit` rows of the whole table, every consumer's.
    fn records(
        &self,
        conn: &mut C,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<InboxRecord>, Error>>;

    /// `id`'s dead letter, with its history.
    fn dead_letter(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<DeadLetter, AdminError>>;
}

impl<C: InboxConnection> Reach<C> for Inbox {
    fn record(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<Option<InboxRecord>, Error>> {
        ready(Inbox::record(self, conn, id))
    }

    fn records(
        &self,
        conn: &mut C,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<InboxRecord>, Error>> {
        ready(Inbox::records(conn, limit))
    }

    fn dead_letter(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<DeadLetter, AdminError>> {
        ready(self.dead_letters().show(conn, id))
    }
}

#[cfg(feature = "async")]
impl<C: diesel_inbox::asynch::AsyncInboxConnection> Reach<C> for diesel_inbox::asynch::Inbox {
    fn record(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<Option<InboxRecord>, Error>> {
        diesel_inbox::asynch::Inbox::record(self, conn, id)
    }

    fn records(
        &self,
        conn: &mut C,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<InboxRecord>, Error>> {
        diesel_inbox::asynch::Inbox::records(conn, limit)
    }

    fn dead_letter(
        &self,
        conn: &mut C,
        id: &EventId,
    ) -> impl Future<Output = Result<DeadLetter, AdminError>> {
        let letters = self.dead_letters();
        let id = id.clone();
        async move { letters.show(conn, id).await }
    }
}

/// The value of a future the sync flavour built: one that is ready when first polled.
///
/// # Panics
///
/// When it is not, which would be a defect of the kit: only the async flavour waits.
pub(crate) fn now<T>(future: impl Future<Output = T>) -> T {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a sync check waited"),
    }
}
