//! The relay against a real JetStream server, killed with SIGKILL at random points and
//! restarted: no event is lost, the broker's dedup window stores each event once, order per
//! aggregate holds across the restarts, and a consumer through the inbox takes effect once per
//! event even when the stream is delivered twice.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_inbox::nats::{envelope_of, JetStreamPublisher};
use diesel_inbox::{
    AsyncPublisher, Envelope, Inbox, Outbox, OutboxMessage, PublishError, Relay,
};
use futures_util::StreamExt;

use crate::support::{setup, Backend, ChildTest, TestConn};

/// Set in the child: the database URL, and the subject prefix its relay publishes under.
const RELAY_CHILD: &str = "DIESEL_INBOX_RELAY_CHILD";
const SUBJECT: &str = "DIESEL_INBOX_RELAY_SUBJECT";

const NATS: &str = "127.0.0.1:4222";
const AGGREGATES: usize = 6;
const EVENTS_PER_AGGREGATE: usize = 40;
const KILLS: usize = 6;
/// Each child relay runs with a lease this short, so that the next one takes its rows over
/// soon after it is killed.
const LEASE: Duration = Duration::from_millis(500);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A publisher that prints each acknowledged publish, for the parent to count.
struct Counting(JetStreamPublisher);

impl AsyncPublisher for Counting {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.0.publish(message).await?;
        println!("published {}", message.envelope.id());
        Ok(())
    }
}

/// The child: relays the outbox to JetStream until it is killed.
fn relay_until_killed<B: Backend>(url: &str, subject: &str) {
    let _ = subject;
    let pool = Pool::builder()
        .max_size(1)
        .build(ConnectionManager::<B::Conn>::new(url))
        .unwrap();
    runtime().block_on(async {
        let client = async_nats::connect(NATS).await.unwrap();
        let publisher = Counting(JetStreamPublisher::new(jetstream::new(client)));
        let relay = Relay::new()
            .batch_size(7)
            .lease(LEASE)
            .backoff(Duration::from_millis(50), Duration::from_millis(200));
        println!("relay started");
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let pass = relay.run_once_async(&pool, &publisher).await.unwrap();
            if pass.is_idle() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
}

pub fn a_relay_killed_at_random_points_loses_no_event_and_keeps_order_per_aggregate<B: Backend>()
{
    if let Ok(url) = std::env::var(RELAY_CHILD) {
        relay_until_killed::<B>(&url, &std::env::var(SUBJECT).unwrap());
        return;
    }
    let (db, mut conn) = setup::<B>();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("relay_{run}");
    let outbox = Outbox::new("orders-service").unwrap();
    for n in 1..=EVENTS_PER_AGGREGATE {
        for aggregate in 0..AGGREGATES {
            let event = Envelope::new("order.changed", "order", &aggregate.to_string())
                .json(&serde_json::json!({"aggregate": aggregate, "n": n}))
                .unwrap();
            outbox
                .enqueue(&mut conn, &format!("{prefix}.order.{aggregate}"), &event)
                .unwrap();
        }
    }
    let total = AGGREGATES * EVENTS_PER_AGGREGATE;
    let rt = runtime();
    let js = rt.block_on(async {
        let js = jetstream::new(async_nats::connect(NATS).await.unwrap());
        js.create_stream(stream::Config {
            name: prefix.clone(),
            subjects: vec![format!("{prefix}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
        js
    });

    // Kill the relay at random points, each time in a new process.
    let test = "a_relay_killed_at_random_points_loses_no_event_and_keeps_order_per_aggregate";
    let mut publishes = 0;
    let mut kills = 0;
    for _ in 0..KILLS {
        let mut child = ChildTest::spawn(test, &[(RELAY_CHILD, db.url()), (SUBJECT, &prefix)]);
        child.wait_for("relay started", Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(fastrand::u64(50..400)));
        child.kill();
        kills += 1;
        publishes += child
            .printed()
            .iter()
            .filter(|line| line.starts_with("published "))
            .count();
    }
    let left = outbox.stats(&mut conn).unwrap().pending;

    // A last relay, in this process, publishes the rest once the dead ones' leases run out.
    let pool = db.pool(1);
    let publisher = JetStreamPublisher::new(js.clone());
    let relay = Relay::new().lease(LEASE);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = 0;
    while outbox.stats(&mut conn).unwrap().pending > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        let pass = rt.block_on(relay.run_once_async(&pool, &publisher)).unwrap();
        last += pass.published;
        if pass.is_idle() {
            std::thread::sleep(LEASE / 5);
        }
    }

    // What the stream holds: each event once, in order per aggregate.
    let stored = rt.block_on(read_stream(&js, &prefix, total));
    let ids: HashSet<&str> = stored.iter().map(|e| e.id().as_str()).collect();
    let mut per_aggregate: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for event in &stored {
        let payload: serde_json::Value = event.decode_json().unwrap();
        per_aggregate
            .entry(event.aggregate_id().to_owned())
            .or_default()
            .push(payload["n"].as_u64().unwrap());
    }
    println!(
        "relay crash on {}: {kills} kills, {publishes} publishes acknowledged before the kills, {left} rows left pending after them, {last} published by the last relay, {} stored in the stream ({} distinct) of {total} enqueued",
        std::any::type_name::<B>().rsplit("::").next().unwrap(),
        stored.len(),
        ids.len()
    );
    assert_eq!(kills, KILLS);
    assert_eq!(ids.len(), total, "every event published");
    assert_eq!(stored.len(), total, "the dedup window stored each once");
    for (aggregate, ns) in &per_aggregate {
        let expected: Vec<u64> = (1..=EVENTS_PER_AGGREGATE as u64).collect();
        assert_eq!(ns, &expected, "order of aggregate {aggregate}");
    }

    // Consumed twice over (a redelivery of everything), through the inbox: one effect each.
    let inbox = Inbox::new("shipping").unwrap();
    for _pass in 0..2 {
        for event in &stored {
            let outcome = inbox
                .process(&mut conn, event, |tx| tx.record_effect(event.id().as_str()))
                .unwrap();
            assert!(outcome.is_processed() || outcome.is_duplicate());
        }
    }
    println!("consumed {} deliveries, {} effects", 2 * stored.len(), conn.effect_count());
    assert_eq!(conn.effect_count(), total);
    rt.block_on(js.delete_stream(&prefix)).unwrap();
}

/// Every message of the stream, in stream order, read by an ephemeral pull consumer.
async fn read_stream(js: &jetstream::Context, name: &str, expected: usize) -> Vec<Envelope> {
    let stream = js.get_stream(name).await.unwrap();
    let consumer = stream
        .create_consumer(pull::Config {
            ack_policy: jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut messages = consumer
        .fetch()
        .max_messages(expected + 10)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .unwrap();
    let mut envelopes = Vec::new();
    while let Some(message) = messages.next().await {
        envelopes.push(envelope_of(&message.unwrap()).unwrap());
    }
    envelopes
}
