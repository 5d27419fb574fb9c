//! Where a replay reads its events: the [`ReplaySource`] trait, and the producer's outbox as
//! one ([`OutboxSource`]).

use std::collections::BTreeMap;
use std::future::Future;

use chrono::{DateTime, Utc};

use super::plan::{Place, Range};
use crate::engine::run_ready;
use crate::outbox::sql::{OutboxRow, OutboxSql};
use crate::sql::{Blocking, Db, Sql};
use crate::{
    envelope::{Envelope, Message},
    Error, InboxConnection,
};

/// The name an outbox source records (followed by `:` and the aggregate, for one aggregate's
/// events): retention keeps the outbox rows an open replay of it reads.
pub(crate) const OUTBOX: &str = "outbox";

/// One event a source read: its position in the source, when the source stamped it (where it
/// keeps that), and the message as the broker carried it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SourceEvent {
    /// Its position: an outbox position, a stream sequence, an offset; for an
    /// [`Range::Ids`] range, its place in the list, from 1.
    pub position: u64,
    /// When the source stamped it; `None` where the source keeps no time.
    pub at: Option<DateTime<Utc>>,
    /// The message: the envelope's headers and body.
    pub message: Message,
}

impl SourceEvent {
    /// The message at `position`.
    pub fn new(position: u64, message: Message) -> Self {
        Self {
            position,
            at: None,
            message,
        }
    }

    /// The envelope at `position`, as a producer would have sent it.
    pub fn of_envelope(position: u64, envelope: &Envelope) -> Self {
        Self::new(position, envelope.to_message())
    }

    /// Stamped at `at`: what a [`Range::Times`] range reads.
    #[must_use]
    pub fn stamped(mut self, at: DateTime<Utc>) -> Self {
        self.at = Some(at);
        self
    }
}

/// Where a replay reads its events, for connections `C`: the outbox ([`OutboxSource`]), a
/// JetStream stream (`diesel_inbox_nats::JetStreamSource`, on the async flavour), or an archive or a
/// Kafka topic in a screen of code:
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox::replay::{Range, ReplaySource, SourceEvent};
/// use diesel_inbox::{envelope::Envelope, Error};
///
/// /// An archive the app keeps: (offset, envelope) in offset order.
/// struct Archive(Vec<(u64, Envelope)>);
///
/// impl ReplaySource<SqliteConnection> for Archive {
///     fn name(&self) -> String {
///         "archive:payments".into()
///     }
///
///     fn read(&mut self, _: &mut SqliteConnection, range: &Range, after: Option<u64>, limit: usize) -> Result<Vec<SourceEvent>, Error> {
///         let Range::Positions { last, .. } = range else {
///             return Err(range.unsupported_by(&self.name()));
///         };
///         Ok(self.0.iter()
///             .filter(|(offset, _)| after.is_none_or(|after| *offset > after) && offset <= last)
///             .take(limit)
///             .map(|(offset, envelope)| SourceEvent::of_envelope(*offset, envelope))
///             .collect())
///     }
/// }
/// # }
/// ```
///
/// The replay drops what a source returns outside the range, so the range's end holds
/// whatever the source does.
pub trait ReplaySource<C> {
    /// The source's name, kept with the replay: a replay runs and reconciles only against a
    /// source of the same name.
    fn name(&self) -> String;

    /// Up to `limit` events of `range` after position `after` (from the range's start when
    /// `None`), in position order. An empty batch ends the range.
    ///
    /// # Errors
    ///
    /// Any: the run stops, and resumes from its checkpoint.
    fn read(
        &mut self,
        conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<SourceEvent>, Error>;
}

/// The producer's outbox as a replay's source: its rows are kept until pruned, and retention
/// keeps those an open replay reads. Reads positions, enqueue times or event ids, of every
/// aggregate or of one.
///
/// ```
/// use diesel_inbox::replay::OutboxSource;
///
/// let every_order = OutboxSource::new();
/// let one_order = OutboxSource::new().aggregate("order", "42");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct OutboxSource {
    aggregate: Option<(String, String)>,
}

impl OutboxSource {
    /// Every aggregate's events.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the events of the aggregate `(aggregate_type, aggregate_id)`.
    pub fn aggregate(mut self, aggregate_type: &str, aggregate_id: &str) -> Self {
        self.aggregate = Some((aggregate_type.to_owned(), aggregate_id.to_owned()));
        self
    }

    /// Its name: `outbox`, or `outbox:{type}/{id}` for one aggregate's events (`%` and `/`
    /// in the type escaped as `%25` and `%2F`), so that a replay runs and reconciles against
    /// the events it was planned with.
    pub(crate) fn name(&self) -> String {
        match &self.aggregate {
            None => OUTBOX.to_owned(),
            Some((kind, id)) => {
                let kind = kind.replace('%', "%25").replace('/', "%2F");
                format!("{OUTBOX}:{kind}/{id}")
            }
        }
    }

    /// The outbox source a replay's record names ([`ReplayRecord::source`](super::ReplayRecord)):
    /// what ops' tools run and reconcile it with. `None` for another source's name.
    ///
    /// ```
    /// use diesel_inbox::replay::OutboxSource;
    ///
    /// let one = OutboxSource::new().aggregate("order/v2", "42");
    /// assert_eq!(OutboxSource::from_name("outbox:order%2Fv2/42"), Some(one));
    /// assert_eq!(OutboxSource::from_name("outbox"), Some(OutboxSource::new()));
    /// assert_eq!(OutboxSource::from_name("jetstream:ORDERS"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        if name == OUTBOX {
            return Some(Self::new());
        }
        let (kind, id) = name
            .strip_prefix(OUTBOX)?
            .strip_prefix(':')?
            .split_once('/')?;
        let kind = kind.replace("%2F", "/").replace("%25", "%");
        Some(Self::new().aggregate(&kind, id))
    }

    /// [`ReplaySource::read`] in either flavour.
    pub(crate) async fn read_in<F, C: Db<F, Backend: Sql>>(
        &self,
        conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<SourceEvent>, Error> {
        let limit = limit.max(1);
        let page = i64::try_from(limit).unwrap_or(i64::MAX);
        let stored = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let mut events = Vec::new();
        if let Range::Ids(ids) = range {
            let start = after.unwrap_or(0);
            for (index, id) in ids
                .iter()
                .enumerate()
                .skip(usize::try_from(start).unwrap_or(usize::MAX))
            {
                if events.len() == limit {
                    break;
                }
                if let Some(row) = C::Backend::outbox_row_of_event(conn, id.as_str()).await? {
                    if self.takes(&row) {
                        events.push(event(index as u64 + 1, &row)?);
                    }
                }
            }
            return Ok(events);
        }
        let mut cursor = match range {
            Range::Positions { first, .. } => {
                stored(after.unwrap_or(0).max(first.saturating_sub(1)))
            }
            _ => stored(after.unwrap_or(0)),
        };
        // Pages until the batch is full or the range ends: rows of other aggregates, or
        // stamped before the range, are passed over.
        loop {
            let rows = C::Backend::outbox_rows(conn, None, cursor, page).await?;
            let full = rows.len() as u64 == limit as u64;
            for row in rows {
                let row = crate::backend::readable(row)?;
                cursor = row.position;
                let position = row.position.unsigned_abs();
                let past_end = match range {
                    Range::Positions { last, .. } => position > *last,
                    Range::Times { to, .. } => row.enqueued_at >= *to,
                    Range::Ids(_) => unreachable!("read above"),
                };
                if past_end {
                    return Ok(events);
                }
                if self.takes(&row) && range.place(position, Some(row.enqueued_at)) == Place::Inside
                {
                    events.push(event(position, &row)?);
                    if events.len() == limit {
                        return Ok(events);
                    }
                }
            }
            if !full {
                return Ok(events);
            }
        }
    }

    fn takes(&self, row: &OutboxRow) -> bool {
        self.aggregate
            .as_ref()
            .is_none_or(|(kind, id)| *kind == row.aggregate_type && *id == row.aggregate_id)
    }
}

/// An outbox row as the message it was published as.
fn event(position: u64, row: &OutboxRow) -> Result<SourceEvent, Error> {
    let headers: BTreeMap<String, String> = serde_json::from_str(&row.headers).map_err(|error| {
        Error::invalid_envelope(format!(
            "the headers of outbox row {} are not a JSON object of strings ({error}): repair the row",
            row.position
        ))
    })?;
    let message = Message {
        headers: headers.into_iter().collect(),
        body: row.body.clone(),
    };
    Ok(SourceEvent::new(position, message).stamped(row.enqueued_at))
}

impl<C: InboxConnection> ReplaySource<C> for OutboxSource {
    fn name(&self) -> String {
        self.name()
    }

    fn read(
        &mut self,
        conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<SourceEvent>, Error> {
        run_ready(self.read_in::<Blocking, _>(conn, range, after, limit))
    }
}

/// A source as the replay calls it, in either flavour: a sync [`ReplaySource`] (ready
/// futures) or the async one.
pub(crate) trait Feed<C> {
    /// [`ReplaySource::name`].
    fn name(&self) -> String;

    /// [`ReplaySource::read`].
    fn read(
        &mut self,
        conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>>;
}

/// A sync [`ReplaySource`].
pub(crate) struct Sync<'a, S>(pub(crate) &'a mut S);

impl<C, S: ReplaySource<C>> Feed<C> for Sync<'_, S> {
    fn name(&self) -> String {
        self.0.name()
    }

    fn read(
        &mut self,
        conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>> {
        std::future::ready(self.0.read(conn, range, after, limit))
    }
}
