//! The JetStream publisher and envelope decoding against the real NATS server on
//! 127.0.0.1:4222 (`source scripts/services` starts it). Each test makes its own in-memory
//! stream with a unique name and subject, and deletes it at the end, failed or not.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, Context};
use diesel_inbox::{envelope::Envelope, outbox::PublishError};
use diesel_inbox_nats::{envelope_of, JetStreamPublisher};
use futures_util::StreamExt;
use tokio::time::timeout;

const NATS: &str = "127.0.0.1:4222";
/// Bounds each test's body, and each step outside it.
const LIMIT: Duration = Duration::from_secs(30);

/// A stream of its own for one test.
#[derive(Clone)]
struct Scratch {
    context: Context,
    stream: String,
    /// The subject the stream captures.
    subject: String,
    /// A subject no stream captures.
    nowhere: String,
}

impl Scratch {
    fn publisher(&self) -> JetStreamPublisher {
        JetStreamPublisher::new(self.context.clone())
    }

    async fn stored(&self) -> u64 {
        let mut stream = self.context.get_stream(&self.stream).await.unwrap();
        stream.info().await.unwrap().state.messages
    }
}

/// Runs `test` on a fresh stream, made by `config` from the defaults, and deletes the stream
/// afterwards, whether the test passed, failed or timed out.
async fn with_stream<F, Fut>(config: impl FnOnce(stream::Config) -> stream::Config, test: F)
where
    F: FnOnce(Scratch) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let client = timeout(LIMIT, async_nats::connect(NATS))
        .await
        .expect("connecting to NATS timed out")
        .unwrap_or_else(|error| {
            panic!("NATS is not reachable at {NATS} ({error}); run `source scripts/services`")
        });
    let context = jetstream::new(client);
    let unique = uuid::Uuid::new_v4().simple().to_string();
    let scratch = Scratch {
        context: context.clone(),
        stream: format!("DIESEL_INBOX_TEST_{unique}"),
        subject: format!("diesel-inbox-test.{unique}.events"),
        nowhere: format!("diesel-inbox-test.{unique}.nowhere"),
    };
    let stream_config = config(stream::Config {
        name: scratch.stream.clone(),
        subjects: vec![scratch.subject.clone()],
        storage: stream::StorageType::Memory,
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    });
    timeout(LIMIT, context.create_stream(stream_config))
        .await
        .expect("creating the stream timed out")
        .expect("creating the stream");

    let outcome = tokio::spawn(timeout(LIMIT, test(scratch.clone()))).await;

    timeout(LIMIT, context.delete_stream(&scratch.stream))
        .await
        .expect("deleting the stream timed out")
        .expect("deleting the stream");
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(_elapsed)) => panic!("the test took longer than {LIMIT:?}"),
        Err(failed) => std::panic::resume_unwind(failed.into_panic()),
    }
}

fn placed(order: &str) -> Envelope {
    Envelope::new("order.placed", "order", order)
        .json(&serde_json::json!({"order": order, "total": 1250}))
        .unwrap()
}

#[tokio::test]
async fn publishing_the_same_event_twice_stores_it_once_and_succeeds_both_times() {
    with_stream(
        |config| config,
        |scratch| async move {
            let publisher = scratch.publisher();
            let event = placed("42");

            let first = publisher
                .publish_envelope(&scratch.subject, &event)
                .await
                .unwrap();
            let retry = publisher
                .publish_envelope(&scratch.subject, &event)
                .await
                .unwrap();
            assert!(!first.duplicate);
            assert!(retry.duplicate, "the dedup window absorbs the retry");
            assert_eq!(retry.sequence, first.sequence);
            assert_eq!(scratch.stored().await, 1);

            // Identity is the event id, not the content: the same order placed again, as a
            // new event, is stored.
            let again = publisher
                .publish_envelope(&scratch.subject, &placed("42"))
                .await
                .unwrap();
            assert!(!again.duplicate);
            assert_eq!(scratch.stored().await, 2);
        },
    )
    .await;
}

#[tokio::test]
async fn stored_events_decode_back_into_equal_envelopes() {
    with_stream(
        |config| config,
        |scratch| async move {
            let json = placed("7")
                .with_producer("orders-service")
                .with_schema_version(2)
                .with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .unwrap()
                .with_header("Tenant", "acme")
                .unwrap();
            let bytes = Envelope::new("frame.captured", "camera", "front-door")
                .with_producer("edge")
                .bytes(vec![0xde, 0xad, 0xbe, 0xef]);
            let publisher = scratch.publisher();
            for event in [&json, &bytes] {
                publisher
                    .publish_envelope(&scratch.subject, event)
                    .await
                    .unwrap();
            }

            let stream = scratch.context.get_stream(&scratch.stream).await.unwrap();
            let mut consumer = stream
                .create_consumer(pull::Config {
                    durable_name: Some("decoder".to_owned()),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut messages = consumer
                .fetch()
                .max_messages(2)
                .expires(Duration::from_secs(5))
                .messages()
                .await
                .unwrap();
            for event in [&json, &bytes] {
                let message = messages
                    .next()
                    .await
                    .expect("each stored event is fetched, in order")
                    .unwrap();
                assert_eq!(&envelope_of(&message).unwrap(), event);
                let headers = message.headers.as_ref().unwrap();
                assert_eq!(
                    headers
                        .get("Nats-Msg-Id")
                        .map(async_nats::HeaderValue::as_str),
                    Some(event.id().as_str()),
                    "the message id is the event id"
                );
                // Acked with the server's confirmation, so the consumer's state below is
                // settled.
                message.double_ack().await.unwrap();
            }

            let info = consumer.info().await.unwrap();
            assert_eq!(info.num_ack_pending, 0, "the acks reached the server");
            assert_eq!(info.ack_floor.stream_sequence, 2);
        },
    )
    .await;
}

#[tokio::test]
async fn publishing_to_a_subject_no_stream_captures_is_transient() {
    with_stream(
        |config| config,
        |scratch| async move {
            let failed = scratch
                .publisher()
                .publish_envelope(&scratch.nowhere, &placed("1"))
                .await
                .unwrap_err();
            assert!(failed.to_string().contains("no stream found"), "{failed}");
            assert!(
                matches!(failed, PublishError::Transient(_)),
                "a stream may capture it later: {failed}"
            );
        },
    )
    .await;
}

#[tokio::test]
async fn an_event_larger_than_the_servers_max_payload_is_permanent() {
    with_stream(
        |config| config,
        |scratch| async move {
            // max_payload is 1 MiB by default.
            let huge = placed("9").bytes(vec![0xab; 2 * 1024 * 1024]);
            let failed = scratch
                .publisher()
                .publish_envelope(&scratch.subject, &huge)
                .await
                .unwrap_err();
            assert!(
                failed.to_string().contains("max payload size exceeded"),
                "{failed}"
            );
            assert!(
                matches!(failed, PublishError::Permanent(_)),
                "it will never fit: {failed}"
            );
            assert_eq!(scratch.stored().await, 0);
        },
    )
    .await;
}

#[tokio::test]
async fn an_event_larger_than_the_streams_max_message_size_is_permanent() {
    with_stream(
        |config| stream::Config {
            max_message_size: 1024,
            ..config
        },
        |scratch| async move {
            let big = placed("3").json(&"x".repeat(2048)).unwrap();
            let failed = scratch
                .publisher()
                .publish_envelope(&scratch.subject, &big)
                .await
                .unwrap_err();
            assert!(failed.to_string().contains("error code 10054"), "{failed}");
            assert!(
                matches!(failed, PublishError::Permanent(_)),
                "the stream refuses it every time: {failed}"
            );
            assert_eq!(scratch.stored().await, 0);
        },
    )
    .await;
}

#[tokio::test]
async fn an_invalid_subject_is_permanent() {
    with_stream(
        |config| config,
        |scratch| async move {
            let failed = scratch
                .publisher()
                .publish_envelope("orders placed", &placed("5"))
                .await
                .unwrap_err();
            assert!(failed.to_string().contains("invalid subject"), "{failed}");
            assert!(
                matches!(failed, PublishError::Permanent(_)),
                "the topic is in the row: {failed}"
            );
        },
    )
    .await;
}

/// A JetStream stream as a governed replay's source, into an isolated target on SQLite.
#[cfg(feature = "async")]
mod replay {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, ExpressionMethods, QueryDsl, SqliteConnection};
    use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    use diesel_async::RunQueryDsl;
    use diesel_inbox::asynch::{self, ReplayHandler, ReplaySource as _};
    use diesel_inbox::replay::{self, Plan, Range, ReplayState, Replayed, Target};
    use diesel_inbox::{envelope::Envelope, AdminError, Audit, Error};
    use diesel_inbox_nats::JetStreamSource;

    use super::{placed, with_stream, Scratch};

    type Conn = SyncConnectionWrapper<SqliteConnection>;

    diesel::table! {
        orders_shadow (event_id) {
            event_id -> Text,
            position -> BigInt,
        }
    }

    /// The replay's handler: each event's id and stream sequence into `orders_shadow`.
    struct Shadow;

    impl ReplayHandler<Conn> for Shadow {
        type Error = Error;

        async fn apply(
            &mut self,
            tx: &mut Conn,
            event: &Envelope,
            replay: &Replayed,
        ) -> Result<(), Error> {
            assert_eq!(replay.destination(), Some("orders_shadow"));
            diesel::insert_into(orders_shadow::table)
                .values((
                    orders_shadow::event_id.eq(event.id().as_str()),
                    orders_shadow::position.eq(i64::try_from(replay.position()).unwrap()),
                ))
                .execute(tx)
                .await?;
            Ok(())
        }
    }

    /// An in-memory SQLite database with the inbox's tables and the shadow table.
    fn database() -> Conn {
        let mut setup = SqliteConnection::establish(":memory:").unwrap();
        diesel_inbox::run_pending_migrations(&mut setup).unwrap();
        setup
            .batch_execute(
                "CREATE TABLE orders_shadow (event_id TEXT PRIMARY KEY, position BIGINT NOT NULL)",
            )
            .unwrap();
        Conn::new(setup)
    }

    /// The shadow table's rows, (sequence, event id), in sequence order.
    async fn shadowed(conn: &mut Conn) -> Vec<(i64, String)> {
        orders_shadow::table
            .select((orders_shadow::position, orders_shadow::event_id))
            .order(orders_shadow::position)
            .load(conn)
            .await
            .unwrap()
    }

    /// Publishes `count` new events; returns their (sequence, event id).
    async fn publish(scratch: &Scratch, count: usize) -> Vec<(i64, String)> {
        let publisher = scratch.publisher();
        let mut stored = Vec::new();
        for n in 0..count {
            let event = placed(&n.to_string());
            let ack = publisher
                .publish_envelope(&scratch.subject, &event)
                .await
                .unwrap();
            assert!(!ack.duplicate);
            stored.push((i64::try_from(ack.sequence).unwrap(), event.id().to_string()));
        }
        stored
    }

    fn audit(reason: &str) -> Audit {
        Audit::new("ops@example.com", reason).unwrap()
    }

    async fn source(scratch: &Scratch) -> JetStreamSource {
        JetStreamSource::new(scratch.context.get_stream(&scratch.stream).await.unwrap())
    }

    /// Reconciles the finished replay `id` and accepts it; returns the evidence's re-read count.
    async fn reconcile_and_accept(
        conn: &mut Conn,
        replays: &asynch::Replays,
        id: i64,
        source: &mut JetStreamSource,
    ) -> u64 {
        let none = async |_: &mut Conn| Ok::<_, AdminError>(Vec::new());
        let evidence = replays.reconcile(conn, id, source, none).await.unwrap();
        assert!(evidence.matches(), "{:?}", evidence.differences);
        assert_eq!(evidence.recorded_digest, evidence.reread_digest);
        replays
            .accept(conn, id, &audit("counts and digest match"))
            .await
            .unwrap();
        assert_eq!(
            replays.get(conn, id).await.unwrap().state,
            ReplayState::Accepted
        );
        evidence.reread
    }

    #[tokio::test]
    async fn a_stream_replays_its_sequences_into_an_isolated_target_and_its_range_end_holds() {
        with_stream(
            |config| config,
            |scratch| async move {
                let published = publish(&scratch, 5).await;
                assert_eq!(published[0].0, 1);
                let mut conn = database();
                let mut source = source(&scratch).await;
                assert_eq!(
                    asynch::ReplaySource::<Conn>::name(&source),
                    format!("jetstream:{}", scratch.stream)
                );
                // Batches of 2: the run reads the range in three.
                let replays = asynch::Replays::new().batch_size(2);
                let target = Target::isolated("orders-rebuild", "orders_shadow").unwrap();
                let plan = Plan::new(target, Range::positions(1, 5).unwrap());
                let preview = replays
                    .preview(&mut conn, &mut source, &plan)
                    .await
                    .unwrap();
                assert_eq!(
                    (preview.events, preview.first, preview.last),
                    (5, Some(1), Some(5))
                );
                let replay = replays
                    .plan(
                        &mut conn,
                        &source,
                        &plan,
                        &audit("rebuild the orders projection"),
                    )
                    .await
                    .unwrap();
                assert_eq!(replay.source, format!("jetstream:{}", scratch.stream));

                // Published after the plan, past its range's end: never read.
                let later = publish(&scratch, 3).await;
                assert_eq!(later[0].0, 6);

                let run = replays
                    .run(&mut conn, replay.id, &mut source, &mut Shadow)
                    .await
                    .unwrap();
                assert!(run.finished);
                assert_eq!((run.counts.read, run.counts.processed), (5, 5));
                assert!(run.counts.add_up(), "{:?}", run.counts);
                assert_eq!(shadowed(&mut conn).await, published);

                let reread =
                    reconcile_and_accept(&mut conn, &replays, replay.id, &mut source).await;
                assert_eq!(
                    reread, 5,
                    "the reconciliation reads the same range, no further"
                );
            },
        )
        .await;
    }

    #[tokio::test]
    async fn a_sequence_deleted_from_the_stream_is_passed_over_and_the_replay_still_finishes() {
        with_stream(
            |config| config,
            |scratch| async move {
                let mut published = publish(&scratch, 5).await;
                let stream = scratch.context.get_stream(&scratch.stream).await.unwrap();
                assert!(stream.delete_message(3).await.unwrap());
                published.retain(|(seq, _)| *seq != 3);
                let mut conn = database();
                let mut source = source(&scratch).await;
                // Batches of 2: the second spans the gap, and reads past it to fill up.
                let replays = asynch::Replays::new().batch_size(2);
                let target = Target::isolated("orders-rebuild", "orders_shadow").unwrap();
                let plan = Plan::new(target, Range::positions(1, 5).unwrap());
                let replay = replays
                    .plan(
                        &mut conn,
                        &source,
                        &plan,
                        &audit("rebuild after a deletion"),
                    )
                    .await
                    .unwrap();

                let mut batches = Vec::new();
                let run = replays
                    .run_reporting(&mut conn, replay.id, &mut source, &mut Shadow, |report| {
                        batches.push(report.read_now);
                    })
                    .await
                    .unwrap();
                assert!(run.finished);
                assert_eq!((run.counts.read, run.counts.processed), (4, 4));
                assert_eq!(
                    batches,
                    [2, 4, 4],
                    "2 + 2, then the empty batch that ends it"
                );
                assert_eq!(shadowed(&mut conn).await, published);

                let reread =
                    reconcile_and_accept(&mut conn, &replays, replay.id, &mut source).await;
                assert_eq!(reread, 4);
            },
        )
        .await;
    }

    #[tokio::test]
    async fn a_message_deleted_after_the_run_shows_in_the_evidence() {
        with_stream(
            |config| config,
            |scratch| async move {
                publish(&scratch, 3).await;
                let mut conn = database();
                let mut source = source(&scratch).await;
                let replays = asynch::Replays::new();
                let target = Target::isolated("orders-rebuild", "orders_shadow").unwrap();
                let plan = Plan::new(target, Range::positions(1, 3).unwrap());
                let replay = replays
                    .plan(&mut conn, &source, &plan, &audit("rebuild"))
                    .await
                    .unwrap();
                let run = replays
                    .run(&mut conn, replay.id, &mut source, &mut Shadow)
                    .await
                    .unwrap();
                assert_eq!((run.finished, run.counts.read), (true, 3));

                let stream = scratch.context.get_stream(&scratch.stream).await.unwrap();
                assert!(stream.delete_message(2).await.unwrap());
                let none = async |_: &mut Conn| Ok::<_, AdminError>(Vec::new());
                let evidence = replays
                    .reconcile(&mut conn, replay.id, &mut source, none)
                    .await
                    .unwrap();
                assert_eq!(evidence.reread, 2);
                assert!(!evidence.matches(), "the source changed under the replay");
                assert_ne!(evidence.recorded_digest, evidence.reread_digest);
            },
        )
        .await;
    }

    #[tokio::test]
    async fn a_read_refuses_a_range_of_times_and_stops_at_the_ranges_end() {
        with_stream(
            |config| config,
            |scratch| async move {
                let published = placed("0").with_header("Tenant", "acme").unwrap();
                scratch
                    .publisher()
                    .publish_envelope(&scratch.subject, &published)
                    .await
                    .unwrap();
                let mut conn = database();
                let mut source = source(&scratch).await;
                let now = chrono::Utc::now();
                let times = Range::times(now - chrono::Duration::hours(1), now).unwrap();
                let refused = source.read(&mut conn, &times, None, 10).await.unwrap_err();
                match refused {
                    Error::Replay(replay::Refused::UnsupportedRange { source_name, range }) => {
                        assert_eq!(source_name, format!("jetstream:{}", scratch.stream));
                        assert_eq!(range, "times");
                    }
                    other => panic!("expected UnsupportedRange, got {other}"),
                }

                // Read directly: each event stamped, the broker's headers left out.
                let range = Range::positions(1, 10).unwrap();
                let events = source.read(&mut conn, &range, None, 10).await.unwrap();
                assert_eq!(events.len(), 1);
                let event = &events[0];
                assert_eq!(event.position, 1);
                assert!(event.at.is_some_and(|at| at <= chrono::Utc::now()));
                assert!(event.message.header("Nats-Msg-Id").is_none());
                let headers = event
                    .message
                    .headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()));
                let envelope = Envelope::from_message(headers, &event.message.body).unwrap();
                assert_eq!(envelope, published);
                // After the stream's last sequence: the end.
                let after = source.read(&mut conn, &range, Some(1), 10).await.unwrap();
                assert!(after.is_empty());

                // Published later: read where the range holds it, never past the range's end.
                publish(&scratch, 1).await;
                let first_only = Range::positions(1, 1).unwrap();
                let events = source.read(&mut conn, &first_only, None, 10).await.unwrap();
                assert_eq!(events.iter().map(|e| e.position).collect::<Vec<_>>(), [1]);
                let events = source.read(&mut conn, &range, Some(1), 10).await.unwrap();
                assert_eq!(events.iter().map(|e| e.position).collect::<Vec<_>>(), [2]);
            },
        )
        .await;
    }
}
