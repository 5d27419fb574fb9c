//! The relay against a real JetStream server, killed with SIGKILL at random points and
//! restarted: no event is lost, the broker's dedup window stores each event once, order per
//! aggregate holds across the restarts, and a consumer through the inbox takes effect once per
//! event even when the stream is delivered twice.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, stream};
use diesel::r2d2::{ConnectionManager, Pool};
use diesel_inbox::{
    envelope::Envelope,
    outbox::{AsyncPublisher, Outbox, OutboxMessage, PublishError, Relay},
    Inbox,
};
use diesel_inbox_nats::{envelope_of, JetStreamPublisher};
use futures_util::StreamExt;

use crate::support::{runtime, setup, Backend, ChildTest, TestConn};

/// Set in the child: the database URL, and the subject prefix its relay publishes under.
const RELAY_CHILD: &str = "DIESEL_INBOX_RELAY_CHILD";
const SUBJECT: &str = "DIESEL_INBOX_RELAY_SUBJECT";

const NATS: &str = "127.0.0.1:4222";
const AGGREGATES: usize = 6;
const EVENTS_PER_AGGREGATE: usize = 100;
const KILLS: usize = 8;
/// Each child relay runs with a lease this short, so that the next one takes its rows over
/// soon after it is killed.
const LEASE: Duration = Duration::from_millis(500);

/// A publisher that counts acknowledged publishes, and those the broker's dedup window dropped
/// as duplicates; in a child, it prints each for the parent to count.
struct Counting {
    inner: JetStreamPublisher,
    acks: AtomicUsize,
    duplicates: AtomicUsize,
    print: bool,
}

impl Counting {
    fn new(js: jetstream::Context, print: bool) -> Self {
        Self {
            inner: JetStreamPublisher::new(js),
            acks: AtomicUsize::new(0),
            duplicates: AtomicUsize::new(0),
            print,
        }
    }
}

impl AsyncPublisher for Counting {
    async fn publish(&self, message: &OutboxMessage) -> Result<(), PublishError> {
        let ack = self
            .inner
            .publish_envelope(&message.topic, &message.envelope)
            .await?;
        self.acks.fetch_add(1, Ordering::Relaxed);
        self.duplicates
            .fetch_add(usize::from(ack.duplicate), Ordering::Relaxed);
        if self.print {
            println!(
                "published {} duplicate={}",
                message.envelope.id(),
                ack.duplicate
            );
        }
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
        let publisher = Counting::new(jetstream::new(client), true);
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

/// What the killed relays printed before they died: publishes the stream acknowledged, and
/// how many of those it dropped as duplicates.
#[derive(Default)]
struct Killed {
    kills: usize,
    acks: usize,
    duplicates: usize,
}

/// Starts a relay `KILLS` times, each time in a new process, and kills it at a random point.
fn kill_relays(test: &str, url: &str, prefix: &str) -> Killed {
    let mut seen = Killed::default();
    for _ in 0..KILLS {
        let mut child = ChildTest::spawn(test, &[(RELAY_CHILD, url), (SUBJECT, prefix)]);
        child.wait_for("relay started", Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(fastrand::u64(20..250)));
        child.kill();
        seen.kills += 1;
        for line in child.printed() {
            if line.starts_with("published ") {
                seen.acks += 1;
                seen.duplicates += usize::from(line.ends_with("duplicate=true"));
            }
        }
    }
    seen
}

/// Enqueues `EVENTS_PER_AGGREGATE` events for each of `AGGREGATES` orders, interleaved.
fn enqueue_events<C: TestConn>(conn: &mut C, prefix: &str) {
    let outbox = Outbox::new("orders-service").unwrap();
    for n in 1..=EVENTS_PER_AGGREGATE {
        for aggregate in 0..AGGREGATES {
            let event = Envelope::new("order.changed", "order", &aggregate.to_string())
                .json(&serde_json::json!({"aggregate": aggregate, "n": n}))
                .unwrap();
            let subject = format!("{prefix}.order.{aggregate}");
            outbox.enqueue(conn, &subject, &event).unwrap();
        }
    }
}

pub fn a_relay_killed_at_random_points_loses_no_event_and_keeps_order_per_aggregate<B: Backend>() {
    const TEST: &str =
        "a_relay_killed_at_random_points_loses_no_event_and_keeps_order_per_aggregate";
    if let Ok(url) = std::env::var(RELAY_CHILD) {
        relay_until_killed::<B>(&url, &std::env::var(SUBJECT).unwrap());
        return;
    }
    let (db, mut conn) = setup::<B>();
    let prefix = format!("relay_{}", uuid::Uuid::new_v4().simple());
    enqueue_events(&mut conn, &prefix);
    let total = AGGREGATES * EVENTS_PER_AGGREGATE;
    let rt = runtime();
    let js = rt.block_on(async {
        let js = jetstream::new(async_nats::connect(NATS).await.unwrap());
        let config = stream::Config {
            name: prefix.clone(),
            subjects: vec![format!("{prefix}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        js.create_stream(config).await.unwrap();
        js
    });

    let killed = kill_relays(TEST, db.url(), &prefix);
    let left = Outbox::stats(&mut conn).unwrap().pending;

    // A last relay, in this process, publishes the rest once the dead ones' leases run out.
    let pool = db.pool(1);
    let last = Counting::new(js.clone(), false);
    let relay = Relay::new().lease(LEASE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Outbox::stats(&mut conn).unwrap().pending > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        let pass = rt.block_on(relay.run_once_async(&pool, &last)).unwrap();
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
        let n = payload["n"].as_u64().unwrap();
        per_aggregate
            .entry(event.aggregate_id().to_owned())
            .or_default()
            .push(n);
    }
    println!(
        "relay crash on {}: {} kills; {} publishes acknowledged before the kills, {} of them dropped by the dedup window; {left} rows left pending after them; the last relay's {} publishes, {} of them duplicates; {} stored in the stream ({} distinct) of {total} enqueued",
        std::any::type_name::<B>().rsplit("::").next().unwrap(),
        killed.kills,
        killed.acks,
        killed.duplicates,
        last.acks.load(Ordering::Relaxed),
        last.duplicates.load(Ordering::Relaxed),
        stored.len(),
        ids.len()
    );
    assert_eq!(killed.kills, KILLS);
    assert_eq!(ids.len(), total, "every event published");
    assert_eq!(stored.len(), total, "the dedup window stored each once");
    let expected: Vec<u64> = (1..=EVENTS_PER_AGGREGATE as u64).collect();
    for (aggregate, ns) in &per_aggregate {
        assert_eq!(ns, &expected, "order of aggregate {aggregate}");
    }

    // Consumed twice over (a redelivery of everything), through the inbox: one effect each.
    let inbox = Inbox::new("shipping").unwrap();
    for event in stored.iter().chain(&stored) {
        let outcome = inbox
            .process(&mut conn, event, |tx| tx.record_effect(event.id().as_str()))
            .unwrap();
        assert!(outcome.is_processed() || outcome.is_duplicate());
    }
    let effects = conn.effect_count();
    println!(
        "consumed {} deliveries, {effects} effects",
        2 * stored.len()
    );
    assert_eq!(effects, total);
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
