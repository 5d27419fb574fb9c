//! The replay scenarios' handler, as both flavours take it.

use std::collections::HashSet;

use diesel_inbox::replay::{self, Replayed};
use diesel_inbox::{claim::Claimed, envelope::Envelope, outbox, Error, Inbox};

use super::EffectConn;
#[cfg(feature = "async")]
use super::Tx;
#[cfg(feature = "async")]
use diesel_inbox::asynch::{self, AsyncInboxConnection};

/// What a replayed event's row in `effects` starts with.
pub(crate) const SHADOW: &str = "shadow:";

/// The topic a [`ReplayLedger`] with side effects enqueues its follow-up to.
pub(crate) const FOLLOW_UP: &str = "points.notified";

/// The consumer whose claims a [`ReplayLedger`] with side effects makes.
const CLAIMANT: &str = "points-rebuild";

/// A replay handler for the scenarios: each event writes `shadow:{id}` into `effects`; the
/// ids in `failing` fail with a counted error instead.
#[derive(Debug, Default)]
pub(crate) struct ReplayLedger {
    /// Event ids whose apply fails.
    pub(crate) failing: HashSet<String>,
    /// Whether each event has side effects as a live handler makes them: `apply` enqueues a
    /// follow-up to [`FOLLOW_UP`] through [`Replayed::topic`], and `after` claims the event's
    /// side effect through [`Replayed::claims`]; a replay that allows neither suppresses both.
    pub(crate) side_effects: bool,
}

impl ReplayLedger {
    /// The row it writes for `event`, or the failure.
    fn row(&self, event: &Envelope) -> Result<String, Error> {
        let id = event.id().as_str();
        if self.failing.contains(id) {
            return Err(Error::Outbox(outbox::Refused::InvalidEnvelope(format!(
                "the ledger refuses {id}"
            ))));
        }
        Ok(format!("{SHADOW}{id}"))
    }

    /// The follow-up `apply` enqueues, asked of the replay: its topic, if the replay lets it
    /// through. The scenarios' replays drop it, so it never reaches the outbox.
    fn follow_up(&self, replay: &Replayed) {
        if self.side_effects {
            let topic = replay.topic(FOLLOW_UP);
            assert_eq!(topic, None, "the scenarios' replays drop enqueues");
        }
    }
}

/// What the claim `after` makes came to: suppressed, as the scenarios' replays call nothing.
fn assert_suppressed<H: std::fmt::Debug>(claimed: &Claimed<H>) {
    assert!(matches!(claimed, Claimed::Suppressed(_)), "{claimed:?}");
}

impl<C: EffectConn> replay::ReplayHandler<C> for ReplayLedger {
    type Error = Error;

    fn apply(&mut self, tx: &mut C, event: &Envelope, replay: &Replayed) -> Result<(), Error> {
        let row = self.row(event)?;
        self.follow_up(replay);
        Ok(tx.write_effect(&row)?)
    }

    fn after(&mut self, conn: &mut C, event: &Envelope, replay: &Replayed) -> Result<(), Error> {
        if self.side_effects {
            let claims = replay.claims(&Inbox::new(CLAIMANT)?.claims());
            assert_suppressed(&claims.claim(conn, event.id().clone())?);
        }
        Ok(())
    }
}

#[cfg(feature = "async")]
impl<C: Tx + AsyncInboxConnection> asynch::ReplayHandler<C> for ReplayLedger {
    type Error = Error;

    async fn apply(
        &mut self,
        tx: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> Result<(), Error> {
        let row = self.row(event)?;
        self.follow_up(replay);
        Ok(tx.write_effect(&row).await?)
    }

    async fn after(
        &mut self,
        conn: &mut C,
        event: &Envelope,
        replay: &Replayed,
    ) -> Result<(), Error> {
        if self.side_effects {
            let claims = replay.async_claims(&asynch::Inbox::new(CLAIMANT)?.claims());
            assert_suppressed(&claims.claim(conn, event.id().clone()).await?);
        }
        Ok(())
    }
}
