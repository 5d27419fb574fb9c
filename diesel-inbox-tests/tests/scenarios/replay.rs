//! Governed replay: a bounded, recorded re-run of outbox events into a target consumer,
//! reconciled before it is accepted.

use std::collections::HashSet;
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;

use diesel_inbox::replay::{
    self, Expectation, Interpretation, NoteKind, OutboxSource, Plan, Range, ReplayHandler,
    ReplayRecord, ReplayState, Replayed, Replays, Report, RunReport, Target,
};
use diesel_inbox::{
    claim::ClaimOutcome,
    envelope::{Envelope, SchemaVersions},
    outbox::Outbox,
    AdminError, Audit, Error, Inbox,
};

use super::helpers::outbox_positions;
use crate::support::{
    call, setup, setup_flavour, Backend, ChildTest, FakeService, Flavour, Keys, ReplayLedger,
    TestConn, FOLLOW_UP, SHADOW,
};

/// The live consumer the replays rebuild or probe.
const LIVE: &str = "points";

/// Where the crash scenario's child finds its parent's database.
const CRASH_CHILD: &str = "DIESEL_INBOX_REPLAY_CRASH_CHILD";

/// Which replay the crash scenario's child runs.
const CRASH_REPLAY: &str = "DIESEL_INBOX_REPLAY_CRASH_ID";

fn audit(reason: &str) -> Audit {
    Audit::new("ops@example.com", reason).unwrap()
}

/// Enqueues `points.awarded` events `evt-{from}..=evt-{to}` (schema version 1) into the
/// outbox, in that order ([`enqueued_positions`] reads where they landed).
fn enqueue(conn: &mut impl TestConn, from: u64, to: u64) -> Vec<String> {
    let outbox = Outbox::new("points-service").unwrap();
    (from..=to)
        .map(|n| {
            let id = format!("evt-{n}");
            let event = Envelope::new("points.awarded", "user", &format!("u{}", n % 3))
                .with_id(id.as_str())
                .unwrap()
                .json(&serde_json::json!({ "points": n }))
                .unwrap();
            outbox.enqueue(conn, "points", &event).unwrap();
            id
        })
        .collect()
}

/// The live consumer processes `ids`, each writing its id into `effects`.
fn process_live(conn: &mut impl TestConn, ids: &[String]) {
    let live = Inbox::new(LIVE).unwrap();
    for id in ids {
        let outcome = live
            .process(conn, id.as_str(), |tx| tx.record_effect(id))
            .unwrap();
        assert!(outcome.is_processed());
    }
}

/// The outbox's positions, in enqueue order, as a replay counts them: increasing, but not
/// consecutive on every server (a Galera node steps by its `auto_increment_increment`).
fn enqueued_positions(conn: &mut impl TestConn) -> Vec<u64> {
    outbox_positions(conn)
        .into_iter()
        .map(|position| u64::try_from(position).unwrap())
        .collect()
}

/// A plan of the positions from the first of `positions` to its last into `target`.
fn plan(target: Target, positions: &[u64]) -> Plan {
    let (first, last) = (positions.first().unwrap(), positions.last().unwrap());
    Plan::new(target, Range::positions(*first, *last).unwrap())
}

/// Plans a rebuild of every event in the outbox so far, from its first position to its last,
/// into the isolated target.
fn rebuild(conn: &mut impl TestConn, replays: &Replays) -> ReplayRecord {
    let plan = plan(isolated(), &enqueued_positions(conn));
    replays
        .plan(conn, &OutboxSource::new(), &plan, &audit("rebuild"))
        .unwrap()
}

fn isolated() -> Target {
    Target::isolated("points-rebuild", "effects_shadow").unwrap()
}

/// The app's comparison: the live projection's ids against the shadow's.
fn compare_projections(check: &mut impl TestConn) -> Report {
    let rows = check.effect_rows();
    let live: Vec<(String, usize)> = rows
        .iter()
        .filter(|row| !row.starts_with(SHADOW))
        .map(|id| (id.clone(), 1))
        .collect();
    let shadow: Vec<(String, usize)> = rows
        .iter()
        .filter_map(|row| row.strip_prefix(SHADOW))
        .map(|id| (id.to_owned(), 1))
        .collect();
    Report::compare("projection rows", &live, &shadow)
}

pub async fn a_replay_into_an_isolated_target_rebuilds_the_projection_and_its_reconciliation_accepts_it<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = enqueue(&mut check, 1, 12);
    let positions = enqueued_positions(&mut check);
    process_live(&mut check, &ids);
    let (live_rows, live_deliveries) = (
        check.inbox_rows_like(LIVE, "evt-"),
        check.total_deliveries(),
    );
    let replays = Replays::new().batch_size(5);
    let planned = replays
        .plan(
            &mut check,
            &OutboxSource::new(),
            &plan(isolated(), &positions),
            &audit("rebuild after fix #42"),
        )
        .unwrap();
    assert_eq!(planned.state, ReplayState::Planned);

    let run = F::run_replay(
        &replays,
        &mut conn,
        planned.id,
        &mut ReplayLedger::default(),
    )
    .await;
    let run = run.unwrap();
    assert!(run.finished);
    assert_eq!(
        (run.counts.read, run.counts.processed, run.counts.duplicates),
        (12, 12, 0)
    );
    let report = compare_projections(&mut check);
    assert!(report.matches, "{report:?}");
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![report])
        .await
        .unwrap();
    assert!(evidence.matches(), "{:?}", evidence.differences);
    assert_eq!((evidence.reread, evidence.without_inbox_row), (12, 0));
    replays
        .accept(
            &mut check,
            planned.id,
            &audit("projection equal to the live one"),
        )
        .unwrap();

    let record = replays.get(&mut check, planned.id).unwrap();
    assert_eq!(record.state, ReplayState::Accepted);
    assert_eq!(record.evidence.as_ref(), Some(&evidence));
    let states: Vec<ReplayState> = replays
        .history(&mut check, planned.id)
        .unwrap()
        .into_iter()
        .map(|t| t.to)
        .collect();
    assert_eq!(
        states,
        [
            ReplayState::Planned,
            ReplayState::Running,
            ReplayState::Finished,
            ReplayState::Accepted
        ]
    );
    // The live consumer's rows were never touched.
    assert_eq!(check.inbox_rows_like(LIVE, "evt-"), live_rows);
    assert_eq!(
        check.total_deliveries(),
        live_deliveries + 12,
        "the target's own rows only"
    );
    assert_eq!(check.inbox_rows_like("points-rebuild", "evt-"), 12);
}

pub async fn a_target_changed_on_purpose_is_rejected_naming_what_differs<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = enqueue(&mut check, 1, 6);
    process_live(&mut check, &ids);
    let replays = Replays::new();
    let planned = rebuild(&mut check, &replays);
    let run = F::run_replay(
        &replays,
        &mut conn,
        planned.id,
        &mut ReplayLedger::default(),
    )
    .await;
    assert!(run.unwrap().finished);

    // One event missing from the target, one row of its projection altered.
    check
        .batch_execute(
            "DELETE FROM diesel_inbox_events WHERE consumer = 'points-rebuild' AND event_id = 'evt-4'; \
             UPDATE effects SET event_id = 'shadow:evt-99' WHERE event_id = 'shadow:evt-5'",
        )
        .unwrap();
    let report = compare_projections(&mut check);
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![report])
        .await
        .unwrap();

    assert!(!evidence.matches());
    let differences = evidence.differences.join("\n");
    assert!(
        differences.contains("no row in the target's inbox for 1 of the events read: evt-4"),
        "{differences}"
    );
    assert!(
        differences.contains("evt-5: expected 1, found nothing"),
        "{differences}"
    );
    assert!(
        differences.contains("evt-99: expected nothing, found 1"),
        "{differences}"
    );
    let refused = replays.accept(&mut check, planned.id, &audit("looks fine"));
    assert!(
        matches!(
            refused,
            Err(AdminError::Inbox(Error::Replay(
                replay::Refused::EvidenceMismatch { .. }
            )))
        ),
        "{refused:?}"
    );
    replays
        .reject(&mut check, planned.id, &audit("shadow differs from live"))
        .unwrap();
    assert_eq!(
        replays.get(&mut check, planned.id).unwrap().state,
        ReplayState::Rejected
    );
}

pub async fn a_replay_into_the_live_consumer_finds_only_duplicates_and_runs_no_effect<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = enqueue(&mut check, 1, 8);
    process_live(&mut check, &ids);
    let replays = Replays::new().batch_size(3);
    let probe = plan(Target::live(LIVE).unwrap(), &enqueued_positions(&mut check));
    assert_eq!(probe.expectation(), Expectation::AllDuplicates);
    let planned = replays
        .plan(
            &mut check,
            &OutboxSource::new(),
            &probe,
            &audit("prove idempotence"),
        )
        .unwrap();

    let run = F::run_replay(
        &replays,
        &mut conn,
        planned.id,
        &mut ReplayLedger::default(),
    )
    .await;
    let run = run.unwrap();

    assert_eq!(
        (run.counts.read, run.counts.duplicates, run.counts.processed),
        (8, 8, 0)
    );
    assert_eq!(check.effect_count(), 8, "no effect ran again");
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![])
        .await
        .unwrap();
    assert!(evidence.matches(), "{:?}", evidence.differences);
    replays
        .accept(&mut check, planned.id, &audit("nothing would run twice"))
        .unwrap();
}

pub async fn the_ranges_end_holds_while_new_events_keep_arriving<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    enqueue(&mut check, 1, 5);
    let replays = Replays::new().batch_size(2);
    let planned = rebuild(&mut check, &replays);
    enqueue(&mut check, 6, 9);

    let run = F::run_replay(
        &replays,
        &mut conn,
        planned.id,
        &mut ReplayLedger::default(),
    )
    .await;
    enqueue(&mut check, 10, 11);

    assert_eq!(run.unwrap().counts.read, 5);
    let mut shadow: Vec<String> = check.effect_rows();
    shadow.sort();
    let expected: Vec<String> = (1..=5).map(|n| format!("{SHADOW}evt-{n}")).collect();
    assert_eq!(shadow, expected);
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![])
        .await
        .unwrap();
    assert!(
        evidence.matches(),
        "the re-read stops at the end too: {:?}",
        evidence.differences
    );
}

pub async fn a_schema_version_outside_the_plans_interpretation_is_skipped_and_named<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    enqueue(&mut check, 1, 3);
    let newer = Envelope::new("points.awarded", "user", "u1")
        .with_id("evt-v9")
        .unwrap()
        .with_schema_version(9);
    Outbox::new("points-service")
        .unwrap()
        .enqueue(&mut check, "points", &newer)
        .unwrap();
    let versions = SchemaVersions::new().accept("points.awarded", [1, 2]);
    let positions = enqueued_positions(&mut check);
    let plan = plan(isolated(), &positions).interpretation(Interpretation::Versions(versions));
    let replays = Replays::new();
    let planned = replays
        .plan(&mut check, &OutboxSource::new(), &plan, &audit("rebuild"))
        .unwrap();

    let run = F::run_replay(
        &replays,
        &mut conn,
        planned.id,
        &mut ReplayLedger::default(),
    )
    .await;
    let counts = run.unwrap().counts;

    assert_eq!((counts.read, counts.processed, counts.skipped), (4, 3, 1));
    let notes: Vec<_> = replays
        .notes(&mut check, planned.id, 0, 10)
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(
        (notes[0].kind, notes[0].event_id.as_str(), notes[0].position),
        (NoteKind::Skipped, "evt-v9", positions[3])
    );
    assert!(
        notes[0].detail.contains("schema version 9"),
        "{}",
        notes[0].detail
    );
    assert!(!check.has_inbox_row("points-rebuild", "evt-v9"));
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![])
        .await
        .unwrap();
    assert!(
        evidence.matches(),
        "a skipped event needs no inbox row: {:?}",
        evidence.differences
    );
}

pub async fn an_enqueue_and_a_later_claim_suppressed_for_each_event_merge_into_its_one_note_in_one_run<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = enqueue(&mut check, 1, 30);
    let replays = Replays::new();
    let planned = rebuild(&mut check, &replays);
    let mut ledger = ReplayLedger {
        side_effects: true,
        ..ReplayLedger::default()
    };

    let run = F::run_replay(&replays, &mut conn, planned.id, &mut ledger)
        .await
        .unwrap();

    assert!(run.finished, "one run settles every event: {run:?}");
    assert_eq!(
        (run.read_now, run.counts.processed, run.counts.suppressed),
        (30, 30, 60),
        "each event's enqueue and claim, each counted once"
    );
    let notes: Vec<_> = replays
        .notes(&mut check, planned.id, 0, 100)
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let events: Vec<&str> = notes.iter().map(|note| note.event_id.as_str()).collect();
    assert_eq!(events, ids, "one note per event");
    for note in &notes {
        assert_eq!(note.kind, NoteKind::Suppressed, "{note:?}");
        let id = &note.event_id;
        assert_eq!(
            note.detail,
            format!(
                "enqueue to {FOLLOW_UP}: dropped; \
                 claim points-rebuild/{id}: would have run its side effect; not called"
            ),
            "the enqueue apply suppressed, then the claim after suppressed"
        );
    }
}

pub async fn a_failing_event_is_counted_and_named_and_the_replay_goes_on<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    enqueue(&mut check, 1, 4);
    let replays = Replays::new();
    let planned = rebuild(&mut check, &replays);
    let mut ledger = ReplayLedger {
        failing: HashSet::from(["evt-2".to_owned()]),
        ..ReplayLedger::default()
    };

    let run = F::run_replay(&replays, &mut conn, planned.id, &mut ledger)
        .await
        .unwrap();

    assert!(run.finished);
    assert_eq!((run.counts.processed, run.counts.failed), (3, 1));
    let notes = replays.notes(&mut check, planned.id, 0, 10).unwrap();
    let note = notes[0].as_ref().unwrap();
    assert_eq!(
        (note.kind, note.event_id.as_str()),
        (NoteKind::Failed, "evt-2")
    );
    assert!(
        note.detail.contains("the ledger refuses evt-2"),
        "{}",
        note.detail
    );
    assert_eq!(
        check.failure_rows("points-rebuild", "evt-2").0,
        1,
        "the target's failure policy recorded it"
    );
    let evidence = F::reconcile_replay(&replays, &mut conn, planned.id, vec![])
        .await
        .unwrap();
    assert!(!evidence.matches());
    replays
        .accept_overriding(
            &mut check,
            planned.id,
            &audit("evt-2 is replayed on its own"),
        )
        .unwrap();
    let accepted = replays
        .history(&mut check, planned.id)
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        accepted.reason.contains("override of:"),
        "{}",
        accepted.reason
    );
}

/// A replay run to a checkpoint by a child process, killed (SIGKILL) by pid in the middle of an
/// event's transaction, then resumed here: no event is processed twice, the counts are exact.
pub fn a_replay_killed_mid_run_resumes_and_processes_no_event_twice<B: Backend>() {
    const KILL_ME: &str = "replay child inside the transaction of evt-7";
    const TEST: &str = "a_replay_killed_mid_run_resumes_and_processes_no_event_twice";
    let replays = Replays::new()
        .batch_size(4)
        .lease(Duration::from_millis(300));
    if let Ok(url) = std::env::var(CRASH_CHILD) {
        /// Writes like the ledger, and stops inside evt-7's transaction to be killed.
        struct Killed;
        impl<C: TestConn> ReplayHandler<C> for Killed {
            type Error = Error;
            fn apply(&mut self, tx: &mut C, event: &Envelope, _: &Replayed) -> Result<(), Error> {
                tx.record_effect(&format!("{SHADOW}{}", event.id()))?;
                if event.id().as_str() == "evt-7" {
                    println!("{KILL_ME}");
                    thread::sleep(Duration::from_secs(120));
                }
                Ok(())
            }
        }
        let id = std::env::var(CRASH_REPLAY).unwrap().parse().unwrap();
        let mut conn = B::connect_to(&url);
        let _ = replays.run(&mut conn, id, &mut OutboxSource::new(), &mut Killed);
        return;
    }
    let (db, mut conn) = setup::<B>();
    enqueue(&mut conn, 1, 10);
    let positions = enqueued_positions(&mut conn);
    let planned = rebuild(&mut conn, &replays);
    let id = planned.id.to_string();
    let mut child = ChildTest::spawn(TEST, &[(CRASH_CHILD, db.url()), (CRASH_REPLAY, &id)]);
    child.wait_for(KILL_ME, Duration::from_secs(60));
    child.kill();

    let stopped = replays.get(&mut conn, planned.id).unwrap();
    // evt-6's position: the last one committed before evt-7's transaction died.
    assert_eq!(
        (stopped.state, stopped.checkpoint, stopped.counts.processed),
        (ReplayState::Running, Some(positions[5]), 6)
    );
    thread::sleep(Duration::from_millis(400)); // the dead runner's lease runs out
    let run = replays
        .run(
            &mut conn,
            planned.id,
            &mut OutboxSource::new(),
            &mut ReplayLedger::default(),
        )
        .unwrap();

    assert!(run.finished);
    assert_eq!(
        (
            run.counts.read,
            run.counts.processed,
            run.counts.duplicates,
            run.read_now
        ),
        (10, 10, 0, 4)
    );
    for n in 1..=10 {
        assert_eq!(
            conn.effects_of(&format!("{SHADOW}evt-{n}")),
            1,
            "evt-{n} took effect once"
        );
    }
    let resumed = &replays.history(&mut conn, planned.id).unwrap()[2];
    assert!(
        resumed
            .reason
            .contains(&format!("resumed after position {}", positions[5])),
        "{}",
        resumed.reason
    );
}

/// Writes like the ledger; after `busy` committed, a second runner on another connection
/// tries the replay while this one holds it; after `slow`, this runner sleeps past its lease
/// while the second takes the replay over and finishes it.
struct Contended<C> {
    /// Whether the first event fails, transiently, once.
    stops_once: bool,
    busy: &'static str,
    slow: &'static str,
    other: C,
    replays: Replays,
    held: Option<Result<RunReport, Error>>,
}

impl<C: TestConn> Contended<C> {
    fn second_runner(&mut self, id: i64) -> Result<RunReport, Error> {
        let mut ledger = ReplayLedger::default();
        self.replays
            .run(&mut self.other, id, &mut OutboxSource::new(), &mut ledger)
    }
}

impl<C: TestConn> ReplayHandler<C> for Contended<C> {
    type Error = Error;

    fn apply(&mut self, tx: &mut C, event: &Envelope, _: &Replayed) -> Result<(), Error> {
        if std::mem::take(&mut self.stops_once) {
            return Err(Error::transient("the projection's cache is down"));
        }
        Ok(tx.record_effect(&format!("{SHADOW}{}", event.id()))?)
    }

    fn after(&mut self, _: &mut C, event: &Envelope, replay: &Replayed) -> Result<(), Error> {
        if event.id().as_str() == self.busy {
            self.held = Some(self.second_runner(replay.id()));
        } else if event.id().as_str() == self.slow {
            thread::sleep(Duration::from_millis(400));
            let taken = self.second_runner(replay.id())?;
            assert!(taken.finished);
        }
        Ok(())
    }
}

pub fn two_runners_at_once_one_makes_progress_and_the_other_is_held_or_fenced<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    enqueue(&mut conn, 1, 8);
    let replays = Replays::new()
        .batch_size(2)
        .lease(Duration::from_millis(300));
    let planned = rebuild(&mut conn, &replays);
    let mut handler = Contended {
        stops_once: true,
        busy: "evt-2",
        slow: "evt-5",
        other: db.connect(),
        replays: replays.clone(),
        held: None,
    };

    // A run stopped by a transient failure ends its lease: the next resumes at once.
    let stopped = replays.run(
        &mut conn,
        planned.id,
        &mut OutboxSource::new(),
        &mut handler,
    );
    assert!(stopped.is_err());
    // While this runner holds the replay, a second is held off; once this one sleeps past
    // its lease, the second takes over and finishes, and this one is fenced.
    let fenced = replays.run(
        &mut conn,
        planned.id,
        &mut OutboxSource::new(),
        &mut handler,
    );

    assert!(
        matches!(fenced, Err(Error::Replay(replay::Refused::Fenced { .. }))),
        "{fenced:?}"
    );
    let held = handler
        .held
        .take()
        .expect("the second runner tried at evt-2");
    assert!(
        matches!(held, Err(Error::Replay(replay::Refused::Held { .. }))),
        "{held:?}"
    );
    let record = replays.get(&mut conn, planned.id).unwrap();
    assert_eq!(record.state, ReplayState::Finished);
    let counts = record.counts;
    assert_eq!(
        (counts.read, counts.processed, counts.duplicates),
        (8, 8, 0)
    );
    for n in 1..=8 {
        assert_eq!(
            conn.effects_of(&format!("{SHADOW}evt-{n}")),
            1,
            "evt-{n} took effect once"
        );
    }
}

/// Claims through the replay (suppressed) and enqueues a follow-up through it (dropped).
struct CallsOut {
    service: String,
    outbox: Outbox,
}

impl<C: TestConn> ReplayHandler<C> for CallsOut {
    type Error = Error;

    fn apply(&mut self, tx: &mut C, event: &Envelope, replay: &Replayed) -> Result<(), Error> {
        let claims = Inbox::new("points-rebuild")?.claims();
        let sent = replay
            .claims(&claims)
            .run(tx, event.id().clone(), |claim| {
                call(&self.service, &claim.idempotency_key())
                    .map_err(|e| Error::transient(e.to_string()))
            })?;
        assert!(
            matches!(&sent, ClaimOutcome::Suppressed(s) if s.would_run()),
            "{sent:?}"
        );
        if let Some(topic) = replay.topic("points.notified") {
            self.outbox
                .enqueue(tx, topic, &Envelope::new("points.notified", "user", "u1"))?;
        }
        Ok(tx.record_effect(&format!("{SHADOW}{}", event.id()))?)
    }
}

pub fn a_claim_inside_a_replayed_handler_makes_no_external_call_and_enqueues_are_dropped<
    B: Backend,
>() {
    let (_db, mut conn) = setup::<B>();
    let ids = enqueue(&mut conn, 1, 3);
    let service = FakeService::start(Keys::Ignored);
    let replays = Replays::new();
    let planned = rebuild(&mut conn, &replays);
    let mut handler = CallsOut {
        service: service.addr().to_owned(),
        outbox: Outbox::new("points-service").unwrap(),
    };

    let run = replays
        .run(
            &mut conn,
            planned.id,
            &mut OutboxSource::new(),
            &mut handler,
        )
        .unwrap();

    assert_eq!((run.counts.processed, run.counts.suppressed), (3, 6));
    for id in &ids {
        let key = format!("points-rebuild:{id}");
        assert_eq!(service.calls(&key), 0, "no call for {id}");
    }
    assert_eq!(
        Outbox::stats(&mut conn).unwrap().pending,
        3,
        "no follow-up enqueued"
    );
    let notes = replays.notes(&mut conn, planned.id, 0, 10).unwrap();
    let note = notes[0].as_ref().unwrap();
    assert_eq!(note.kind, NoteKind::Suppressed);
    assert!(
        note.detail
            .contains("would have run its side effect; not called"),
        "{}",
        note.detail
    );
    assert!(
        note.detail.contains("enqueue to points.notified: dropped"),
        "{}",
        note.detail
    );
}

pub fn the_outbox_prune_keeps_what_an_open_replay_reads_and_decided_replays_have_their_own_retention<
    B: Backend,
>() {
    let (_db, mut conn) = setup::<B>();
    enqueue(&mut conn, 1, 6);
    let positions = enqueued_positions(&mut conn);
    conn.batch_execute(
        "UPDATE diesel_inbox_outbox SET state = 'published', published_at = enqueued_at",
    )
    .unwrap();
    let replays = Replays::new();
    // One aggregate's events: a source of its own name, kept by retention all the same.
    let source = || OutboxSource::new().aggregate("user", "u1");
    let planned = replays
        .plan(
            &mut conn,
            &source(),
            &plan(isolated(), &positions[3..]),
            &audit("rebuild"),
        )
        .unwrap();
    assert_eq!(planned.source, "outbox:user/u1");
    thread::sleep(Duration::from_millis(20));

    let pruned = Outbox::prune(&mut conn, Duration::from_millis(1), 100).unwrap();
    assert_eq!(
        pruned, 3,
        "evt-1 to evt-3 only: the replay reads evt-4 to evt-6"
    );
    let mut ledger = ReplayLedger::default();
    let whole = replays.run(&mut conn, planned.id, &mut OutboxSource::new(), &mut ledger);
    assert!(
        matches!(
            whole,
            Err(Error::Replay(replay::Refused::SourceMismatch { .. }))
        ),
        "{whole:?}"
    );
    let run = replays.run(&mut conn, planned.id, &mut source(), &mut ledger);
    assert_eq!(
        run.unwrap().counts.read,
        1,
        "evt-4, u1's one event of evt-4 to evt-6"
    );
    let evidence = replays.reconcile(&mut conn, planned.id, &mut source(), |_| Ok(vec![]));
    assert!(evidence.unwrap().matches());
    assert_eq!(
        replays.prune(&mut conn, Duration::ZERO).unwrap(),
        0,
        "a finished replay is kept"
    );
    replays
        .accept(&mut conn, planned.id, &audit("matches"))
        .unwrap();
    assert_eq!(
        Outbox::prune(&mut conn, Duration::from_millis(1), 100).unwrap(),
        3
    );

    thread::sleep(Duration::from_millis(20));
    assert_eq!(
        replays.prune(&mut conn, Duration::from_secs(3600)).unwrap(),
        0,
        "decided too recently"
    );
    assert_eq!(
        replays.prune(&mut conn, Duration::from_millis(1)).unwrap(),
        1
    );
    let gone = replays.get(&mut conn, planned.id);
    assert!(
        matches!(
            gone,
            Err(AdminError::Inbox(Error::Replay(
                replay::Refused::NotFound { .. }
            )))
        ),
        "{gone:?}"
    );
    assert!(replays.history(&mut conn, planned.id).unwrap().is_empty());
}

pub fn a_replays_decisions_follow_its_lifecycle_and_are_audited<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    enqueue(&mut conn, 1, 2);
    let replays = Replays::new().runner("replayer-1");
    let positions = enqueued_positions(&mut conn);
    let planned = rebuild(&mut conn, &replays);
    let wrong_state = |result: Result<(), AdminError>| {
        matches!(
            result,
            Err(AdminError::Inbox(Error::Replay(
                replay::Refused::WrongState { .. }
            )))
        )
    };

    assert!(wrong_state(replays.accept(
        &mut conn,
        planned.id,
        &audit("too early")
    )));
    assert!(wrong_state(replays.reject(
        &mut conn,
        planned.id,
        &audit("too early")
    )));
    assert!(Audit::new("ops", " ").is_err(), "a decision needs a reason");
    let run = replays.run(
        &mut conn,
        planned.id,
        &mut OutboxSource::new(),
        &mut ReplayLedger::default(),
    );
    assert!(run.unwrap().finished);
    let unreconciled = replays.accept(&mut conn, planned.id, &audit("trust me"));
    assert!(matches!(
        unreconciled,
        Err(AdminError::Inbox(Error::Replay(
            replay::Refused::NotReconciled { .. }
        )))
    ));
    assert!(wrong_state(replays.abort(
        &mut conn,
        planned.id,
        &audit("finished already")
    )));

    let other = replays
        .plan(
            &mut conn,
            &OutboxSource::new(),
            &plan(isolated(), &positions),
            &audit("again"),
        )
        .unwrap();
    replays
        .abort(&mut conn, other.id, &audit("planned by mistake"))
        .unwrap();
    let rerun = replays.run(
        &mut conn,
        other.id,
        &mut OutboxSource::new(),
        &mut ReplayLedger::default(),
    );
    assert!(
        matches!(
            rerun,
            Err(Error::Replay(replay::Refused::WrongState { .. }))
        ),
        "{rerun:?}"
    );
    assert!(wrong_state(replays.abort(
        &mut conn,
        other.id,
        &audit("twice")
    )));

    let history = replays.history(&mut conn, planned.id).unwrap();
    let actors: Vec<(&str, ReplayState)> =
        history.iter().map(|t| (t.actor.as_str(), t.to)).collect();
    assert_eq!(
        actors,
        [
            ("ops@example.com", ReplayState::Planned),
            ("replayer-1", ReplayState::Running),
            ("replayer-1", ReplayState::Finished)
        ]
    );
    let aborted = replays.history(&mut conn, other.id).unwrap().pop().unwrap();
    assert_eq!(
        (aborted.to, aborted.reason.as_str()),
        (ReplayState::Aborted, "planned by mistake")
    );
}
