//! Sequence cursors: exactly-once over an ordered stream with one row per stream, a gap
//! ledger and fencing.
//!
//! Where messages carry a sequence number that the broker assigns once and never reuses (a
//! Kafka partition offset, a JetStream stream sequence, a log's own sequence), a [`Cursor`]
//! dedupes with one row per stream instead of one per event, and sees what went missing. A
//! block height is not such a sequence: a reorg gives the same height to another block. Blocks
//! go through a [chain cursor](crate::chain).
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::cursor::{Resume, Sequenced};
//! use diesel_inbox::{Ack, Error, Inbox};
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! let orders = Inbox::new("projector")?.cursor("orders-0")?;
//! let lease = orders.acquire(&mut conn, "worker-7")?; // on partition assignment
//! let orders = orders.epoch(lease.epoch()); // fenced from now on
//! assert_eq!(lease.resume(), Resume::Fresh); // seek the broker: nothing settled yet
//!
//! // The broker's first available sequence is 1; 1, 2 and then 5 arrive.
//! for seq in [1, 2, 5] {
//!     let result = orders.process(&mut conn, Sequenced::new(seq).first_available(1), |_tx| {
//!         Ok::<_, Error>(()) // project the message through `_tx`
//!     });
//!     assert_eq!(Ack::of(&result), Ack::Ack);
//! }
//! // 3 and 4 are an open gap: a restart resumes there, and a late 3 or 4 fills it.
//! assert_eq!(orders.resume(&mut conn)?, Resume::At(3));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - **One transaction.** The effect and the cursor's advance commit together on your
//!   connection. The next sequence of a stream with no open gap is one `UPDATE` of the cursor
//!   row. A sequence at or below the watermark is [`Outcome::Duplicate`] and the effect does not
//!   run; [`Duplicate::sequence`](crate::Duplicate::sequence) says so (a cursor keeps no time or
//!   count per sequence).
//! - **Gaps are recorded, never silent.** A sequence further ahead is processed, and the
//!   skipped range goes into the gap ledger `diesel_inbox_gaps` (cause [`GapCause::Skipped`]).
//!   The caller sees it in [`Outcome::ProcessedAfterGap`]. It is also logged at warn, counted by
//!   `diesel_inbox_gaps_total`, and listed by [`Gaps::open`] and `diesel-inbox gaps`. The
//!   watermark stays below the gap, so [`Cursor::resume`] seeks the broker back to it.
//! - **Late arrivals fill gaps.** A sequence inside an open gap (after a nack, or from a
//!   parallel worker) is processed once and fills its place. A gap filled in the middle splits
//!   in two, and one with no sequences left is filled.
//! - **Bounded.** At most [`max_open_gaps`](Cursor::max_open_gaps) (default 1000) gaps that may
//!   still fill. A sequence that would open one more is refused (`Refused::TooManyOpenGaps`):
//!   nothing commits, and the answer is `Ack::Redeliver`. Sequences that fill a gap are always
//!   accepted.
//! - **The broker's retention.** Pass the broker's first available sequence
//!   ([`Sequenced::first_available`]: JetStream's `first_seq`, Kafka's log start offset). A
//!   cursor behind it records the range it can never receive as an [evicted](GapCause::Evicted)
//!   gap and moves past it; it is never reset silently. The evicted gap stays open, and so
//!   alertable, until ops resolve it: [`Gaps::resolve`] with an [`Audit`](crate::Audit), or
//!   `diesel-inbox gaps resolve ID --reason ..`. Resolving a skipped gap gives its sequences
//!   up: the watermark moves past it, and a late arrival is then a duplicate.
//! - **Fencing.** [`Cursor::acquire`] adds one to the stream's epoch and returns a [`Lease`]. A
//!   cursor writing with an older epoch (a zombie after a rebalance) is refused and commits
//!   nothing, the effect included (`Ack::Redeliver`: the new owner takes the message). Once a
//!   stream has been acquired, a cursor without an epoch is fenced too.
//! - **Resume.** [`Cursor::resume`] (also on the [`Lease`]) is the first sequence not settled.
//!   Pass it to JetStream as `DeliverPolicy::ByStartSequence { start_sequence }`, or to Kafka as
//!   `seek(topic, partition, Offset::Offset(n))`. [`Resume::Fresh`] means nothing is settled
//!   yet: start as your application starts a new consumer.
//! - **Batches.** [`Cursor::process_batch`] locks and writes the cursor once for a whole run of
//!   sequences. An error rolls the whole run back.
//! - **Failures.** Without an event id, the effect's error comes back unchanged and nothing
//!   commits: an ordered stream waits for its poison message. [`Sequenced::event`] adds the
//!   inbox's id row; then the same event republished under another sequence is a duplicate,
//!   and failures are counted and dead-lettered by the consumer's policy. A dead-lettered
//!   sequence is settled, and the stream moves past it.
//! - **Pruning by the cursor.** Id rows kept that way are pruned by [`Cursor::prune_events`]
//!   once the watermark passes their sequence, whatever their age.
//!
//! `examples/stream_gap.rs` plays it through on embedded SQLite: a consumer down longer than
//! the stream's retention resumes, reports the gap, and ops resolve it.
//!
//! The arithmetic is in `watermark.rs`; this module does the I/O.

use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{info, warn, Instrument};

use crate::backend::StreamKey;
use crate::decide::{Failure, Scope, Then};
use crate::duration::now;
use crate::engine::{self, run_ready, Body, Effect};
use crate::inbox::{self, Delivered, Tally};
use crate::names::StreamName;
pub use crate::names::{InvalidStreamName, MAX_STREAM_BYTES};
use crate::observe::{self, DeliveryOutcome};
use crate::outcome::DuplicateOf;
use crate::rows::{ConsumerRows, Recorded};
use crate::sql::{Blocking, Db, InboxSql, RetentionSql, Sql};
use crate::{Delivery, Duplicate, Error, EventId, HandlerError, Inbox, InboxConnection, Outcome};
use sql::CursorSql;
use watermark::{Change, Refusal, Stream, Verdict};

#[cfg(feature = "async")]
pub(crate) mod asynch;
mod batch;
pub(crate) mod error;
pub(crate) mod gap;
mod gaps;
mod prune;
pub(crate) mod sql;
pub(crate) mod state;
mod watermark;

#[cfg(feature = "async")]
pub(crate) use batch::SequenceEffect;
pub use error::Refused;
pub use gap::Gap;
pub use gaps::Gaps;
pub use state::{GapCause, GapState};

/// How many gaps that may still fill a cursor keeps open by default; see
/// [`Cursor::max_open_gaps`].
pub const DEFAULT_MAX_OPEN_GAPS: usize = 1000;

/// A consumer's position in one ordered stream (a Kafka partition, a JetStream stream, a
/// chain, a log): exactly-once processing keyed by the stream's sequence numbers, with one
/// row per stream instead of one per event.
///
/// Each [`process`](Self::process) commits the effect and the cursor's advance in one
/// transaction on the caller's connection:
///
/// - a sequence already settled is [`Outcome::Duplicate`], and the effect does not run;
/// - the next sequence is [`Outcome::Processed`]: one update of the cursor row;
/// - a sequence further ahead is processed too, and the skipped range goes into the gap ledger
///   as [`GapCause::Skipped`]: [`Outcome::ProcessedAfterGap`], a
///   warn-level log line and the `diesel_inbox_gaps_total` metric. The watermark stays below
///   the gap until its sequences arrive (each one late arrival is processed, once, and fills
///   its place) or ops [resolve](Gaps::resolve) it.
///
/// **Out of order** (a nack, parallel workers): any sequence inside an open gap is processed and
/// fills it, so the policy is bounded by the number of gaps, not by how far apart sequences are: at
/// most [`max_open_gaps`](Self::max_open_gaps) gaps that may still fill. Past that a sequence that
/// would open one more is refused with
/// [`cursor::Refused::TooManyOpenGaps`](Refused::TooManyOpenGaps) and nothing commits; sequences
/// that fill a gap are still accepted.
///
/// **Retention**: given the broker's first available sequence
/// ([`Sequenced::first_available`]), a cursor behind it records the missing range as
/// [`GapCause::Evicted`], never a silent reset, and moves on.
///
/// **Fencing**: [`acquire`](Self::acquire) makes an instance the stream's owner with a new epoch; a
/// cursor writing with an older one (a zombie after a rebalance) fails with
/// [`cursor::Refused::Fenced`](Refused::Fenced) and commits nothing, the effect included. Once a
/// stream has been acquired, a cursor without an epoch is fenced too.
///
/// **Failures**: the effect's error comes back unchanged and nothing commits, so the sequence
/// is redelivered: an ordered stream waits for its poison message. Give the sequence its
/// event id ([`Sequenced::event`]) to have failures counted and dead-lettered by the
/// [`Inbox`]'s policy instead; a dead-lettered sequence is settled, and the stream moves on.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::{cursor::Resume, Inbox, Outcome};
///
/// let mut conn = SqliteConnection::establish(":memory:")?;
/// diesel_inbox::run_pending_migrations(&mut conn)?;
/// let orders = Inbox::new("projector")?.cursor("orders-0")?;
/// let apply = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
///
/// assert!(orders.process(&mut conn, 1, apply)?.is_processed());
/// assert!(orders.process(&mut conn, 1, apply)?.is_duplicate());
/// // 2 and 3 went missing: processed, and recorded as a gap.
/// let outcome = orders.process(&mut conn, 4, apply)?;
/// assert_eq!(outcome.gaps()[0].sequences(), 2..=3);
/// // 3 arrives late: processed once, and the gap shrinks to 2.
/// assert!(orders.process(&mut conn, 3, apply)?.is_processed());
/// assert_eq!(orders.gaps().open(&mut conn)?.remove(0)?.sequences(), 2..=2);
/// // Seek the broker to the first sequence not settled.
/// assert_eq!(orders.resume(&mut conn)?, Resume::At(2));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Cursor {
    inbox: Inbox,
    stream: StreamName,
    epoch: Option<u64>,
    max_open_gaps: usize,
}

impl Inbox {
    /// A cursor of this consumer over the stream called `stream`: 1 to 255 bytes of UTF-8
    /// without control characters (`orders-3`, `ORDERS`, `eth:mainnet`). It shares the
    /// consumer's name, retry policy and failure policy.
    ///
    /// # Errors
    ///
    /// [`InvalidStreamName`] for any other name.
    pub fn cursor(&self, stream: &str) -> Result<Cursor, InvalidStreamName> {
        Ok(Cursor {
            inbox: self.clone(),
            stream: StreamName::new(stream)?,
            epoch: None,
            max_open_gaps: DEFAULT_MAX_OPEN_GAPS,
        })
    }
}

/// One delivery to a [`Cursor`]: its sequence, and what else the caller knows.
#[derive(Debug, Clone)]
#[must_use]
pub struct Sequenced {
    sequence: u64,
    first_available: Option<u64>,
    event: Option<Delivery>,
}

impl Sequenced {
    /// The delivery of `sequence`.
    pub fn new(sequence: u64) -> Self {
        Self {
            sequence,
            first_available: None,
            event: None,
        }
    }

    /// The sequence delivered.
    #[must_use]
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The broker's first available sequence (JetStream's `first_seq` in the stream info,
    /// Kafka's log start offset). A cursor behind it records the range it can never receive
    /// as an evicted gap and moves past it.
    pub fn first_available(mut self, sequence: u64) -> Self {
        self.first_available = Some(sequence);
        self
    }

    /// The event's id (and payload): the inbox then also keeps the id, as
    /// [`Inbox::process`] does, so that the same event republished under another sequence
    /// is a duplicate too, and failures are counted and dead-lettered by the inbox's policy.
    /// [`Cursor::prune_events`] removes those id rows once the watermark has passed them.
    pub fn event(mut self, delivery: Delivery) -> Self {
        self.event = Some(delivery);
        self
    }
}

impl From<u64> for Sequenced {
    fn from(sequence: u64) -> Self {
        Self::new(sequence)
    }
}

/// Where to seek the broker when a consumer starts: [`Cursor::resume`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resume {
    /// No sequence settled yet: start where the application starts a new consumer (JetStream
    /// `DeliverPolicy::All` or `New`; Kafka `auto.offset.reset`).
    Fresh,
    /// Start at this sequence, the first one not settled: JetStream
    /// `DeliverPolicy::ByStartSequence { start_sequence }`; Kafka
    /// `consumer.seek(topic, partition, Offset::Offset(n), timeout)` (or the offset set on
    /// the assignment). Sequences after it that were already settled come again as duplicates.
    At(u64),
}

/// Ownership of a stream: the epoch [`Cursor::acquire`] handed out, and where to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Lease {
    epoch: u64,
    resume: Resume,
}

impl Lease {
    /// The epoch to write with: pass it to [`Cursor::epoch`].
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where to seek the broker.
    pub fn resume(&self) -> Resume {
        self.resume
    }
}

/// What a cursor's transaction came to, before it commits.
struct Advanced<T> {
    delivered: Delivered<T>,
    /// Gaps this transaction found: logged and counted once it commits.
    gaps: Vec<Gap>,
}

impl Cursor {
    /// Writes with `epoch`, from [`Lease::epoch`]: a write after another instance acquired the
    /// stream fails with [`cursor::Refused::Fenced`](Refused::Fenced). Defaults to none, which only
    /// works on a stream nobody acquired.
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// How many gaps that may still fill (cause `Skipped`) the stream may have open before a
    /// sequence that would open another is refused with
    /// [`cursor::Refused::TooManyOpenGaps`](Refused::TooManyOpenGaps). Each is one ledger row, read
    /// whenever a sequence arrives out of order. Defaults to [`DEFAULT_MAX_OPEN_GAPS`].
    ///
    /// # Panics
    ///
    /// When `gaps` is 0.
    pub fn max_open_gaps(mut self, gaps: usize) -> Self {
        assert!(gaps > 0, "max_open_gaps must be at least 1");
        self.max_open_gaps = gaps;
        self
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.inbox.consumer()
    }

    /// The stream name.
    pub fn stream(&self) -> &str {
        self.stream.as_str()
    }

    /// This stream's gap ledger.
    pub fn gaps(&self) -> Gaps {
        Gaps::new(self.inbox.consumer(), Some(self.stream()))
    }

    /// Runs `effect` if and only if the sequence is not settled yet, in one transaction with
    /// the cursor's advance; see [`Cursor`] for what each sequence comes to. Contention is
    /// retried as for [`Inbox::process`], and inside a caller's transaction it runs as a
    /// savepoint.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::Inbox;
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let orders = Inbox::new("projector")?.cursor("orders-0")?;
    /// let apply = |_tx: &mut SqliteConnection| Ok::<_, diesel_inbox::Error>(());
    ///
    /// assert!(orders.process(&mut conn, 1, apply)?.is_processed());
    /// assert!(orders.process(&mut conn, 1, apply)?.is_duplicate()); // at or below the watermark
    /// let after_gap = orders.process(&mut conn, 4, apply)?; // 2 and 3 never came
    /// assert!(after_gap.is_processed());
    /// assert_eq!(after_gap.gaps()[0].sequences(), 2..=3);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The effect's own error, unchanged; or the inbox's [`Error`] converted into `E`:
    /// [`cursor::Refused::Fenced`](Refused::Fenced),
    /// [`cursor::Refused::TooManyOpenGaps`](Refused::TooManyOpenGaps),
    /// [`cursor::Refused::BeforeFirstAvailable`](Refused::BeforeFirstAvailable),
    /// [`cursor::Refused::SequenceOutOfRange`](Refused::SequenceOutOfRange), and those of
    /// [`Inbox::process`]. Nothing commits on any of them. [`Ack::of`](crate::Ack::of) says what to
    /// do with the message.
    pub fn process<C, T, E, F>(
        &self,
        conn: &mut C,
        delivery: impl Into<Sequenced>,
        mut effect: F,
    ) -> Result<Outcome<T>, E>
    where
        C: InboxConnection,
        F: FnMut(&mut C) -> Result<T, E>,
        E: HandlerError,
    {
        let effect = async |tx: &mut C| effect(tx);
        run_ready(self.process_in::<Blocking, _, _, _>(conn, delivery.into(), effect))
    }

    /// A sequence's delivery in either flavour: the cursor's transaction, then what its
    /// failure records.
    pub(crate) async fn process_in<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: Sequenced,
        mut effect: impl Effect<C, Output = T, Error = E>,
    ) -> Result<Outcome<T>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let timer = observe::DeliveryTimer::start(self.consumer());
        let span = tracing::info_span!(
            "cursor",
            consumer = self.consumer(),
            stream = self.stream(),
            sequence = delivery.sequence
        );
        let result = async {
            let result = self.run_in(conn, &delivery, &mut effect).await;
            let if_err = match &result {
                Err(Failure::Handler(_) | Failure::Panicked(_)) => DeliveryOutcome::Failed,
                Ok(_) | Err(_) => DeliveryOutcome::Error,
            };
            let result = match result {
                Ok(outcome) => Ok(outcome),
                Err(Failure::Handler(error)) => {
                    self.after_handler_error(conn, &delivery, error).await
                }
                Err(Failure::Panicked(panic)) => {
                    let scope = scope_or_savepoint(conn);
                    let event = delivery.event.as_ref();
                    self.inbox
                        .after_handler_panic(conn, event, panic, scope)
                        .await
                }
                Err(failure) => Err(failure.into_error()),
            };
            (result, if_err)
        }
        .instrument(span)
        .await;
        let (result, if_err) = result;
        timer.finish(DeliveryOutcome::of(&result, if_err));
        result
    }

    /// Makes the caller the stream's owner: adds one to its epoch, so that every cursor
    /// writing with an older one is fenced from now on, and says where to resume. Call it
    /// when a partition is assigned to this instance, then write with
    /// [`epoch(lease.epoch())`](Self::epoch).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")] {
    /// use diesel::prelude::*;
    /// use diesel_inbox::{cursor, Error, Inbox};
    ///
    /// let mut conn = SqliteConnection::establish(":memory:")?;
    /// diesel_inbox::run_pending_migrations(&mut conn)?;
    /// let stream = Inbox::new("projector")?.cursor("orders-0")?;
    /// let apply = |_tx: &mut SqliteConnection| Ok::<_, Error>(());
    ///
    /// let old = stream.clone().epoch(stream.acquire(&mut conn, "worker-a")?.epoch());
    /// let new = stream.clone().epoch(stream.acquire(&mut conn, "worker-b")?.epoch());
    /// assert!(new.process(&mut conn, 1, apply)?.is_processed());
    /// let refused = old.process(&mut conn, 2, apply);
    /// assert!(matches!(refused, Err(Error::Cursor(cursor::Refused::Fenced { .. }))));
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Database`] and the other database errors of [`Inbox::process`].
    pub fn acquire<C: InboxConnection>(&self, conn: &mut C, owner: &str) -> Result<Lease, Error> {
        run_ready(self.acquire_in::<Blocking, _>(conn, owner))
    }

    /// [`acquire`](Self::acquire) in either flavour.
    pub(crate) async fn acquire_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        owner: &str,
    ) -> Result<Lease, Error> {
        let scope = engine::scope_of(conn)?;
        let subject = self.inbox.subject(None);
        let body = Acquire {
            cursor: self,
            owner,
        };
        let lease = engine::run(conn, scope, self.inbox.retry_policy(), subject, body)
            .await
            .map_err(Failure::into_error)?;
        info!(
            consumer = self.consumer(),
            stream = self.stream(),
            owner,
            epoch = lease.epoch,
            "stream acquired"
        );
        Ok(lease)
    }

    /// Where to seek the broker: the first sequence not settled, so that the sequences of
    /// gaps that may still fill come again, and those already settled after them come as
    /// duplicates.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn resume<C: InboxConnection>(&self, conn: &mut C) -> Result<Resume, Error> {
        run_ready(self.resume_in::<Blocking, _>(conn))
    }

    /// [`resume`](Self::resume) in either flavour.
    pub(crate) async fn resume_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Resume, Error> {
        let row = C::Backend::cursor(conn, self.key()).await?;
        Ok(resume_at(row.and_then(|row| row.watermark)))
    }

    /// Where the cursor stands, if it has a row: its watermark, highest sequence and epoch.
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn position<C: InboxConnection>(&self, conn: &mut C) -> Result<Option<Position>, Error> {
        run_ready(self.position_in::<Blocking, _>(conn))
    }

    /// [`position`](Self::position) in either flavour.
    pub(crate) async fn position_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
    ) -> Result<Option<Position>, Error> {
        let row = C::Backend::cursor(conn, self.key()).await?;
        Ok(row.map(|row| Position::from_row(self.stream().to_owned(), row)))
    }

    /// Every sequence cursor of `inbox`'s consumer, by stream name (a chain stream's position
    /// is [`Chain::position`](crate::chain::Chain::position)).
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn all<C: InboxConnection>(conn: &mut C, inbox: &Inbox) -> Result<Vec<Position>, Error> {
        run_ready(Self::all_in::<Blocking, _>(conn, inbox))
    }

    /// [`all`](Self::all) in either flavour.
    pub(crate) async fn all_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
        inbox: &Inbox,
    ) -> Result<Vec<Position>, Error> {
        let rows = C::Backend::cursors(conn, inbox.consumer()).await?;
        Ok(rows
            .into_iter()
            .map(|(stream, row)| Position::from_row(stream, row))
            .collect())
    }

    /// Every consumer with a sequence cursor or a gap, sorted by name (byte order): what to pass as
    /// the consumer of [`Cursor::all`] and [`Inbox::gaps`].
    ///
    /// # Errors
    ///
    /// [`Error::Database`].
    pub fn consumers<C: InboxConnection>(conn: &mut C) -> Result<Vec<String>, Error> {
        run_ready(Self::consumers_in::<Blocking, _>(conn))
    }

    /// [`consumers`](Self::consumers) in either flavour.
    pub(crate) async fn consumers_in<F, C: Db<F, Backend: Sql>>(
        conn: &mut C,
    ) -> Result<Vec<String>, Error> {
        Ok(C::Backend::consumers(conn, ConsumerRows::Streams).await?)
    }

    /// The transaction, retried under contention; failures come back for `process` to handle.
    async fn run_in<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: &Sequenced,
        effect: &mut impl Effect<C, Output = T, Error = E>,
    ) -> Result<Outcome<T>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let sequence = stored(delivery.sequence).map_err(Failure::Inbox)?;
        let first_available = delivery
            .first_available
            .map(stored)
            .transpose()
            .map_err(Failure::Inbox)?;
        let scope = engine::scope_of(conn)?;
        let event_id = delivery.event.as_ref().map(|event| event.id.as_str());
        let subject = self.inbox.subject(event_id);
        let body = Advance {
            cursor: self,
            delivery,
            at: Place {
                sequence,
                first_available,
            },
            effect,
            scope,
            advanced: None,
        };
        let advanced = engine::run(conn, scope, self.inbox.retry_policy(), subject, body).await?;
        self.report(&advanced.gaps);
        match advanced.delivered {
            Delivered::Outcome(outcome) => Ok(outcome),
            Delivered::PayloadConflict => match &delivery.event {
                Some(event) => Err(Failure::Inbox(Error::PayloadMismatch {
                    event_id: event.id.clone(),
                })),
                None => unreachable!("only an event id can conflict"),
            },
        }
    }

    /// The body of the cursor's transaction.
    async fn advance<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: &Sequenced,
        at: Place,
        effect: &mut impl Effect<C, Output = T, Error = E>,
        scope: Scope,
        advanced: Option<bool>,
    ) -> Result<Advanced<T>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
    {
        let now = now();
        let Place {
            sequence,
            first_available,
        } = at;
        let fast = match advanced {
            Some(advanced) => advanced,
            None => {
                at.may_advance_in_order()
                    && C::Backend::advance_cursor(
                        conn,
                        self.key(),
                        sequence,
                        self.stored_epoch(),
                        now,
                    )
                    .await?
            }
        };
        let (delivered, gaps) = if fast {
            let delivered = self
                .settle(conn, delivery, sequence, effect, Vec::new(), now)
                .await?;
            (delivered, Vec::new())
        } else {
            let mut stream = self.load(conn, now).await?;
            let before = (stream.watermark(), stream.high());
            let (verdict, gaps) = self
                .offer(conn, &mut stream, sequence, first_available, now)
                .await?;
            if (stream.watermark(), stream.high()) != before {
                self.save(conn, &stream, now).await?;
            }
            let delivered = match verdict {
                Verdict::New { .. } => {
                    self.settle(conn, delivery, sequence, effect, gaps.clone(), now)
                        .await?
                }
                Verdict::Duplicate => {
                    Delivered::Outcome(Self::duplicate(delivery.sequence, &stream))
                }
            };
            (delivered, gaps)
        };
        if scope == Scope::TopLevel {
            Tally::of(&delivered)
                .count(conn, (self.consumer(), self.stream()))
                .await?;
        }
        Ok(Advanced { delivered, gaps })
    }

    /// Runs the effect of a sequence the cursor took in; with an event id, through the inbox
    /// row too, which may find the event settled under another sequence.
    async fn settle<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: &Sequenced,
        sequence: i64,
        effect: &mut impl Effect<C, Output = T, Error = E>,
        gaps: Vec<Gap>,
        now: DateTime<Utc>,
    ) -> Result<Delivered<T>, Failure<E>>
    where
        C: Db<F, Backend: Sql>,
    {
        let value = match &delivery.event {
            // Nothing of the inbox's own follows a processed sequence without an event id.
            None => engine::call_user(conn, effect, Then::Commit).await?,
            Some(event) => {
                let key = self.inbox.key(event);
                let fingerprint = event.payload.as_ref().map(crate::Payload::fingerprint);
                let fingerprint_ref = fingerprint.as_ref().map(|f| &f[..]);
                let recorded = C::Backend::record_delivery(conn, key, now, fingerprint_ref)
                    .await
                    .map_err(|error| Failure::reading_events(error, key))?;
                match recorded {
                    Recorded::Seen(existing) => {
                        return inbox::seen(conn, key, fingerprint.as_ref(), existing).await;
                    }
                    Recorded::New => {
                        let value = inbox::run_effect(
                            conn,
                            key,
                            effect,
                            &|_: &T| Ok(None),
                            Then::Statements,
                        )
                        .await?;
                        C::Backend::insert_event_sequence(conn, self.key(), sequence, key.1)
                            .await?;
                        value
                    }
                }
            }
        };
        Ok(Delivered::Outcome(processed(value, gaps)))
    }

    /// Reads the stream under the cursor row's lock, creating the row if it is missing, and
    /// refuses a writer from another epoch.
    async fn load<F, C: Db<F, Backend: Sql>, E>(
        &self,
        conn: &mut C,
        now: DateTime<Utc>,
    ) -> Result<Stream, Failure<E>> {
        let row = C::Backend::cursor_or_insert(conn, self.key(), now).await?;
        let epoch = self.stored_epoch();
        if row.epoch != epoch {
            return Err(Failure::Inbox(Error::Cursor(Refused::Fenced {
                stream: self.stream().to_owned(),
                epoch: self.epoch,
                current: row.epoch.unsigned_abs(),
            })));
        }
        let open = C::Backend::gaps(
            conn,
            self.consumer(),
            Some(self.stream()),
            Some(GapState::Open),
        )
        .await?;
        let open = gaps::open_gaps(self.consumer(), open)
            .map_err(|corrupt| Failure::Inbox(corrupt.into()))?;
        Ok(Stream::new(row.high, open))
    }

    /// Offers one sequence to the loaded stream and writes the ledger changes; returns the
    /// verdict and the gaps it found.
    async fn offer<F, C: Db<F, Backend: Sql>, E>(
        &self,
        conn: &mut C,
        stream: &mut Stream,
        sequence: i64,
        first_available: Option<i64>,
        now: DateTime<Utc>,
    ) -> Result<(Verdict, Vec<Gap>), Failure<E>> {
        let mut changes = Vec::new();
        let verdict = stream
            .offer(
                sequence,
                first_available,
                self.max_open_gaps,
                now,
                &mut changes,
            )
            .map_err(|refusal| Failure::Inbox(self.refused(refusal, sequence)))?;
        let mut found = Vec::new();
        for change in changes {
            match change {
                Change::Insert { gap, detected } => {
                    let sequences = (gap.first, gap.last);
                    let id = C::Backend::insert_gap(
                        conn,
                        self.key(),
                        sequences,
                        gap.cause,
                        gap.detected_at,
                    )
                    .await?;
                    stream.inserted(gap.first, id);
                    if detected {
                        found.push(Gap::found(id, self.stream(), &gap));
                    }
                }
                Change::Update(gap) => {
                    let id = gap.id.ok_or(diesel::result::Error::NotFound)?;
                    C::Backend::update_gap(conn, id, (gap.first, gap.last), gap.cause).await?;
                }
                Change::Filled { id } => {
                    C::Backend::close_gap(conn, id, GapState::Filled, None, now).await?;
                }
            }
        }
        Ok((verdict, found))
    }

    /// Writes the stream's watermark and highest sequence.
    async fn save<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        stream: &Stream,
        now: DateTime<Utc>,
    ) -> diesel::QueryResult<()> {
        C::Backend::save_cursor(conn, self.key(), stream.watermark(), stream.high(), now).await
    }

    /// After the effect failed: with an event id, the inbox's failure policy records it; a
    /// dead-lettered event is then settled, so the cursor moves past its sequence.
    async fn after_handler_error<F, C, T, E>(
        &self,
        conn: &mut C,
        delivery: &Sequenced,
        error: E,
    ) -> Result<Outcome<T>, E>
    where
        C: Db<F, Backend: Sql>,
        E: HandlerError,
    {
        let Some(event) = &delivery.event else {
            return Err(error);
        };
        let scope = scope_or_savepoint(conn);
        let outcome = self
            .inbox
            .after_handler_error(conn, event, error, scope)
            .await?;
        if scope == Scope::TopLevel {
            // The inbox row now holds the event back, so this run skips the effect and
            // advances the cursor.
            let mut settled = HeldBack::<T, E>(&event.id, PhantomData);
            let _settled = self
                .run_in(conn, delivery, &mut settled)
                .await
                .map_err(Failure::into_error)?;
        }
        Ok(outcome)
    }

    /// Logs and counts the gaps a committed transaction found.
    fn report(&self, gaps: &[Gap]) {
        for gap in gaps {
            warn!(
                consumer = self.consumer(),
                stream = self.stream(),
                gap = gap.id,
                first = gap.first,
                last = gap.last,
                cause = %gap.cause,
                "gap in the stream: sequences missing; see diesel-inbox gaps"
            );
            observe::gap_found(self.consumer(), gap.cause, gap.len());
        }
    }

    /// A duplicate of a sequence the stream had settled.
    fn duplicate<T>(sequence: u64, stream: &Stream) -> Outcome<T> {
        Outcome::Duplicate(Duplicate {
            of: DuplicateOf::Sequence {
                sequence,
                watermark: stream.watermark(),
            },
        })
    }

    fn refused(&self, refusal: Refusal, sequence: i64) -> Error {
        let stream = self.stream().to_owned();
        Error::Cursor(match refusal {
            Refusal::BeforeFirstAvailable { first_available } => Refused::BeforeFirstAvailable {
                stream,
                sequence: sequence.unsigned_abs(),
                first_available: first_available.unsigned_abs(),
            },
            Refusal::TooManyOpenGaps { open } => Refused::TooManyOpenGaps { stream, open },
        })
    }

    /// The epoch as stored: 0 for a cursor without one.
    fn stored_epoch(&self) -> i64 {
        self.epoch
            .map_or(0, |epoch| i64::try_from(epoch).unwrap_or(i64::MAX))
    }

    fn key(&self) -> StreamKey<'_> {
        (self.consumer(), self.stream())
    }
}

/// Where a cursor stands: [`Cursor::position`], [`Cursor::all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    stream: String,
    watermark: Option<i64>,
    high: Option<i64>,
    epoch: u64,
    owner: Option<String>,
    updated_at: DateTime<Utc>,
}

impl Position {
    fn from_row(stream: String, row: sql::CursorRow) -> Self {
        Self {
            stream,
            watermark: row.watermark,
            high: row.high,
            epoch: row.epoch.unsigned_abs(),
            owner: row.owner,
            updated_at: row.updated_at,
        }
    }

    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Every sequence at or below it is settled (or evicted); `None` while none is: before
    /// the first sequence, or while a stream that starts at 0 has its first sequence in a gap.
    /// [`resume`](Self::resume) tells the two apart.
    pub fn watermark(&self) -> Option<u64> {
        self.watermark
            .and_then(|watermark| u64::try_from(watermark).ok())
    }

    /// The highest sequence settled.
    pub fn high(&self) -> Option<u64> {
        self.high.map(watermark::unstored)
    }

    /// Where to seek the broker.
    pub fn resume(&self) -> Resume {
        resume_at(self.watermark)
    }

    /// The fencing epoch; 0 when nobody acquired the stream.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Who acquired the current epoch.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// When the cursor last changed.
    pub fn updated_at(&self) -> DateTime<Utc> {
        self.updated_at
    }
}

/// A sequence as stored: `BIGINT`.
fn stored(sequence: u64) -> Result<i64, Error> {
    i64::try_from(sequence).map_err(|_| Refused::SequenceOutOfRange(sequence).into())
}

fn resume_at(watermark: Option<i64>) -> Resume {
    watermark.map_or(Resume::Fresh, |watermark| {
        Resume::At(u64::try_from(watermark + 1).unwrap_or(0))
    })
}

fn processed<T>(value: T, gaps: Vec<Gap>) -> Outcome<T> {
    if gaps.is_empty() {
        Outcome::Processed(value)
    } else {
        Outcome::ProcessedAfterGap { value, gaps }
    }
}

/// The scope the connection is in now that the cursor's own transaction is over.
fn scope_or_savepoint<F, C: Db<F>>(conn: &mut C) -> Scope {
    engine::scope_of(conn).unwrap_or(Scope::Savepoint)
}

/// The cursor's transaction body: [`Cursor::advance`], once per attempt.
struct Advance<'a, H> {
    cursor: &'a Cursor,
    delivery: &'a Sequenced,
    at: Place,
    effect: &'a mut H,
    scope: Scope,
    /// Whether the in-order advance that travelled with the attempt's `BEGIN` moved the
    /// cursor; `None` where none did.
    advanced: Option<bool>,
}

/// Where a delivery stands in its stream, as stored.
#[derive(Debug, Clone, Copy)]
struct Place {
    sequence: i64,
    /// The stream's first available sequence, where the delivery says it.
    first_available: Option<i64>,
}

impl Place {
    /// Whether the sequence may be the next one of a stream with no gap, so that one update
    /// moves the cursor: a first available sequence at or below it evicts nothing, since the
    /// watermark is just below.
    fn may_advance_in_order(self) -> bool {
        self.first_available
            .is_none_or(|first| first <= self.sequence)
    }
}

impl<F, C, T, E, H> Body<F, C> for Advance<'_, H>
where
    C: Db<F, Backend: Sql>,
    H: Effect<C, Output = T, Error = E>,
{
    type Output = Advanced<T>;
    type Error = E;

    async fn begin(
        &mut self,
        conn: &mut C,
        idle_timeout: Option<Duration>,
    ) -> Result<(), Failure<E>> {
        let (cursor, sequence) = (self.cursor, self.at.sequence);
        if self.at.may_advance_in_order() {
            let (key, epoch) = (cursor.key(), cursor.stored_epoch());
            let began = C::Backend::begin_and_advance_cursor(
                conn,
                idle_timeout,
                key,
                sequence,
                epoch,
                now(),
            )
            .await;
            if let Some(advanced) = began {
                self.advanced = Some(advanced?);
                return Ok(());
            }
        }
        engine::begin_top(conn, idle_timeout).await
    }

    async fn attempt(&mut self, conn: &mut C) -> Result<Advanced<T>, Failure<E>> {
        let Self {
            cursor,
            delivery,
            at,
            effect,
            scope,
            advanced,
        } = self;
        cursor
            .advance(conn, delivery, *at, &mut **effect, *scope, advanced.take())
            .await
    }
}

/// [`Cursor::acquire`]'s transaction: the row if missing, the next epoch, and the lease.
struct Acquire<'a> {
    cursor: &'a Cursor,
    owner: &'a str,
}

impl<F, C: Db<F, Backend: Sql>> Body<F, C> for Acquire<'_> {
    type Output = Lease;
    type Error = Error;

    async fn attempt(&mut self, tx: &mut C) -> Result<Lease, Failure<Error>> {
        let (key, now) = (self.cursor.key(), now());
        C::Backend::insert_cursor(tx, key, now).await?;
        C::Backend::bump_epoch(tx, key, self.owner, now).await?;
        let row = C::Backend::cursor(tx, key)
            .await?
            .ok_or(diesel::result::Error::NotFound)?;
        Ok(Lease {
            epoch: row.epoch.unsigned_abs(),
            resume: resume_at(row.watermark),
        })
    }
}

/// The effect of a sequence whose event was dead-lettered: the inbox row holds it back, so
/// it never runs. If it did, the row that held it back is gone (deleted by hand): the event
/// fails permanently, with a message that says so.
struct HeldBack<'a, T, E>(&'a EventId, PhantomData<fn() -> (T, E)>);

impl<C, T, E: From<Error>> Effect<C> for HeldBack<'_, T, E> {
    type Output = T;
    type Error = E;

    async fn call(&mut self, _: &mut C) -> Result<T, E> {
        let gone = format!(
            "event {:?} was dead-lettered, but the inbox row that held it back is gone",
            self.0.as_str()
        );
        Err(Error::permanent(gone).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_are_printable_text_of_at_most_255_bytes() {
        for name in ["orders-3", "ORDERS", "eth:mainnet", "kafka/topic/0", "café"] {
            assert_eq!(StreamName::new(name).unwrap().as_str(), name);
        }
        assert_eq!(StreamName::new(""), Err(InvalidStreamName::Empty));
        assert_eq!(
            StreamName::new(&"a".repeat(256)),
            Err(InvalidStreamName::TooLong { len: 256 })
        );
        assert_eq!(
            StreamName::new("a\nb"),
            Err(InvalidStreamName::ControlCharacter { index: 1 })
        );
    }

    #[test]
    fn a_cursor_resumes_at_the_first_sequence_not_settled() {
        assert_eq!(resume_at(None), Resume::Fresh);
        assert_eq!(resume_at(Some(-1)), Resume::At(0));
        assert_eq!(resume_at(Some(41)), Resume::At(42));
    }

    #[test]
    fn sequences_above_i64_max_are_refused() {
        assert_eq!(stored(7).unwrap(), 7);
        assert!(matches!(
            stored(u64::MAX),
            Err(Error::Cursor(Refused::SequenceOutOfRange(u64::MAX)))
        ));
    }
}
