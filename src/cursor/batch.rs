//! A run of sequences in one transaction: [`Cursor::process_batch`], written once for both
//! flavours ([`Cursor::process_batch_in`]).

use std::future::Future;

use super::watermark::Verdict;
use crate::decide::{Failure, Scope, Then};
use crate::duration::now;
use crate::engine::{self, run_ready, Body, Effect};
use crate::inbox::Tally;
use crate::sql::{Blocking, Db, Sql};
use crate::{cursor::Gap, HandlerError, InboxConnection, Outcome};

use super::{processed, stored, Cursor};

/// A cursor batch's effect, as the engine calls it: once per sequence not settled yet, with
/// the sequence and its message. A sync closure, or the async flavour's adapter of an async
/// one.
pub(crate) trait SequenceEffect<C, M> {
    /// One sequence's value.
    type Output;
    /// The effect's error.
    type Error;

    /// Runs the effect for `sequence` and its `message`, on the transaction's connection.
    fn call(
        &mut self,
        conn: &mut C,
        sequence: u64,
        message: &M,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>>;
}

impl<C, M, T, E, G> SequenceEffect<C, M> for G
where
    G: FnMut(&mut C, u64, &M) -> Result<T, E>,
{
    type Output = T;
    type Error = E;

    fn call(
        &mut self,
        conn: &mut C,
        sequence: u64,
        message: &M,
    ) -> impl Future<Output = Result<T, E>> {
        std::future::ready(self(conn, sequence, message))
    }
}

impl Cursor {
    /// Offers a run of sequences in one transaction that locks and writes the cursor once:
    /// `effect` runs for each one not settled yet, in the order given. Returns one outcome per
    /// sequence, in order. An error (the effect's, or a refusal) rolls back the whole run.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::Inbox;
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let orders = Inbox::new("projector")?.cursor("orders-0")?;
    ///
    /// let run = [(100, "a"), (101, "b"), (101, "b"), (102, "c")];
    /// let outcomes = orders.process_batch(&mut conn, &run, |_tx, offset, order| {
    ///     Ok::<_, diesel_inbox::Error>(format!("{offset}:{order}"))
    /// })?;
    /// assert_eq!(outcomes.iter().filter(|o| o.is_processed()).count(), 3);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`process`](Self::process).
    pub fn process_batch<C, M, T, E, F>(
        &self,
        conn: &mut C,
        items: &[(u64, M)],
        effect: F,
    ) -> Result<Vec<Outcome<T>>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C, u64, &M) -> Result<T, E>,
        E: HandlerError,
    {
        run_ready(self.process_batch_in::<Blocking, _, _, _, _>(conn, items, effect))
    }

    /// [`process_batch`](Self::process_batch) in either flavour.
    pub(crate) async fn process_batch_in<F, C, M, T, E>(
        &self,
        conn: &mut C,
        items: &[(u64, M)],
        effect: impl SequenceEffect<C, M, Output = T, Error = E>,
    ) -> Result<Vec<Outcome<T>>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let sequences = items
            .iter()
            .map(|(sequence, _)| stored(*sequence))
            .collect::<Result<Vec<_>, _>>()?;
        let scope = engine::scope_of(conn)?;
        let subject = self.inbox.subject(None);
        let body = Run {
            cursor: self,
            items,
            sequences: &sequences,
            effect,
            scope,
        };
        let policy = self.inbox.retry_policy();
        match engine::run(conn, scope, policy, subject, body).await {
            Ok((outcomes, gaps)) => {
                self.report(&gaps);
                Ok(outcomes)
            }
            Err(Failure::Handler(error)) => Err(error),
            Err(Failure::Panicked(panic)) => std::panic::resume_unwind(panic),
            Err(failure) => Err(failure.into_error()),
        }
    }
}

/// The batch's transaction body: load the stream once, offer each sequence and run the
/// effect of each new one, save the stream once.
struct Run<'a, M, G> {
    cursor: &'a Cursor,
    items: &'a [(u64, M)],
    /// The items' sequences as stored, checked before the transaction.
    sequences: &'a [i64],
    effect: G,
    scope: Scope,
}

impl<F, C, M, T, E, G> Body<F, C> for Run<'_, M, G>
where
    C: Db<F, Backend: Sql>,
    G: SequenceEffect<C, M, Output = T, Error = E>,
{
    type Output = (Vec<Outcome<T>>, Vec<Gap>);
    type Error = E;

    async fn attempt(&mut self, tx: &mut C) -> Result<Self::Output, Failure<E>> {
        let cursor = self.cursor;
        let now = now();
        let mut stream = cursor.load(tx, now).await?;
        let mut outcomes = Vec::with_capacity(self.items.len());
        let mut gaps = Vec::new();
        for ((sequence, message), &stored) in self.items.iter().zip(self.sequences) {
            let (verdict, found) = cursor.offer(tx, &mut stream, stored, None, now).await?;
            let outcome = match verdict {
                Verdict::Duplicate => Cursor::duplicate(*sequence, &stream),
                Verdict::New { .. } => {
                    let mut call = Call {
                        effect: &mut self.effect,
                        sequence: *sequence,
                        message,
                    };
                    let value = engine::call_user(tx, &mut call, Then::Statements).await?;
                    processed(value, found.clone())
                }
            };
            gaps.extend(found);
            outcomes.push(outcome);
        }
        cursor.save(tx, &stream, now).await?;
        if self.scope == Scope::TopLevel {
            let duplicates = outcomes.iter().filter(|o| o.is_duplicate()).count();
            // The stream picks the counters' stripe: its deliveries queue on the cursor row.
            Tally::duplicates(duplicates)
                .count(tx, (cursor.consumer(), cursor.stream()))
                .await?;
        }
        Ok((outcomes, gaps))
    }
}

/// The batch's effect for one sequence, as user code the engine calls.
struct Call<'a, M, G> {
    effect: &'a mut G,
    sequence: u64,
    message: &'a M,
}

impl<C, M, G: SequenceEffect<C, M>> Effect<C> for Call<'_, M, G> {
    type Output = G::Output;
    type Error = G::Error;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<G::Output, G::Error>> {
        self.effect.call(conn, self.sequence, self.message)
    }
}
