//! What keeps a dropped transaction from going back into use.

use std::marker::PhantomData;

use crate::sql::Db;

/// The connection of an attempt whose transaction level may be open. Dropped before
/// [`close`](Self::close), because the future driving the attempt was dropped at an await
/// point (a timeout, a `select!`, a shutdown) or the inbox's own code panicked, it marks the
/// connection's transaction manager broken: the server's transaction is still open on the
/// connection, with whatever it wrote and the locks it holds, and nothing will end it. A
/// broken connection refuses the next transaction, and pools discard it, which ends the
/// server's transaction with the session.
pub(super) struct Open<'c, F, C: Db<F>> {
    conn: &'c mut C,
    armed: bool,
    flavour: PhantomData<fn() -> F>,
}

impl<'c, F, C: Db<F>> Open<'c, F, C> {
    /// Guards `conn` from before its level opens.
    pub(super) fn arm(conn: &'c mut C) -> Self {
        Self {
            conn,
            armed: true,
            flavour: PhantomData,
        }
    }

    /// The guarded connection.
    pub(super) fn conn(&mut self) -> &mut C {
        self.conn
    }

    /// The attempt ran to its end (committed, rolled back, or failed in a way the
    /// transaction manager knows of): nothing is left open that it does not count.
    pub(super) fn close(mut self) {
        self.armed = false;
    }
}

impl<F, C: Db<F>> Drop for Open<'_, F, C> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!("an inbox transaction was dropped while open; its connection is marked broken, and its transaction ends when the connection closes");
            self.conn.poison();
        }
    }
}
