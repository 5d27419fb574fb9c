//! A JetStream stream as a governed replay's source: [`JetStreamSource`] (feature `async`).

use std::future::Future;
use std::time::SystemTime;

use async_nats::jetstream::message::StreamMessage;
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use chrono::{DateTime, Utc};

use diesel_inbox::asynch::ReplaySource;
use diesel_inbox::replay::{self, Range, SourceEvent};
use diesel_inbox::{envelope::Message, Error};

use super::is_nats_header;

/// A JetStream stream as a replay's source, on the async flavour
/// ([`asynch::Replays`](diesel_inbox::asynch::Replays)): a replay of [`Range::Positions`] reads
/// those stream sequences back, one message get each, from the stream's leader.
///
/// Its [name](ReplaySource::name), which the replay records, is `jetstream:` and the stream's
/// name (`jetstream:ORDERS`): a replay planned on one stream runs and reconciles only against a
/// source over a stream of that name. It reads no database, so it is a source for every
/// connection type.
///
/// What a read returns:
///
/// - **The range's sequences that the stream holds**, in order. A sequence the stream no longer
///   holds (deleted, purged, or dropped by the stream's limits: `max_age`, `max_msgs`,
///   `max_bytes`) is passed over, and the read goes on until it has its batch or passes the
///   end, so that an empty batch is the end of the range. Sequences before the stream's first
///   are skipped without a request; a deleted one inside the stream costs a request.
/// - **Nothing past the range's last sequence, nor past the stream's last sequence when it
///   reads**: messages published after the range's end are never read. A range whose last
///   sequence is beyond the stream's end when the replay runs also reads what is published
///   into it until the run reaches it; plan ranges within the stream's last sequence
///   (`stream.info().await?.state.last_sequence`).
/// - **Each message as the envelope's headers and body**, stamped with the time the stream
///   stored it. The headers in the `Nats-` namespace are the broker's (`Nats-Msg-Id` among
///   them) and are left out, as [`Envelope::from_message`](diesel_inbox::envelope::Envelope::from_message)
///   leaves them out; the others come in name order. A message that is not an envelope is
///   returned all the same: the replay skips it, counts it and notes why.
///
/// The reconciliation reads the range again: a message deleted, purged or aged out between
/// the run and the reconciliation shows as a difference in the evidence (counts and digest),
/// as it should. Keep the messages a replay reads in the stream until it is decided.
///
/// ```no_run
/// use async_nats::jetstream;
/// use diesel_inbox::asynch::{self, AsyncInboxConnection, ReplayHandler};
/// use diesel_inbox_nats::JetStreamSource;
/// use diesel_inbox::replay::{Plan, Range, Replayed, Target};
/// use diesel_inbox::{envelope::Envelope, AdminError, Audit};
///
/// /// Rebuilds the orders projection into the shadow tables the target names.
/// struct Rebuild;
///
/// impl<C: AsyncInboxConnection> ReplayHandler<C> for Rebuild {
///     type Error = diesel_inbox::Error;
///
///     async fn apply(&mut self, tx: &mut C, event: &Envelope, replay: &Replayed) -> Result<(), Self::Error> {
///         // Write the event's effect into `replay.destination()` ("orders_shadow") on `tx`.
///         let _ = (tx, event, replay.destination());
///         Ok(())
///     }
/// }
///
/// async fn rebuild<C: AsyncInboxConnection>(conn: &mut C) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     let context = jetstream::new(async_nats::connect("127.0.0.1:4222").await?);
///     let mut stream = context.get_stream("ORDERS").await?;
///     let last = stream.info().await?.state.last_sequence;
///     let mut source = JetStreamSource::new(stream);
///
///     // Stream sequences 1 to the last one now: what is published later is not read.
///     let replays = asynch::Replays::new();
///     let plan = Plan::new(Target::isolated("orders-rebuild", "orders_shadow")?, Range::positions(1, last)?);
///     let audit = Audit::new("ops@example.com", "rebuild the orders projection after fix #42")?;
///     let replay = replays.plan(conn, &source, &plan, &audit).await?;
///
///     // Resumes from its checkpoint when run again after a failure.
///     let run = replays.run(conn, replay.id, &mut source, &mut Rebuild).await?;
///     assert!(run.finished);
///
///     let none = async |_: &mut C| Ok::<_, AdminError>(Vec::new());
///     let evidence = replays.reconcile(conn, replay.id, &mut source, none).await?;
///     if evidence.matches() {
///         replays.accept(conn, replay.id, &Audit::new("ops@example.com", "counts and digest match")?).await?;
///     }
///     Ok(())
/// }
/// ```
///
/// # Errors
///
/// A read returns [`replay::Refused::UnsupportedRange`] for a range of times or ids (plan the
/// replay with stream sequences), and [`replay::Refused::Source`] when the stream's info or a
/// message cannot be read: a timeout, a lost connection, the stream deleted, no leader. The
/// run stops on either, and resumes from its checkpoint when run again.
#[derive(Debug, Clone)]
pub struct JetStreamSource {
    stream: Stream,
    name: String,
}

impl JetStreamSource {
    /// The source over `stream`, as `Context::get_stream` returns it (with its info, which
    /// names it).
    pub fn new(stream: Stream) -> Self {
        let name = format!("jetstream:{}", stream.cached_info().config.name);
        Self { stream, name }
    }

    /// Up to `limit` messages from sequence `first` (or after `after`) to `last`, as
    /// [`JetStreamSource`] describes them.
    async fn read_sequences(
        &self,
        first: u64,
        last: u64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<SourceEvent>, Error> {
        let start = after
            .map_or(first, |after| after.saturating_add(1))
            .max(first);
        if start > last {
            return Ok(Vec::new());
        }
        let state = self
            .stream
            .get_info()
            .await
            .map_err(|error| self.failed(format!("reading the stream's info: {error}")))?
            .state;
        // Sequences start at 1; those before the stream's first are gone.
        let start = start.max(state.first_sequence).max(1);
        let end = last.min(state.last_sequence);
        let limit = limit.max(1);
        let mut events = Vec::new();
        for sequence in start..=end {
            if events.len() == limit {
                break;
            }
            match self.stream.get_raw_message(sequence).await {
                Ok(message) => events.push(event_of(&message)),
                Err(error) if error.kind() == RawMessageErrorKind::NoMessageFound => {}
                Err(error) => {
                    return Err(self.failed(format!("reading sequence {sequence}: {error}")));
                }
            }
        }
        Ok(events)
    }

    /// A failure to read, as the replay reports it.
    fn failed(&self, message: String) -> Error {
        replay::Refused::Source {
            source_name: self.name.clone(),
            message,
        }
        .into()
    }
}

/// A stored message as the source event at its sequence: its headers but the broker's, in name
/// order, its payload, and when the stream stored it.
fn event_of(message: &StreamMessage) -> SourceEvent {
    let mut headers: Vec<(String, String)> = message
        .headers
        .iter()
        .map(|(name, values)| (AsRef::<str>::as_ref(name), values))
        .filter(|(name, _)| !is_nats_header(name))
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |value| (name.to_owned(), value.as_str().to_owned()))
        })
        .collect();
    // Stable: the values of a repeated header keep their order.
    headers.sort_by(|(a, _), (b, _)| a.cmp(b));
    let at = DateTime::<Utc>::from(SystemTime::from(message.time));
    let body = message.payload.to_vec();
    SourceEvent::new(message.sequence, Message::new(headers, body)).stamped(at)
}

impl<C> ReplaySource<C> for JetStreamSource {
    /// `jetstream:` and the stream's name.
    fn name(&self) -> String {
        self.name.clone()
    }

    /// The stream sequences of a [`Range::Positions`], as [`JetStreamSource`] describes them;
    /// `conn` is not used.
    fn read(
        &mut self,
        _conn: &mut C,
        range: &Range,
        after: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<SourceEvent>, Error>> + Send {
        let bounds = match range {
            Range::Positions { first, last } => Ok((*first, *last)),
            other => Err(other.unsupported_by(&self.name)),
        };
        async move {
            let (first, last) = bounds?;
            self.read_sequences(first, last, after, limit).await
        }
    }
}
