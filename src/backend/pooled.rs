//! r2d2 pooled connections run the statements of the connection they wrap.

use diesel::r2d2::{ManageConnection, PooledConnection, R2D2Connection};

use super::sealed::HasInboxSql;
use super::InboxConnection;

impl<M> HasInboxSql for PooledConnection<M>
where
    M: ManageConnection,
    M::Connection: InboxConnection + R2D2Connection + Send + 'static,
{
}
