//! What keeps a connection holding session state that a dropped future left behind (an open
//! transaction, a session-level lock) from going back into use.

use std::marker::PhantomData;

use crate::sql::Db;

/// A connection that holds something only a later statement of the same future ends: an
/// attempt's open transaction level, or a session-level lock until its release. Dropped
/// before [`close`](Self::close), because the future was dropped at an await point (a
/// timeout, a `select!`, a shutdown) or the inbox's own code panicked, it marks the
/// connection's transaction manager broken: the server still holds the transaction (with
/// whatever it wrote and the locks it took) or the lock, and nothing will end it. A broken
/// connection refuses the next transaction, and pools discard it, which ends both with the
/// session.
pub(crate) struct Open<'c, F, C: Db<F>> {
    conn: &'c mut C,
    /// What the connection holds, for the warning.
    holds: &'static str,
    armed: bool,
    flavour: PhantomData<fn() -> F>,
}

impl<'c, F, C: Db<F>> Open<'c, F, C> {
    /// Guards `conn` from before its level opens.
    pub(super) fn arm(conn: &'c mut C) -> Self {
        Self::holding(conn, "an inbox transaction")
    }

    /// Guards `conn` from before it takes `holds`, a session-level lock.
    pub(crate) fn holding(conn: &'c mut C, holds: &'static str) -> Self {
        Self {
            conn,
            holds,
            armed: true,
            flavour: PhantomData,
        }
    }

    /// The guarded connection.
    pub(crate) fn conn(&mut self) -> &mut C {
        self.conn
    }

    /// What the connection held has ended (committed, rolled back, released, or failed in a
    /// way the transaction manager knows of): nothing is left that it does not count.
    pub(crate) fn close(mut self) {
        self.armed = false;
    }
}

impl<F, C: Db<F>> Drop for Open<'_, F, C> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(
                holds = self.holds,
                "a connection was dropped while it held a transaction or a lock; it is marked broken, and the server ends what it held when the connection closes"
            );
            self.conn.poison();
        }
    }
}
