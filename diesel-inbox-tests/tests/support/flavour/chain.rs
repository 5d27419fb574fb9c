//! The chain scenarios' handler, as both flavours take it.

use std::collections::BTreeMap;

use diesel_inbox::chain::{self, BlockId};
use diesel_inbox::{Error, EventId};

use super::EffectConn;
#[cfg(feature = "async")]
use super::Tx;

/// What a revert writes to `effects`: the event id behind this prefix, a correction row, so
/// that an event's net effect is its rows minus its correction rows.
pub(crate) const REVERTED: &str = "revert:";

/// A chain handler for the scenarios: each apply writes the event id to `effects`, each
/// revert a correction row ([`REVERTED`]); `ancestor` answers from the new branch it holds,
/// by height.
#[derive(Debug, Default)]
pub(crate) struct ChainLedger {
    /// The hashes of the branch being delivered, by height: what `ancestor` answers.
    pub(crate) branch: BTreeMap<u64, String>,
}

impl ChainLedger {
    /// A ledger that names `branch`'s hashes to a fork's walk.
    pub(crate) fn naming(branch: BTreeMap<u64, String>) -> Self {
        Self { branch }
    }
}

impl<C: EffectConn> chain::ChainHandler<C> for ChainLedger {
    type Event = ();
    type Error = Error;

    fn apply(&mut self, tx: &mut C, _: &BlockId, id: &EventId, (): &()) -> Result<(), Error> {
        Ok(tx.write_effect(id.as_str())?)
    }

    fn revert(&mut self, tx: &mut C, _: &BlockId, id: &EventId) -> Result<(), Error> {
        Ok(tx.write_effect(&format!("{REVERTED}{id}"))?)
    }

    fn ancestor(&mut self, height: u64) -> Option<String> {
        self.branch.get(&height).cloned()
    }
}

#[cfg(feature = "async")]
impl<C: Tx> diesel_inbox::asynch::ChainHandler<C> for ChainLedger {
    type Event = ();
    type Error = Error;

    async fn apply(&mut self, tx: &mut C, _: &BlockId, id: &EventId, (): &()) -> Result<(), Error> {
        Ok(tx.write_effect(id.as_str()).await?)
    }

    async fn revert(&mut self, tx: &mut C, _: &BlockId, id: &EventId) -> Result<(), Error> {
        Ok(tx.write_effect(&format!("{REVERTED}{id}")).await?)
    }

    async fn ancestor(&mut self, height: u64) -> Option<String> {
        self.branch.get(&height).cloned()
    }
}
