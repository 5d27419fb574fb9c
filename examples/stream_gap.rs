//! An ordered stream on embedded SQLite, read with a sequence cursor: the consumer is down
//! longer than the broker keeps messages, resumes, reports the gap retention left in the
//! stream, and ops resolve it.
//!
//! ```sh
//! cargo run --example stream_gap --features sqlite
//! RUST_LOG=diesel_inbox=warn cargo run --example stream_gap --features sqlite  # the gap's log line
//! ```

use std::collections::BTreeSet;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_inbox::{
    cursor::{Cursor, Gap, Resume, Sequenced},
    Ack, Audit, CorruptRow, Inbox, Outcome, SqliteSetup,
};

/// A message of the stream, as the broker hands it over.
#[derive(Clone)]
struct Message {
    seq: u64,
    order: String,
    cents: i64,
}

/// The broker, as much of it as the story needs: an ordered stream whose retention keeps only
/// the newest `retention` messages.
struct Broker {
    /// The first sequence still available: `JetStream`'s `first_seq`, Kafka's log start offset.
    first_seq: u64,
    /// The sequence the next message gets.
    next_seq: u64,
    messages: Vec<Message>,
    retention: usize,
}

impl Broker {
    fn new(retention: usize) -> Self {
        Self {
            first_seq: 1,
            next_seq: 1,
            messages: Vec::new(),
            retention,
        }
    }

    /// Appends a message under the next sequence; retention evicts the oldest beyond its limit.
    fn publish(&mut self, cents: i64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.messages.push(Message {
            seq,
            order: format!("order-{seq}"),
            cents,
        });
        let evict = self.messages.len().saturating_sub(self.retention);
        self.messages.drain(..evict);
        self.first_seq = self.messages[0].seq;
    }

    /// What a consumer seeking to `start` receives: from there, or from the first message the
    /// broker still has when `start` was evicted.
    fn seek(&self, start: u64) -> Vec<Message> {
        self.messages
            .iter()
            .filter(|m| m.seq >= start)
            .cloned()
            .collect()
    }
}

#[derive(QueryableByName)]
struct Projected {
    #[diesel(sql_type = BigInt)]
    seq: i64,
}

/// The effect: one projection row per event, in the cursor's transaction.
fn project(conn: &mut SqliteConnection, message: &Message) -> Result<(), diesel_inbox::Error> {
    diesel::sql_query("INSERT INTO order_totals (seq, order_id, cents) VALUES (?, ?, ?)")
        .bind::<BigInt, _>(i64::try_from(message.seq).expect("a small sequence"))
        .bind::<Text, _>(&message.order)
        .bind::<BigInt, _>(message.cents)
        .execute(conn)?;
    Ok(())
}

/// Delivers one message to the cursor and prints what came of it and what to tell the broker.
fn deliver(
    conn: &mut SqliteConnection,
    cursor: &Cursor,
    message: &Message,
    delivery: Sequenced,
) -> Result<(), diesel_inbox::Error> {
    let result = cursor.process(conn, delivery, |tx| project(tx, message));
    let ack = Ack::of(&result);
    let said = match result? {
        Outcome::Processed(()) => "processed".to_owned(),
        Outcome::ProcessedAfterGap { gaps, .. } => {
            let gaps: Vec<_> = gaps.iter().map(describe).collect();
            format!("processed after a gap: {}", gaps.join(", "))
        }
        Outcome::Duplicate(_) => "duplicate: skipped".to_owned(),
        other => format!("{other:?}"),
    };
    println!(
        "  seq {:>2} {:<8} -> {said} => {ack:?}",
        message.seq, message.order
    );
    Ok(())
}

fn describe(gap: &Gap) -> String {
    format!("{}..={} {}", gap.first, gap.last, gap.cause)
}

/// The gap ledger as ops read it. A row this version cannot read is listed in its place,
/// with what names it and how to repair it.
fn print_ledger(gaps: &[Result<Gap, CorruptRow>]) {
    for gap in gaps {
        let gap = match gap {
            Ok(gap) => gap,
            Err(corrupt) => {
                println!("  unreadable: {corrupt}");
                continue;
            }
        };
        let closed = gap
            .closed_at
            .map(|at| format!(", closed {}", at.format("%H:%M:%S%.3f")))
            .unwrap_or_default();
        let resolution = gap
            .resolution
            .as_ref()
            .map(|audit| format!("\n      by {}: {}", audit.actor(), audit.reason()))
            .unwrap_or_default();
        println!(
            "  gap #{} {} {}, {}: detected {}{closed}{resolution}",
            gap.id,
            gap.stream,
            describe(gap),
            gap.state,
            gap.detected_at.format("%H:%M:%S%.3f"),
        );
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let dir = tempfile::tempdir()?;
    let mut conn =
        SqliteConnection::establish(&dir.path().join("orders.db").display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE order_totals (seq BIGINT NOT NULL, order_id TEXT NOT NULL, cents BIGINT NOT NULL);",
    )?;

    let mut broker = Broker::new(4);
    for cents in [1_250, 990, 4_000, 315] {
        broker.publish(cents);
    }
    let stream = Inbox::new("order-totals")?.cursor("orders")?;
    let mut delivered = BTreeSet::new();

    let lease = stream.acquire(&mut conn, "projector-a")?;
    let cursor = stream.clone().epoch(lease.epoch());
    println!(
        "projector-a acquired \"orders\": epoch {}, resume {:?}",
        lease.epoch(),
        lease.resume()
    );
    // A fresh cursor starts where the broker's stream does.
    let start = match lease.resume() {
        Resume::At(seq) => seq,
        _ => broker.first_seq,
    };
    for message in broker.seek(start) {
        deliver(&mut conn, &cursor, &message, Sequenced::new(message.seq))?;
        delivered.insert(message.seq);
    }
    println!("  (the ack of 3 was lost: the broker delivers it again)");
    let again = broker.seek(3).swap_remove(0);
    deliver(&mut conn, &cursor, &again, Sequenced::new(again.seq))?;

    for cents in [2_100, 75, 640, 1_800, 5_500, 220, 3_030, 410] {
        broker.publish(cents);
    }
    println!(
        "projector-a is down; the broker takes 8 more orders and keeps the newest {}: first available is now {}",
        broker.retention, broker.first_seq
    );

    let lease = stream.acquire(&mut conn, "projector-a")?;
    let cursor = stream.clone().epoch(lease.epoch());
    let resume = cursor.resume(&mut conn)?;
    println!(
        "projector-a is back: epoch {}, resume {resume:?}, seeking the broker there",
        lease.epoch()
    );
    let Resume::At(start) = resume else {
        unreachable!("the cursor has settled sequences")
    };
    for message in broker.seek(start) {
        let delivery = Sequenced::new(message.seq).first_available(broker.first_seq);
        deliver(&mut conn, &cursor, &message, delivery)?;
        delivered.insert(message.seq);
    }

    // Ops see the same from a shell: `diesel-inbox --consumer order-totals gaps`, and resolve with
    // `diesel-inbox --consumer order-totals --yes gaps resolve <ID> --reason "..."`.
    println!("the gap report, open gaps:");
    let open = cursor.gaps().open(&mut conn)?;
    print_ledger(&open);
    let audit = Audit::new(
        "ops@shop.example",
        "outage outlasted retention; orders 5..=8 rebuilt by hand from the order service",
    )?;
    for gap in open.iter().flatten() {
        cursor.gaps().resolve(&mut conn, gap.id, &audit)?;
    }
    println!("the ledger after ops resolved it:");
    print_ledger(&cursor.gaps().list(&mut conn, 0, 100)?);
    let resume = cursor.resume(&mut conn)?;
    println!("resume {resume:?} (an evicted gap never holds the cursor back)");

    let projected: Vec<u64> = diesel::sql_query("SELECT seq FROM order_totals ORDER BY seq")
        .load::<Projected>(&mut conn)?
        .into_iter()
        .map(|row| row.seq.unsigned_abs())
        .collect();
    println!(
        "delivered sequences: {delivered:?}; projection rows: {}",
        projected.len()
    );
    assert_eq!(
        projected,
        delivered.iter().copied().collect::<Vec<_>>(),
        "each delivered sequence took effect exactly once"
    );
    assert!(cursor.gaps().open(&mut conn)?.is_empty());
    assert_eq!(resume, Resume::At(broker.next_seq));
    Ok(())
}
