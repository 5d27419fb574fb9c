//! Many deliveries in one transaction: one statement records them all, the effect runs for the
//! new ones only (once each, or once for all of them), one commit.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use chrono::Utc;
use tracing::Instrument;

use crate::decide::{Failure, Scope, Then};
use crate::engine::{self, run_ready, Body, Effect};
use crate::inbox::{self, Delivered, Tally};
use crate::observe::{self, DeliveryOutcome};
use crate::rows::{Listed, Recorded};
use crate::sql::{Blocking, Db, InboxSql, Sql};
use crate::state::InboxState;
use crate::{
    Delivery, Error, HandlerError, Inbox, InboxConnection, IntoDelivery, Outcome, Payload,
};

/// A batch's effect, as the engine calls it: with the new deliveries it is given, one value
/// for each. A sync closure, or the async flavour's adapters of an async one.
pub(crate) trait BatchEffect<C> {
    /// One delivery's value.
    type Output;
    /// The effect's error.
    type Error;

    /// Runs the effect for `new`, on the transaction's connection.
    fn call(
        &mut self,
        conn: &mut C,
        new: &[&Delivery],
    ) -> impl Future<Output = Result<Vec<Self::Output>, Self::Error>>;
}

impl<C, T, E, G> BatchEffect<C> for G
where
    G: FnMut(&mut C, &[&Delivery]) -> Result<Vec<T>, E>,
{
    type Output = T;
    type Error = E;

    fn call(&mut self, conn: &mut C, new: &[&Delivery]) -> impl Future<Output = Result<Vec<T>, E>> {
        std::future::ready(self(conn, new))
    }
}

/// A batch effect with the deliveries of one call, as user code the engine calls.
struct Call<'a, B> {
    effect: &'a mut B,
    new: &'a [&'a Delivery],
}

impl<C, B: BatchEffect<C>> Effect<C> for Call<'_, B> {
    type Output = Vec<B::Output>;
    type Error = B::Error;

    fn call(&mut self, conn: &mut C) -> impl Future<Output = Result<Self::Output, Self::Error>> {
        self.effect.call(conn, self.new)
    }
}

/// How a batch transaction runs its effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One call per new delivery, as the loop meets it.
    Each,
    /// One call for all the new deliveries, after the loop.
    Together,
    /// One call per new delivery, each in a savepoint of its own: the run after a failure.
    Isolated,
}

/// The one value an effect returned for the one delivery it was given.
fn one<T>(mut values: Vec<T>) -> T {
    values
        .pop()
        .expect("a batch effect returns one value per delivery")
}

/// Runs the effect once for the pending deliveries (`Mode::Together`) and fills their slots.
async fn run_together<F, C, T, E>(
    conn: &mut C,
    deliveries: &[Result<Delivery, crate::InvalidEventId>],
    effect: &mut impl BatchEffect<C, Output = T, Error = E>,
    slots: &mut [Slot<T, E>],
) -> Result<(), Failure<E>>
where
    C: Db<F, Backend: Sql>,
{
    let (pending, new): (Vec<usize>, Vec<&Delivery>) = slots
        .iter()
        .zip(deliveries)
        .enumerate()
        .filter_map(|(i, entry)| match entry {
            (Slot::Pending, Ok(delivery)) => Some((i, delivery)),
            _ => None,
        })
        .unzip();
    if new.is_empty() {
        return Ok(());
    }
    let values = engine::call_user(conn, &mut Call { effect, new: &new }, Then::Statements).await?;
    for (i, value) in pending.into_iter().zip(values) {
        slots[i] = Slot::Done(Outcome::Processed(value));
    }
    Ok(())
}

/// What recording the delivery of `key` found: from the batch's statement for its first
/// occurrence, or recorded now for a repeat. An inbox row this version cannot read is its
/// [`CorruptRow`](crate::CorruptRow), which rejects that delivery alone, named; the batch's
/// other deliveries go on.
async fn recorded_or_corrupt<F, C: Db<F, Backend: Sql>, E>(
    conn: &mut C,
    recorded: &mut HashMap<&str, Listed<Recorded>>,
    key: crate::rows::Key<'_>,
    fingerprint: Option<&[u8; 32]>,
) -> Result<Result<Recorded, crate::CorruptRow>, Failure<E>> {
    if let Some(first) = recorded.remove(key.1) {
        return Ok(first.map_err(|bad| bad.in_row(&[("consumer", key.0)], "event_id")));
    }
    let hash = fingerprint.map(|f| &f[..]);
    match C::Backend::record_delivery(conn, key, Utc::now(), hash).await {
        Ok(this) => Ok(Ok(this)),
        Err(error) => match Failure::reading_events(error, key) {
            Failure::Inbox(Error::CorruptRow(corrupt)) => Ok(Err(corrupt)),
            other => Err(other),
        },
    }
}

/// One delivery's place in a batch while the transaction runs.
pub(crate) enum Slot<T, E> {
    Done(Outcome<T>),
    /// New, and its effect runs with the batch's other new deliveries, after the loop.
    Pending,
    /// The effect failed: recorded as a failure once the batch has committed.
    Failed(E),
    Rejected(Error),
}

impl<T, E> Slot<T, E> {
    /// What the slot's delivery is, for its metrics, should it end in an error.
    fn if_err(&self) -> DeliveryOutcome {
        match self {
            Self::Rejected(Error::PayloadMismatch { .. }) => DeliveryOutcome::PayloadConflict,
            Self::Failed(_) => DeliveryOutcome::Failed,
            Self::Done(_) | Self::Pending | Self::Rejected(_) => DeliveryOutcome::Error,
        }
    }
}

impl Inbox {
    /// Offers a batch of deliveries in one transaction: one statement inserts every id and
    /// learns which are new, `effect` runs for the new ones only (in the order given), and one
    /// commit settles them all. Returns one result per delivery, in order.
    ///
    /// The effects run one after the other in the one transaction. When one fails, the whole
    /// batch rolls back and runs again with a savepoint per new event, so that event alone is
    /// rolled back, with its inbox row, and its failure is recorded after the commit as for
    /// [`process`](Self::process), while the others commit: every effect of such a batch runs
    /// twice, once in the transaction that rolled back. An invalid id, a payload conflict, or
    /// an inbox row this version cannot read ([`Error::CorruptRow`], naming the row) is
    /// rejected alone. An id that appears twice in the batch is handled twice, in order, as
    /// if delivered one after the other. Contention retries the whole batch, effects included.
    /// A panicking effect rolls back the whole batch and continues unwinding.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::Inbox;
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let inbox = Inbox::new("ledger")?;
    ///
    /// let results = inbox.process_batch(&mut conn, ["a", "b", "a", ""], |_tx, delivery| {
    ///     Ok::<_, diesel_inbox::Error>(delivery.id().to_string())
    /// })?;
    /// assert!(results[0].as_ref().is_ok_and(|o| o.is_processed()));
    /// assert!(results[2].as_ref().is_ok_and(|o| o.is_duplicate()));
    /// assert!(results[3].is_err()); // the empty id, rejected alone
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The outer error is for the batch as a whole (database errors, exhausted retries, a
    /// transaction the database aborted): nothing was committed. The inner ones are each
    /// delivery's, as [`process`](Self::process) returns them.
    #[allow(clippy::type_complexity)]
    pub fn process_batch<C, T, E, F, I>(
        &self,
        conn: &mut C,
        deliveries: I,
        mut effect: F,
    ) -> Result<Vec<Result<Outcome<T>, E>>, E>
    where
        C: InboxConnection,
        I: IntoIterator,
        I::Item: IntoDelivery,
        F: FnMut(&mut C, &Delivery) -> Result<T, E>,
        E: HandlerError,
    {
        let each = |c: &mut C, new: &[&Delivery]| new.iter().map(|d| effect(c, d)).collect();
        run_ready(self.run_batch::<Blocking, _, _, _>(conn, batch(deliveries), each, Mode::Each))
    }

    /// [`process_batch`](Self::process_batch) with one call of `effect` for all the batch's
    /// new deliveries, in the order given, so that it can write them in one statement: a
    /// multi-row `INSERT`, an `UPDATE .. WHERE id IN (..)`. Duplicates, dead-lettered events,
    /// invalid ids and payload conflicts are not passed to it; when no delivery is new it is
    /// not called.
    ///
    /// Failure isolation is as for `process_batch`: when the call fails, panics or leaves the
    /// transaction aborted, the whole batch rolls back and runs again with a savepoint per new
    /// event, calling `effect` once per event with that event alone, so only the failing ones
    /// roll back and have their failure recorded. A panic in that run rolls back the whole
    /// batch, is recorded against its event, and continues unwinding, as in `process_batch`.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::connection::SimpleConnection;
    /// use diesel::prelude::*;
    /// use diesel_inbox::Inbox;
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// conn.batch_execute("CREATE TABLE seen (id TEXT PRIMARY KEY)")?;
    /// diesel::table! { seen (id) { id -> Text } }
    /// let inbox = Inbox::new("ledger")?;
    ///
    /// // One multi-row INSERT for all the new deliveries.
    /// let insert_all = |tx: &mut SqliteConnection, new: &[&diesel_inbox::Delivery]| {
    ///     let rows: Vec<_> = new.iter().map(|d| seen::id.eq(d.id().as_str())).collect();
    ///     diesel::insert_into(seen::table).values(rows).execute(tx).map(drop)
    /// };
    /// inbox.process_bulk(&mut conn, ["a", "b"], insert_all)?;
    /// let results = inbox.process_bulk(&mut conn, ["b", "c"], insert_all)?;
    /// assert!(results[0].as_ref().is_ok_and(|o| o.is_duplicate()));
    /// assert!(results[1].as_ref().is_ok_and(|o| o.is_processed()));
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`process_batch`](Self::process_batch).
    #[allow(clippy::type_complexity)]
    pub fn process_bulk<C, E, F, I>(
        &self,
        conn: &mut C,
        deliveries: I,
        mut effect: F,
    ) -> Result<Vec<Result<Outcome<()>, E>>, E>
    where
        C: InboxConnection,
        I: IntoIterator,
        I::Item: IntoDelivery,
        F: FnMut(&mut C, &[&Delivery]) -> Result<(), E>,
        E: HandlerError,
    {
        let all = |c: &mut C, new: &[&Delivery]| effect(c, new).map(|()| vec![(); new.len()]);
        let deliveries = batch(deliveries);
        run_ready(self.run_batch::<Blocking, _, _, _>(conn, deliveries, all, Mode::Together))
    }
}

/// A batch in either flavour.
impl<K> crate::inbox::Inbox<K> {
    /// The batch forms: `effect` returns one value per delivery it is given, and is given
    /// each new delivery alone (`Mode::Each`), or all of them at once (`Mode::Together`).
    #[allow(clippy::type_complexity)]
    pub(crate) async fn run_batch<F, C, T, E>(
        &self,
        conn: &mut C,
        deliveries: Vec<Result<Delivery, crate::InvalidEventId>>,
        effect: impl BatchEffect<C, Output = T, Error = E>,
        mode: Mode,
    ) -> Result<Vec<Result<Outcome<T>, E>>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let span = tracing::info_span!(
            "inbox_batch",
            consumer = self.consumer(),
            size = deliveries.len()
        );
        self.batch_in(conn, deliveries, effect, mode)
            .instrument(span)
            .await
    }

    /// [`run_batch`](Self::run_batch)'s steps, inside its span.
    #[allow(clippy::type_complexity)]
    async fn batch_in<F, C, T, E>(
        &self,
        conn: &mut C,
        deliveries: Vec<Result<Delivery, crate::InvalidEventId>>,
        mut effect: impl BatchEffect<C, Output = T, Error = E>,
        mode: Mode,
    ) -> Result<Vec<Result<Outcome<T>, E>>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let timer = observe::DeliveryTimer::start(self.consumer());
        let scope = engine::scope_of(conn)?;

        // First every effect in one go; only if one fails, roll back and run the batch again
        // with a savepoint per event, so the failure is isolated and the others commit. The
        // savepoints cost two round trips per event, which the common case does not pay.
        let mut isolate = false;
        let mut panicked_at = None;
        let subject = self.subject(None);
        let slots = loop {
            let body = DeliverBatch {
                inbox: self,
                deliveries: &deliveries,
                effect: &mut effect,
                mode: if isolate { Mode::Isolated } else { mode },
                panicked_at: &mut panicked_at,
                scope,
            };
            let policy = self.retry_policy();
            let slots = engine::run(conn, scope, policy, subject, body).await;
            match slots {
                Err(Failure::Handler(_) | Failure::Inbox(Error::TransactionAborted { .. }))
                    if !isolate =>
                {
                    isolate = true;
                }
                // A panic in the one call for all of them names no event: one by one, a
                // panic again names its own, so that its failure is recorded and the event
                // is dead-lettered in time instead of stopping every batch it comes in.
                Err(Failure::Panicked(_)) if mode == Mode::Together && !isolate => isolate = true,
                slots => break slots,
            }
        };
        let slots = match slots {
            Ok(slots) => slots,
            Err(Failure::Panicked(panic)) => {
                let delivery = panicked_at.and_then(|i| deliveries[i].as_ref().ok());
                self.after_handler_panic(conn, delivery, panic, scope).await
            }
            Err(failure) => {
                timer.finish_each(deliveries.iter().map(|_| DeliveryOutcome::Error));
                return Err(failure.into_error());
            }
        };
        let if_err: Vec<_> = slots.iter().map(Slot::if_err).collect();

        let mut results = Vec::with_capacity(slots.len());
        for (slot, delivery) in slots.into_iter().zip(&deliveries) {
            results.push(match (slot, delivery) {
                (Slot::Done(outcome), _) => Ok(outcome),
                (Slot::Rejected(error), _) => Err(error.into()),
                (Slot::Pending, _) => {
                    unreachable!("the batch fills its pending slots before it commits")
                }
                (Slot::Failed(error), Ok(delivery)) => {
                    self.after_handler_error(conn, delivery, error, scope).await
                }
                (Slot::Failed(error), Err(_)) => Err(error),
            });
        }
        let outcomes = results.iter().zip(if_err);
        timer.finish_each(outcomes.map(|(result, if_err)| DeliveryOutcome::of(result, if_err)));
        Ok(results)
    }

    /// The body of the batch transaction: one slot per delivery.
    async fn deliver_batch<F, C, T, E>(
        &self,
        conn: &mut C,
        deliveries: &[Result<Delivery, crate::InvalidEventId>],
        effect: &mut impl BatchEffect<C, Output = T, Error = E>,
        mode: Mode,
        panicked_at: &mut Option<usize>,
        scope: Scope,
    ) -> Result<Vec<Slot<T, E>>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
    {
        let fingerprints: Vec<Option<[u8; 32]>> = deliveries
            .iter()
            .map(|d| {
                d.as_ref()
                    .ok()
                    .and_then(|d| d.payload.as_ref())
                    .map(Payload::fingerprint)
            })
            .collect();

        // First occurrences go into the one statement, sorted so that concurrent batches lock
        // their rows in the same order instead of deadlocking; repeats are recorded one by one
        // after the first has settled, as a later delivery would be.
        let mut firsts = HashSet::new();
        let mut items: Vec<(&str, Option<&[u8]>)> = deliveries
            .iter()
            .zip(&fingerprints)
            .filter_map(|(delivery, fingerprint)| {
                let id = delivery.as_ref().ok()?.id.as_str();
                firsts
                    .insert(id)
                    .then_some((id, fingerprint.as_ref().map(|f| &f[..])))
            })
            .collect();
        items.sort_unstable_by_key(|&(id, _)| id);
        let recorded =
            C::Backend::record_deliveries(conn, self.consumer(), &items, Utc::now()).await?;
        let mut recorded: HashMap<&str, Listed<Recorded>> =
            items.iter().map(|&(id, _)| id).zip(recorded).collect();

        let mut slots = Vec::with_capacity(deliveries.len());
        let mut tally = Tally::default();
        for (i, delivery) in deliveries.iter().enumerate() {
            let delivery = match delivery {
                Ok(delivery) => delivery,
                Err(invalid) => {
                    slots.push(Slot::Rejected(invalid.clone().into()));
                    continue;
                }
            };
            let key = self.key(delivery);
            let fingerprint = fingerprints[i].as_ref();
            let this = match recorded_or_corrupt(conn, &mut recorded, key, fingerprint).await? {
                Ok(this) => this,
                Err(corrupt) => {
                    slots.push(Slot::Rejected(corrupt.into()));
                    continue;
                }
            };
            // Read only when an effect panics: then it names the event whose effect it was.
            *panicked_at = Some(i);
            let slot = match this {
                Recorded::Seen(existing) => {
                    let delivered = inbox::seen(conn, key, fingerprint, existing).await?;
                    tally.add(&Tally::of(&delivered));
                    match delivered {
                        Delivered::Outcome(outcome) => Slot::Done(outcome),
                        Delivered::PayloadConflict => Slot::Rejected(Error::PayloadMismatch {
                            event_id: delivery.id.clone(),
                        }),
                    }
                }
                Recorded::New if mode == Mode::Together => Slot::Pending,
                Recorded::New if mode == Mode::Each => {
                    let new = [delivery];
                    let value =
                        engine::call_user(conn, &mut Call { effect, new: &new }, Then::Statements)
                            .await?;
                    Slot::Done(Outcome::Processed(one(value)))
                }
                Recorded::New => self.isolated(conn, delivery, effect).await?,
            };
            slots.push(slot);
        }
        if mode == Mode::Together {
            // No one event is to blame for a panic in the call for all of them.
            *panicked_at = None;
            run_together(conn, deliveries, effect, &mut slots).await?;
        }
        if scope == Scope::TopLevel {
            // Any of the batch's events picks the counters' stripe.
            let stripe_by = items.first().map_or("", |&(id, _)| id);
            tally.count(conn, (self.consumer(), stripe_by)).await?;
        }
        Ok(slots)
    }

    /// Runs one new event's effect in a savepoint of its own, so that its failure rolls back
    /// only its own writes.
    async fn isolated<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: &Delivery,
        effect: &mut impl BatchEffect<C, Output = T, Error = E>,
    ) -> Result<Slot<T, E>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
    {
        let depth = conn.depth()?;
        conn.begin_level().await?;
        let new = [delivery];
        // Its savepoint's release comes next, and is the check.
        let call = &mut Call { effect, new: &new };
        let ran = engine::call_user(conn, call, Then::Commit).await;
        Ok(match ran {
            Ok(value) => match conn.commit_level().await {
                Ok(()) => Slot::Done(Outcome::Processed(one(value))),
                // PostgreSQL refuses to release a savepoint in an aborted transaction: the
                // effect swallowed a failed statement.
                Err(source) => {
                    self.undo(conn, depth, delivery).await?;
                    Slot::Rejected(Error::TransactionAborted {
                        source: Some(source),
                    })
                }
            },
            Err(Failure::Handler(error)) => {
                self.undo(conn, depth, delivery).await?;
                Slot::Failed(error)
            }
            Err(other) => return Err(other),
        })
    }

    /// Rolls back a failed event's savepoint (if still open) and removes its inbox row, so a
    /// redelivery runs it again.
    async fn undo<F, C: Db<F, Backend: Sql>, E>(
        &self,
        conn: &mut C,
        depth: u32,
        delivery: &Delivery,
    ) -> Result<(), Failure<E>> {
        engine::rollback_to(conn, depth).await;
        let key = self.key(delivery);
        C::Backend::delete_inbox_row(conn, key, InboxState::Processed).await?;
        Ok(())
    }
}

/// The deliveries of a batch, each read as a delivery or refused as an invalid id.
pub(crate) fn batch<I>(deliveries: I) -> Vec<Result<Delivery, crate::InvalidEventId>>
where
    I: IntoIterator,
    I::Item: IntoDelivery,
{
    deliveries
        .into_iter()
        .map(IntoDelivery::into_delivery)
        .collect()
}

/// A batch transaction's body: [`Inbox::deliver_batch`], once per attempt.
struct DeliverBatch<'a, K, B> {
    inbox: &'a crate::inbox::Inbox<K>,
    deliveries: &'a [Result<Delivery, crate::InvalidEventId>],
    effect: &'a mut B,
    mode: Mode,
    panicked_at: &'a mut Option<usize>,
    scope: Scope,
}

impl<F, C, K, B> Body<F, C> for DeliverBatch<'_, K, B>
where
    C: Db<F, Backend: Sql>,
    B: BatchEffect<C>,
{
    type Output = Vec<Slot<B::Output, B::Error>>;
    type Error = B::Error;

    async fn attempt(&mut self, conn: &mut C) -> Result<Self::Output, Failure<B::Error>> {
        let Self {
            inbox,
            deliveries,
            effect,
            mode,
            panicked_at,
            scope,
        } = self;
        inbox
            .deliver_batch(conn, deliveries, &mut **effect, *mode, panicked_at, *scope)
            .await
    }
}
