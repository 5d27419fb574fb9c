//! A points projection on embedded SQLite, rebuilt by a governed replay. A producer enqueues
//! `points.awarded` events into the outbox, the relay publishes them, and a live consumer
//! projects them into `points`; but its handler drops each award's bonus. Once the handler is
//! fixed, a replay runs the outbox's range through it again, into a shadow table
//! (`points_shadow`) under a consumer of its own, so the live one is never touched. The replay
//! is recorded with who asked and why; the unsupported v9 event is skipped and named; the badge
//! the fixed handler would announce is suppressed; the result is reconciled against the
//! expected totals, accepted, and swapped in.
//!
//! ```sh
//! cargo run --example replay_projection --features sqlite
//! RUST_LOG=diesel_inbox=info cargo run --example replay_projection --features sqlite  # the replay's log lines
//! ```

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_inbox::replay::{
    Interpretation, NoteKind, OutboxSource, Plan, Range, ReplayHandler, ReplayState, Replayed,
    Replays, Report, Target,
};
use diesel_inbox::{
    envelope::{Envelope, SchemaVersions},
    outbox::{Outbox, OutboxMessage, PublishError, Publisher, Relay},
    Ack, Audit, Inbox, SqliteSetup,
};
use serde::{Deserialize, Serialize};

/// Where the projection announces badges.
const BADGES: &str = "badges";

/// The points that earn a user the gold badge.
const GOLD: i64 = 25;

/// The shadow table a replay rebuilds the projection into.
const SHADOW: &str = "points_shadow";

/// A `points.awarded` payload, schema version 1.
#[derive(Debug, Serialize, Deserialize)]
struct Awarded {
    user: String,
    points: i64,
    bonus: i64,
}

/// The broker, in memory: what the relay published, in order.
#[derive(Default)]
struct Broker(Vec<OutboxMessage>);

impl Publisher for Broker {
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
        self.0.push(message.clone());
        Ok(())
    }
}

#[derive(QueryableByName)]
struct Total {
    #[diesel(sql_type = Text)]
    user: String,
    #[diesel(sql_type = BigInt)]
    points: i64,
}

/// Every user's points in `table`, by user.
fn totals(conn: &mut SqliteConnection, table: &str) -> QueryResult<Vec<(String, i64)>> {
    let rows: Vec<Total> =
        diesel::sql_query(format!("SELECT user, points FROM {table} ORDER BY user")).load(conn)?;
    Ok(rows.into_iter().map(|t| (t.user, t.points)).collect())
}

/// Adds `points` to `user` in `table`; returns the user's total. `table` is a name of the
/// app's own (`points`, or the replay's destination), never input.
fn credit(tx: &mut SqliteConnection, table: &str, user: &str, points: i64) -> QueryResult<i64> {
    diesel::sql_query(format!(
        "INSERT INTO {table} (user, points) VALUES (?, ?)
         ON CONFLICT (user) DO UPDATE SET points = points + excluded.points"
    ))
    .bind::<Text, _>(user)
    .bind::<BigInt, _>(points)
    .execute(tx)?;
    let total: Total =
        diesel::sql_query(format!("SELECT user, points FROM {table} WHERE user = ?"))
            .bind::<Text, _>(user)
            .get_result(tx)?;
    Ok(total.points)
}

/// The live consumer's handler as first deployed. The bug: it credits the points and drops
/// the bonus.
fn project_v1(tx: &mut SqliteConnection, event: &Envelope) -> Result<(), diesel_inbox::Error> {
    let award: Awarded = event.decode_json()?;
    credit(tx, "points", &award.user, award.points)?;
    Ok(())
}

/// The fixed handler: points and bonus, into `table`. The event that takes a user to gold
/// returns the badge to announce.
fn project_v2(
    tx: &mut SqliteConnection,
    table: &str,
    event: &Envelope,
) -> Result<Option<Envelope>, diesel_inbox::Error> {
    let award: Awarded = event.decode_json()?;
    let gained = award.points + award.bonus;
    let total = credit(tx, table, &award.user, gained)?;
    if total >= GOLD && total - gained < GOLD {
        let badge = Envelope::new("badge.earned", "user", &award.user)
            .json(&serde_json::json!({ "badge": "gold", "points": total }))?;
        return Ok(Some(badge));
    }
    Ok(None)
}

/// The fixed handler under a replay: it writes where the replay's target says, and asks the
/// replay where a badge announcement goes (nowhere: the plan drops enqueues, and notes each).
struct Rebuild {
    outbox: Outbox,
}

impl ReplayHandler<SqliteConnection> for Rebuild {
    type Error = diesel_inbox::Error;

    fn apply(
        &mut self,
        tx: &mut SqliteConnection,
        event: &Envelope,
        replay: &Replayed,
    ) -> Result<(), Self::Error> {
        // The plan names the table: take only the one this projection knows, never build SQL
        // from whatever a record says.
        let table = replay
            .destination()
            .filter(|table| *table == SHADOW)
            .expect("a replay into the shadow table");
        if let Some(badge) = project_v2(tx, table, event)? {
            match replay.topic(BADGES) {
                Some(topic) => self.outbox.enqueue(tx, topic, &badge)?,
                None => println!(
                    "  position {}: gold badge for {} not announced (enqueue suppressed)",
                    replay.position(),
                    badge.aggregate_id()
                ),
            }
        }
        Ok(())
    }
}

/// The producer: awards enqueued into the outbox, one of them in a schema version 9 that no
/// consumer reads yet.
fn produce(conn: &mut SqliteConnection, outbox: &Outbox) -> Result<(), diesel_inbox::Error> {
    let awards = [("alice", 10, 0), ("bob", 20, 5), ("alice", 5, 2)];
    let later = [("carol", 7, 0), ("bob", 3, 1)];
    let award = |(user, points, bonus): (&str, i64, i64)| {
        Envelope::new("points.awarded", "user", user).json(&Awarded {
            user: user.to_owned(),
            points,
            bonus,
        })
    };
    for a in awards {
        outbox.enqueue(conn, "points", &award(a)?)?;
    }
    let from_the_future = Envelope::new("points.awarded", "user", "alice")
        .with_schema_version(9)
        .json(&serde_json::json!({ "user": "alice", "points": 1000, "multiplier": 3 }))?;
    outbox.enqueue(conn, "points", &from_the_future)?;
    for a in later {
        outbox.enqueue(conn, "points", &award(a)?)?;
    }
    Ok(())
}

/// The live consumer `points`, with the buggy handler, over what the relay published.
fn consume_live(
    conn: &mut SqliteConnection,
    published: &[OutboxMessage],
) -> Result<(), diesel_inbox::Error> {
    let inbox = Inbox::new("points")?;
    let versions = SchemaVersions::new().accept("points.awarded", [1]);
    for message in published {
        let event = &message.envelope;
        let result = inbox.process(conn, event, |tx| {
            versions.check(event)?; // v9: dead-lettered, acked
            project_v1(tx, event)
        });
        let said = match &result {
            Ok(outcome) if outcome.is_processed() => "processed".to_owned(),
            Ok(outcome) if outcome.is_dead_lettered() => {
                "dead-lettered (unknown version)".to_owned()
            }
            Ok(outcome) => format!("{outcome:?}"),
            Err(error) => format!("failed: {error}"),
        };
        println!(
            "  #{} {} v{} for {} -> {said} => {:?}",
            message.position,
            event.event_type(),
            event.schema_version(),
            event.aggregate_id(),
            Ack::of(&result)
        );
    }
    Ok(())
}

/// Plans the replay of outbox positions `1..=last` into the shadow table, after its dry run.
fn plan(
    conn: &mut SqliteConnection,
    replays: &Replays,
    last: u64,
) -> Result<i64, diesel_inbox::AdminError> {
    let versions = SchemaVersions::new().accept("points.awarded", [1]);
    let plan = Plan::new(
        Target::isolated("points-v2", SHADOW)?,
        Range::positions(1, last)?,
    )
    .interpretation(Interpretation::Versions(versions));
    let preview = replays.preview(conn, &mut OutboxSource::new(), &plan)?;
    println!(
        "  dry run: {} events at positions {}..={}, {} to skip, {} in the target already",
        preview.events,
        preview.first.unwrap_or(0),
        preview.last.unwrap_or(0),
        preview.skipped,
        preview.in_target
    );
    assert_eq!(
        (preview.events, preview.skipped, preview.in_target),
        (6, 1, 0)
    );
    let audit = Audit::new(
        "ops@example.com",
        "rebuild points after fix #42: bonuses were dropped",
    )?;
    let record = replays.plan(conn, &OutboxSource::new(), &plan, &audit)?;
    println!(
        "  replay #{} {}: {} into {} ({}), asked by {}: {}",
        record.id,
        record.state,
        record.source,
        record.plan.target().consumer(),
        record.plan.target().destination().unwrap_or("live"),
        record.requested_by,
        record.reason
    );
    Ok(record.id)
}

/// Reconciles the finished replay against the golden totals, prints the evidence, accepts it.
fn reconcile_and_accept(
    conn: &mut SqliteConnection,
    replays: &Replays,
    id: i64,
    golden: &[(String, i64)],
) -> Result<(), diesel_inbox::AdminError> {
    let evidence = replays.reconcile(conn, id, &mut OutboxSource::new(), |conn| {
        let shadow = totals(conn, SHADOW)?;
        Ok(vec![Report::compare("points per user", golden, &shadow)])
    })?;
    let c = evidence.counts;
    println!(
        "  counts: {} read = {} processed + {} duplicates + {} failed + {} dead-lettered + {} skipped; suppressed side effects: {}",
        c.read, c.processed, c.duplicates, c.failed, c.dead_lettered, c.skipped, c.suppressed
    );
    println!(
        "  input digest {}…, re-read {}…: {} events, {} without an inbox row",
        &evidence.recorded_digest[..16],
        &evidence.reread_digest[..16],
        evidence.reread,
        evidence.without_inbox_row
    );
    for report in &evidence.reports {
        println!("  report {:?}: matches {}", report.name, report.matches);
    }
    println!("  differences: {:?}", evidence.differences);
    assert!(evidence.matches(), "{:?}", evidence.differences);
    assert_eq!((c.read, c.processed, c.skipped, c.suppressed), (6, 5, 1, 1));
    let audit = Audit::new("lead@example.com", "totals match the golden copy")?;
    replays.accept(conn, id, &audit)?;
    Ok(())
}

/// The replay's record: its audited transitions, and the events it noted.
fn print_record(
    conn: &mut SqliteConnection,
    replays: &Replays,
    id: i64,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("history of replay #{id}:");
    let history = replays.history(conn, id)?;
    for t in &history {
        let from = t.from.map_or("-".to_owned(), |s| s.to_string());
        println!("  {from:>8} -> {:<8} by {}: {}", t.to, t.actor, t.reason);
    }
    let states: Vec<ReplayState> = history.iter().map(|t| t.to).collect();
    let lifecycle = [
        ReplayState::Planned,
        ReplayState::Running,
        ReplayState::Finished,
        ReplayState::Accepted,
    ];
    assert_eq!(states, lifecycle);
    println!("its notes:");
    let notes = replays.notes(conn, id, 0, 100)?;
    for note in notes {
        let note = note?;
        println!(
            "  position {} {}: {} ({})",
            note.position, note.kind, note.detail, note.event_id
        );
        if note.kind == NoteKind::Skipped {
            assert!(note.detail.contains("schema version 9"), "{}", note.detail);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let dir = tempfile::tempdir()?;
    let mut conn =
        SqliteConnection::establish(&dir.path().join("points.db").display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE points (user TEXT PRIMARY KEY, points BIGINT NOT NULL);
         CREATE TABLE points_shadow (user TEXT PRIMARY KEY, points BIGINT NOT NULL);",
    )?;
    let outbox = Outbox::new("rewards-service")?;

    println!("the producer enqueues awards; the relay publishes them:");
    produce(&mut conn, &outbox)?;
    let mut broker = Broker::default();
    assert_eq!(Relay::new().run_once(&mut conn, &mut broker)?.published, 6);
    println!("the live consumer `points` projects them, dropping each bonus (the bug):");
    consume_live(&mut conn, &broker.0)?;
    let live = totals(&mut conn, "points")?;
    println!("  points: {live:?}");

    let golden: Vec<(String, i64)> = [("alice", 17), ("bob", 29), ("carol", 7)]
        .into_iter()
        .map(|(user, points)| (user.to_owned(), points))
        .collect();
    println!("fix #42 is deployed; ops plan a replay of the outbox into a shadow table:");
    let last = broker.0.iter().map(|m| m.position).max().unwrap_or(0);
    let replays = Replays::new().runner("example");
    let id = plan(&mut conn, &replays, u64::try_from(last)?)?;
    println!("it runs the fixed handler into points_shadow, as consumer points-v2:");
    let run = replays.run(
        &mut conn,
        id,
        &mut OutboxSource::new(),
        &mut Rebuild { outbox },
    )?;
    assert!(run.finished);
    println!("  finished: {} events read", run.read_now);
    println!("it is reconciled against the golden totals, and accepted:");
    reconcile_and_accept(&mut conn, &replays, id, &golden)?;
    print_record(&mut conn, &replays, id)?;

    let shadow = totals(&mut conn, SHADOW)?;
    let fix = Report::compare("the live table against the rebuild", &shadow, &live);
    println!("what the swap corrects: {:?}", fix.details);
    conn.immediate_transaction(|tx| {
        tx.batch_execute(
            "ALTER TABLE points RENAME TO points_v1; ALTER TABLE points_shadow RENAME TO points;",
        )
    })?;
    let swapped = totals(&mut conn, "points")?;
    println!("swapped in: points = {swapped:?}");
    assert_eq!(swapped, golden);
    Ok(())
}
