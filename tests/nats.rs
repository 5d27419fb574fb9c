//! The JetStream publisher and envelope decoding against the real NATS server on
//! 127.0.0.1:4222 (`source scripts/services` starts it). Each test makes its own in-memory
//! stream with a unique name and subject, and deletes it at the end, failed or not.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, stream, Context};
use diesel_inbox::nats::{envelope_of, JetStreamPublisher};
use diesel_inbox::{Envelope, PublishError};
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
