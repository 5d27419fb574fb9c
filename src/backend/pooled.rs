//! r2d2 pooled connections run the statements of the connection they wrap.

use diesel::r2d2::{ManageConnection, PooledConnection, R2D2Connection};

use super::sealed::HasBackend;
use super::InboxConnection;

impl<M> HasBackend for PooledConnection<M>
where
    M: ManageConnection,
    M::Connection: InboxConnection + R2D2Connection + Send + 'static,
{
    type Sql = <M::Connection as HasBackend>::Sql;

    fn backend(&mut self) -> &mut Self::Sql {
        (**self).backend()
    }
}
