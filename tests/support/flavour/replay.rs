//! The replay scenarios' handler, as both flavours take it.

use std::collections::HashSet;

use diesel_inbox::replay::{self, Replayed};
use diesel_inbox::{Envelope, Error};

use super::EffectConn;
#[cfg(feature = "async")]
use super::Tx;

/// What a replayed event's row in `effects` starts with.
pub(crate) const SHADOW: &str = "shadow:";

/// A replay handler for the scenarios: each event writes `shadow:{id}` into `effects`; the
/// ids in `failing` fail with a counted error instead.
#[derive(Debug, Default)]
pub(crate) struct ReplayLedger {
    /// Event ids whose apply fails.
    pub(crate) failing: HashSet<String>,
}

impl ReplayLedger {
    /// The row it writes for `event`, or the failure.
    fn row(&self, event: &Envelope) -> Result<String, Error> {
        let id = event.id().as_str();
        if self.failing.contains(id) {
            return Err(Error::InvalidEnvelope(format!("the ledger refuses {id}")));
        }
        Ok(format!("{SHADOW}{id}"))
    }
}

impl<C: EffectConn> replay::ReplayHandler<C> for ReplayLedger {
    type Error = Error;

    fn apply(&mut self, tx: &mut C, event: &Envelope, _: &Replayed) -> Result<(), Error> {
        let row = self.row(event)?;
        Ok(tx.write_effect(&row)?)
    }
}

#[cfg(feature = "async")]
impl<C: Tx> diesel_inbox::asynch::ReplayHandler<C> for ReplayLedger {
    type Error = Error;

    async fn apply(&mut self, tx: &mut C, event: &Envelope, _: &Replayed) -> Result<(), Error> {
        let row = self.row(event)?;
        Ok(tx.write_effect(&row).await?)
    }
}
