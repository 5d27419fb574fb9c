//! r2d2 pooled connections run the inbox of the connection they wrap.

use chrono::{DateTime, Utc};
use diesel::r2d2::{ManageConnection, PooledConnection, R2D2Connection};
use diesel::QueryResult;

use super::sealed::{InboxBackend, Recorded};
use crate::error::MigrationError;

impl<M> InboxBackend for PooledConnection<M>
where
    M: ManageConnection,
    M::Connection: InboxBackend + R2D2Connection + Send + 'static,
{
    fn begin_top_level(&mut self) -> QueryResult<()> {
        (**self).begin_top_level()
    }

    fn record_delivery(
        &mut self,
        consumer: &str,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> QueryResult<Recorded> {
        (**self).record_delivery(consumer, event_id, now)
    }

    fn transaction_is_alive(&mut self) -> QueryResult<bool> {
        (**self).transaction_is_alive()
    }

    fn is_contention(error: &diesel::result::Error) -> bool {
        M::Connection::is_contention(error)
    }

    fn apply_migrations(&mut self) -> Result<usize, MigrationError> {
        (**self).apply_migrations()
    }
}
