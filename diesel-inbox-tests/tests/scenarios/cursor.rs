//! Sequence cursors: duplicates by watermark, the gap ledger, eviction, fencing, crashes,
//! batches and the bound on open gaps, on every backend.

use diesel_inbox::AdminError;
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::ops::RangeInclusive;
use std::thread;
use std::time::Duration;

use diesel_inbox::{
    cursor::{self, Cursor, Gap, GapCause, GapState, Resume, Sequenced},
    Ack, Audit, Delivery, Duplicate, Error, Inbox, Outcome,
};
use diesel_inbox_test::TestDatabase;
use proptest::test_runner::{Config, TestRunner};

use super::HandlerError;
use crate::support::{
    concurrently, readable, setup, setup_flavour, Backend, ChildTest, Flavour, TestConn, Tx,
};

/// The environment variable that makes a crash scenario its own child: the database URL.
const CRASH_CHILD: &str = "DIESEL_INBOX_CURSOR_CRASH_CHILD";

/// How long a crash scenario waits for its child to reach the point where it is killed.
const CHILD_STARTS_WITHIN: Duration = Duration::from_secs(60);

fn orders() -> Cursor {
    Inbox::new("projector").unwrap().cursor("orders-0").unwrap()
}

/// The row the effect of sequence `n` writes to `effects`.
fn label(cursor: &Cursor, n: u64) -> String {
    format!("{}:{n}", cursor.stream())
}

/// The effect of sequence `n`: one row in `effects`.
fn effect_of<C: TestConn>(cursor: &Cursor, n: u64) -> impl FnMut(&mut C) -> Result<(), Error> {
    let label = label(cursor, n);
    move |tx| tx.record_effect(&label).map_err(Error::from)
}

/// Delivers sequence `n` with its effect.
fn deliver<C: TestConn>(conn: &mut C, cursor: &Cursor, n: u64) -> Result<Outcome<()>, Error> {
    cursor.process(conn, n, effect_of(cursor, n))
}

/// How many times the effect of sequence `n` took effect.
fn effects<C: TestConn>(conn: &mut C, cursor: &Cursor, n: u64) -> usize {
    conn.effects_of(&label(cursor, n))
}

/// Sequence `n` of the event `id`.
fn with_id(n: u64, id: &str) -> Sequenced {
    Sequenced::new(n).event(Delivery::new(id).unwrap())
}

fn ranges(gaps: &[Gap]) -> Vec<RangeInclusive<u64>> {
    gaps.iter().map(Gap::sequences).collect()
}

/// The ranges of the stream's open gaps, in order.
fn open<C: TestConn>(conn: &mut C, cursor: &Cursor) -> Vec<RangeInclusive<u64>> {
    ranges(&readable(cursor.gaps().open(conn).unwrap()))
}

/// `(watermark, high)` of the stream.
fn position<C: TestConn>(conn: &mut C, cursor: &Cursor) -> (Option<u64>, Option<u64>) {
    let position = cursor
        .position(conn)
        .unwrap()
        .expect("the cursor has a row");
    (position.watermark(), position.high())
}

/// The sequence and the watermark of a duplicate by the cursor.
fn duplicate_sequence<T>(outcome: &Outcome<T>) -> Option<(u64, Option<u64>)> {
    outcome.duplicate().and_then(Duplicate::sequence)
}

/// What an outcome came to, to compare runs of them.
fn summary<T: Debug>(outcome: &Outcome<T>) -> String {
    match outcome {
        Outcome::Processed(_) => "processed".to_owned(),
        Outcome::ProcessedAfterGap { gaps, .. } => format!("processed after {:?}", ranges(gaps)),
        Outcome::Duplicate(_) => "duplicate".to_owned(),
        other => format!("{other:?}"),
    }
}

/// [`deliver`] on flavour `F`: sequence `n` with its effect.
async fn send<F: Flavour>(
    conn: &mut F::Conn,
    cursor: &Cursor,
    delivery: impl Into<Sequenced> + Send,
) -> Result<Outcome<()>, Error> {
    let delivery = delivery.into();
    let label = label(cursor, delivery.sequence());
    let apply = async |tx: &mut F::Conn| tx.write_effect(&label).await.map_err(Error::from);
    F::advance(cursor, conn, delivery, apply).await
}

/// [`open`] on flavour `F`.
async fn open_on<F: Flavour>(conn: &mut F::Conn, cursor: &Cursor) -> Vec<RangeInclusive<u64>> {
    ranges(&readable(F::open_gaps(&cursor.gaps(), conn).await.unwrap()))
}

/// [`position`] on flavour `F`.
async fn position_on<F: Flavour>(
    conn: &mut F::Conn,
    cursor: &Cursor,
) -> (Option<u64>, Option<u64>) {
    let position = F::position(cursor, conn).await.unwrap();
    let position = position.expect("the cursor has a row");
    (position.watermark(), position.high())
}

/// Where `cursor` resumes, on flavour `F`.
async fn resume_on<F: Flavour>(conn: &mut F::Conn, cursor: &Cursor) -> Resume {
    F::resume(cursor, conn).await.unwrap()
}

pub async fn a_sequence_at_or_below_the_watermark_is_a_duplicate_and_its_effect_does_not_run<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();
    for n in 1..=3 {
        let first = send::<F>(&mut conn, &cursor, n).await;
        assert_eq!(first.unwrap(), Outcome::Processed(()));
    }

    for n in [3, 1, 2, 3] {
        let outcome = send::<F>(&mut conn, &cursor, n).await.unwrap();
        let duplicate = outcome
            .duplicate()
            .unwrap_or_else(|| panic!("{n}: {outcome:?}"));
        assert_eq!(duplicate.sequence(), Some((n, Some(3))));
        assert_eq!(
            (duplicate.deliveries(), duplicate.processed_at()),
            (None, None)
        );
    }

    assert_eq!(check.effect_count(), 3, "no duplicate ran its effect");
    let next = send::<F>(&mut conn, &cursor, 4).await;
    assert_eq!(next.unwrap(), Outcome::Processed(()));
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(4), Some(4))
    );
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(5));
    for n in 1..=4 {
        assert_eq!(effects(&mut check, &cursor, n), 1, "sequence {n}");
    }
}

pub async fn a_late_arrival_into_a_gap_is_processed_once_and_fills_it<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();
    for n in 1..=2 {
        assert!(send::<F>(&mut conn, &cursor, n)
            .await
            .unwrap()
            .is_processed());
    }

    let jump = send::<F>(&mut conn, &cursor, 8).await;
    assert_eq!(Ack::of(&jump), Ack::Ack, "the gap is in the ledger");
    let Ok(Outcome::ProcessedAfterGap { gaps, .. }) = jump else {
        panic!("a jump is processed after a gap: {jump:?}");
    };
    assert_eq!(ranges(&gaps), [3..=7]);
    let gap = &gaps[0];
    assert_eq!(
        (gap.stream.as_str(), gap.cause, gap.state, gap.len()),
        ("orders-0", GapCause::Skipped, GapState::Open, 5)
    );
    let ledger = readable(F::open_gaps(&cursor.gaps(), &mut conn).await.unwrap());
    assert_eq!(ledger, gaps, "the ledger holds what the outcome said");
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(2), Some(8))
    );
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(3));

    // In the middle: the gap splits, the lower part keeping its id.
    let middle = send::<F>(&mut conn, &cursor, 5).await;
    assert_eq!(middle.unwrap(), Outcome::Processed(()));
    let split = readable(F::open_gaps(&cursor.gaps(), &mut conn).await.unwrap());
    assert_eq!(ranges(&split), [3..=4, 6..=7]);
    assert_eq!(split[0].id, gap.id);
    assert_ne!(split[1].id, gap.id);
    let again = send::<F>(&mut conn, &cursor, 5).await.unwrap();
    assert_eq!(
        duplicate_sequence(&again),
        Some((5, Some(2))),
        "settled out of order, above the watermark"
    );
    // At the edges: the gaps shrink.
    assert!(send::<F>(&mut conn, &cursor, 3)
        .await
        .unwrap()
        .is_processed());
    assert!(send::<F>(&mut conn, &cursor, 7)
        .await
        .unwrap()
        .is_processed());
    assert_eq!(open_on::<F>(&mut conn, &cursor).await, [4..=4, 6..=6]);
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(4));
    // Empty: filled.
    assert!(send::<F>(&mut conn, &cursor, 4)
        .await
        .unwrap()
        .is_processed());
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(6));
    assert!(send::<F>(&mut conn, &cursor, 6)
        .await
        .unwrap()
        .is_processed());

    assert_eq!(
        open_on::<F>(&mut conn, &cursor).await,
        Vec::<RangeInclusive<u64>>::new()
    );
    let closed = F::list_gaps(&cursor.gaps(), &mut conn, 0, 100).await;
    let closed = readable(closed.unwrap());
    assert_eq!(closed.len(), 2, "{closed:?}");
    for gap in &closed {
        assert_eq!(gap.state, GapState::Filled, "{gap:?}");
        assert!(
            gap.closed_at.is_some() && gap.resolution.is_none(),
            "{gap:?}"
        );
    }
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(8), Some(8))
    );
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(9));
    for n in 1..=8 {
        assert!(send::<F>(&mut conn, &cursor, n)
            .await
            .unwrap()
            .is_duplicate());
        assert_eq!(effects(&mut check, &cursor, n), 1, "sequence {n}");
    }
}

pub async fn a_cursor_behind_the_brokers_retention_records_an_evicted_gap_that_ops_resolve<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("projector").unwrap();
    let cursor = inbox.cursor("orders-0").unwrap();
    for n in 1..=10 {
        assert!(send::<F>(&mut conn, &cursor, n)
            .await
            .unwrap()
            .is_processed());
    }

    // The consumer was down while retention evicted 11..=49.
    let resumed = send::<F>(&mut conn, &cursor, Sequenced::new(50).first_available(50)).await;
    let resumed = resumed.unwrap();

    assert_eq!(ranges(resumed.gaps()), [11..=49]);
    let evicted = resumed.gaps()[0].clone();
    assert_eq!(
        (evicted.cause, evicted.state),
        (GapCause::Evicted, GapState::Open)
    );
    assert_eq!(
        readable(F::open_gaps(&cursor.gaps(), &mut conn).await.unwrap()),
        std::slice::from_ref(&evicted)
    );
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(50), Some(50)),
        "evicted sequences never come: the watermark moves past them"
    );
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(51));
    let below = send::<F>(&mut conn, &cursor, Sequenced::new(20).first_available(50)).await;
    assert_eq!(Ack::of(&below), Ack::Reject);
    assert!(
        matches!(
            below,
            Err(Error::Cursor(cursor::Refused::BeforeFirstAvailable {
                sequence: 20,
                first_available: 50,
                ..
            }))
        ),
        "{below:?}"
    );
    let next = send::<F>(&mut conn, &cursor, 51).await;
    assert_eq!(next.unwrap(), Outcome::Processed(()));

    let audit = Audit::new(
        "ops@example.com",
        "outage outlasted retention; replayed from S3",
    )
    .unwrap();
    let gaps = inbox.gaps();
    let resolved = F::resolve_gap(&gaps, &mut conn, evicted.id, &audit).await;
    let resolved = resolved.unwrap();

    assert_eq!(
        (resolved.id, resolved.sequences(), resolved.state),
        (evicted.id, 11..=49, GapState::Resolved)
    );
    assert_eq!(resolved.resolution.as_ref(), Some(&audit));
    assert!(resolved.closed_at.is_some());
    assert_eq!(
        readable(
            F::list_gaps(&cursor.gaps(), &mut conn, 0, 100)
                .await
                .unwrap()
        ),
        std::slice::from_ref(&resolved)
    );
    assert_eq!(
        open_on::<F>(&mut conn, &cursor).await,
        Vec::<RangeInclusive<u64>>::new()
    );
    let twice = F::resolve_gap(&gaps, &mut conn, evicted.id, &audit).await;
    assert!(
        matches!(twice, Err(AdminError::GapNotOpen { id, state: GapState::Resolved }) if id == evicted.id),
        "{twice:?}"
    );
    let unknown = evicted.id + 1000;
    let missing = F::resolve_gap(&gaps, &mut conn, unknown, &audit).await;
    assert!(
        matches!(missing, Err(AdminError::GapNotFound { id }) if id == unknown),
        "{missing:?}"
    );
    let billing = Inbox::new("billing").unwrap().gaps();
    let elsewhere = F::resolve_gap(&billing, &mut conn, evicted.id, &audit).await;
    assert!(
        matches!(elsewhere, Err(AdminError::GapNotFound { .. })),
        "another consumer's gap: {elsewhere:?}"
    );
    assert!(send::<F>(&mut conn, &cursor, 30)
        .await
        .unwrap()
        .is_duplicate());
    assert_eq!(effects(&mut check, &cursor, 30), 0);
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(52));
}

pub async fn a_zombie_instance_is_fenced_and_commits_nothing_not_even_its_effect<F: Flavour>() {
    let (db, mut check, mut a) = setup_flavour::<F>().await;
    let mut b = F::connect(&db).await;
    let stream = orders();

    let lease_a = F::acquire(&stream, &mut a, "instance-a").await.unwrap();
    assert_eq!((lease_a.epoch(), lease_a.resume()), (1, Resume::Fresh));
    let as_a = stream.clone().epoch(lease_a.epoch());
    assert!(send::<F>(&mut a, &as_a, 1).await.unwrap().is_processed());
    // A rebalance: B takes the stream over while A carries on.
    let lease_b = F::acquire(&stream, &mut b, "instance-b").await.unwrap();
    assert_eq!((lease_b.epoch(), lease_b.resume()), (2, Resume::At(2)));
    let as_b = stream.clone().epoch(lease_b.epoch());

    let zombie = send::<F>(&mut a, &as_a, 2).await;

    assert_eq!(Ack::of(&zombie), Ack::Redeliver);
    assert!(
        matches!(
            zombie,
            Err(Error::Cursor(cursor::Refused::Fenced {
                epoch: Some(1),
                current: 2,
                ..
            }))
        ),
        "{zombie:?}"
    );
    assert_eq!(
        effects(&mut check, &stream, 2),
        0,
        "the zombie's effect committed"
    );
    assert_eq!(position_on::<F>(&mut b, &stream).await, (Some(1), Some(1)));
    let no_epoch = send::<F>(&mut b, &stream, 2).await;
    assert!(
        matches!(
            no_epoch,
            Err(Error::Cursor(cursor::Refused::Fenced { epoch: None, .. }))
        ),
        "{no_epoch:?}"
    );
    assert!(
        matches!(
            send::<F>(&mut a, &as_a, 1).await,
            Err(Error::Cursor(cursor::Refused::Fenced { .. }))
        ),
        "even a duplicate"
    );
    let taken_over = send::<F>(&mut b, &as_b, 2).await;
    assert_eq!(taken_over.unwrap(), Outcome::Processed(()));
    assert_eq!(effects(&mut check, &stream, 2), 1);
    let now = F::position(&stream, &mut a).await.unwrap().unwrap();
    assert_eq!(
        (now.epoch(), now.owner(), now.watermark()),
        (2, Some("instance-b"), Some(2))
    );
}

pub fn two_instances_racing_on_one_stream_take_effect_once_per_sequence<B: Backend>() {
    const LAST: u64 = 40;
    const ATTEMPTS: usize = 20;
    let (db, mut conn) = setup::<B>();
    let stream = orders();
    // Split brain: both instances write with the epoch they both believe is theirs.
    let cursor = stream
        .clone()
        .epoch(stream.acquire(&mut conn, "both").unwrap().epoch());
    // A fresh cursor starts at the first sequence it sees.
    assert!(deliver(&mut conn, &cursor, 1).unwrap().is_processed());

    let processed = concurrently(&db, 2, |instance, conn| {
        let mut order: Vec<u64> = (2..=LAST).collect();
        fastrand::Rng::with_seed(instance as u64).shuffle(&mut order);
        let mut processed = Vec::new();
        for n in order {
            let mut attempts = 0;
            let outcome = loop {
                attempts += 1;
                match deliver(conn, &cursor, n) {
                    Ok(outcome) => break outcome,
                    Err(e) if e.ack() == Ack::Redeliver && attempts < ATTEMPTS => {}
                    Err(e) => panic!("sequence {n}, attempt {attempts}: {e}"),
                }
            };
            if outcome.is_processed() {
                processed.push(n);
            }
        }
        processed
    });

    let mut processed: Vec<u64> = processed.into_iter().flatten().collect();
    processed.sort_unstable();
    assert_eq!(
        processed,
        (2..=LAST).collect::<Vec<_>>(),
        "each sequence processed once"
    );
    for n in 1..=LAST {
        assert_eq!(effects(&mut conn, &cursor, n), 1, "sequence {n}");
    }
    assert_eq!(open(&mut conn, &cursor), Vec::<RangeInclusive<u64>>::new());
    assert_eq!(cursor.resume(&mut conn).unwrap(), Resume::At(LAST + 1));
}

/// In the child process of a crash scenario: a connection to its parent's database.
fn as_crash_child<B: Backend>() -> Option<B::Conn> {
    std::env::var(CRASH_CHILD)
        .ok()
        .map(|url| B::connect_to(&url))
}

/// The child's last words: `marker`, then it waits to be killed.
fn await_the_kill(marker: &str) {
    println!("{marker}");
    thread::sleep(2 * CHILD_STARTS_WITHIN);
}

/// The parent of a crash scenario: with sequence 1 processed, runs the scenario `test` in a
/// child process until it prints `marker`, and kills it there.
fn crash_a_child<B: Backend>(test: &str, marker: &str) -> (TestDatabase<B::Conn>, B::Conn) {
    let (db, mut conn) = setup::<B>();
    assert!(deliver(&mut conn, &orders(), 1).unwrap().is_processed());
    let mut child = ChildTest::spawn(test, &[(CRASH_CHILD, db.url())]);
    child.wait_for(marker, CHILD_STARTS_WITHIN);
    child.kill();
    (db, conn)
}

pub fn a_sequence_redelivered_after_a_crash_between_commit_and_ack_is_a_duplicate<B: Backend>() {
    const COMMITTED: &str = "sequence 2 committed, not acked";
    let cursor = orders();
    if let Some(mut conn) = as_crash_child::<B>() {
        assert!(deliver(&mut conn, &cursor, 2).unwrap().is_processed());
        await_the_kill(COMMITTED);
        return;
    }

    let (_db, mut conn) = crash_a_child::<B>(
        "a_sequence_redelivered_after_a_crash_between_commit_and_ack_is_a_duplicate",
        COMMITTED,
    );

    let redelivered = deliver(&mut conn, &cursor, 2).unwrap();
    assert!(redelivered.is_duplicate(), "{redelivered:?}");
    assert_eq!(effects(&mut conn, &cursor, 2), 1);
    assert_eq!(
        deliver(&mut conn, &cursor, 3).unwrap(),
        Outcome::Processed(())
    );
}

pub fn a_sequence_redelivered_after_a_crash_inside_its_transaction_is_processed_once<B: Backend>() {
    const EFFECT_WRITTEN: &str = "sequence 2's effect written, not committed";
    let cursor = orders();
    if let Some(mut conn) = as_crash_child::<B>() {
        let label = label(&cursor, 2);
        let _ = cursor.process(&mut conn, 2, |tx| {
            tx.record_effect(&label)?;
            await_the_kill(EFFECT_WRITTEN);
            Ok::<_, Error>(())
        });
        return;
    }

    let (_db, mut conn) = crash_a_child::<B>(
        "a_sequence_redelivered_after_a_crash_inside_its_transaction_is_processed_once",
        EFFECT_WRITTEN,
    );

    assert_eq!(
        deliver(&mut conn, &cursor, 2).unwrap(),
        Outcome::Processed(())
    );
    assert_eq!(effects(&mut conn, &cursor, 2), 1);
    assert_eq!(position(&mut conn, &cursor), (Some(2), Some(2)));
}

/// The model: a fresh cursor starts at the first sequence delivered; every sequence from there
/// on takes effect on its first delivery; the open gaps are what is missing below the highest.
#[derive(Default)]
struct Model {
    start: Option<u64>,
    settled: BTreeSet<u64>,
}

impl Model {
    /// What delivering `n` should come to.
    fn deliver(&mut self, n: u64) -> String {
        let start = *self.start.get_or_insert(n);
        let high = self.settled.last().copied();
        if n < start || !self.settled.insert(n) {
            return "duplicate".to_owned();
        }
        match high {
            Some(high) if n > high + 1 => {
                let gap = high + 1..=n - 1;
                format!("processed after {:?}", [gap])
            }
            _ => "processed".to_owned(),
        }
    }

    fn missing(&self) -> BTreeSet<u64> {
        match (self.start, self.settled.last()) {
            (Some(start), Some(&high)) => (start..=high)
                .filter(|n| !self.settled.contains(n))
                .collect(),
            _ => BTreeSet::new(),
        }
    }

    fn resume(&self) -> Resume {
        let next = self.settled.last().map(|high| high + 1);
        self.missing()
            .first()
            .copied()
            .or(next)
            .map_or(Resume::Fresh, Resume::At)
    }
}

pub fn proptest_delivery_orders_take_effect_once_and_leave_open_exactly_the_missing_sequences<
    B: Backend,
>() {
    let (_db, conn) = setup::<B>();
    let conn = RefCell::new(conn);
    let cases = Cell::new(0_u32);
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Config::default()
    });
    let deliveries = proptest::collection::vec(1_u64..=12, 1..=24);

    runner
        .run(&deliveries, |deliveries| {
            cases.set(cases.get() + 1);
            let cursor = Inbox::new("projector")
                .unwrap()
                .cursor(&format!("case-{}", cases.get()))
                .unwrap();
            let conn = &mut *conn.borrow_mut();
            let mut model = Model::default();
            for &n in &deliveries {
                let outcome = deliver(conn, &cursor, n).unwrap();
                proptest::prop_assert_eq!(summary(&outcome), model.deliver(n), "sequence {}", n);
                let open: BTreeSet<u64> = readable(cursor.gaps().open(conn).unwrap())
                    .iter()
                    .flat_map(Gap::sequences)
                    .collect();
                proptest::prop_assert_eq!(open, model.missing(), "after {}", n);
                proptest::prop_assert_eq!(cursor.resume(conn).unwrap(), model.resume());
            }
            for n in 1..=12 {
                let expected = usize::from(model.settled.contains(&n));
                proptest::prop_assert_eq!(effects(conn, &cursor, n), expected, "sequence {}", n);
            }
            Ok(())
        })
        .unwrap();
}

pub async fn a_batch_with_a_duplicate_and_a_jump_updates_the_cursor_once_and_reports_in_order<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();
    assert!(send::<F>(&mut conn, &cursor, 1)
        .await
        .unwrap()
        .is_processed());
    let log = F::log(&mut conn);

    let run = [(2, "b"), (3, "c"), (2, "b"), (6, "f"), (4, "d"), (6, "f")];
    let apply = async |tx: &mut F::Conn, n: u64, _: &&str| {
        tx.write_effect(&label(&cursor, n))
            .await
            .map_err(Error::from)
    };
    let outcomes = F::advance_batch(&cursor, &mut conn, &run, apply)
        .await
        .unwrap();

    let cursor_updates = log
        .take()
        .into_iter()
        .filter(|sql| sql.starts_with("UPDATE") && sql.contains("diesel_inbox_cursors"))
        .count();
    assert_eq!(
        cursor_updates, 1,
        "one update of the cursor row for the run"
    );
    let outcomes: Vec<String> = outcomes.iter().map(summary).collect();
    assert_eq!(
        outcomes,
        [
            "processed",
            "processed",
            "duplicate",
            "processed after [4..=5]",
            "processed",
            "duplicate"
        ]
    );
    for n in 1..=6 {
        assert_eq!(
            effects(&mut check, &cursor, n),
            usize::from(n != 5),
            "sequence {n}"
        );
    }
    assert_eq!(open_on::<F>(&mut conn, &cursor).await, [5..=5]);
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(4), Some(6))
    );
}

pub async fn an_effect_error_in_a_batch_rolls_the_whole_run_back<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();
    assert!(send::<F>(&mut conn, &cursor, 1)
        .await
        .unwrap()
        .is_processed());
    let run = [(2, ()), (4, ()), (3, ())];

    let failing = async |tx: &mut F::Conn, n: u64, (): &()| {
        tx.write_effect(&label(&cursor, n)).await.unwrap();
        if n == 3 {
            return Err(HandlerError::Refused);
        }
        Ok(())
    };
    let failed = F::advance_batch(&cursor, &mut conn, &run, failing).await;

    assert_eq!(failed, Err(HandlerError::Refused));
    for n in 2..=4 {
        assert_eq!(effects(&mut check, &cursor, n), 0, "sequence {n}");
    }
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(1), Some(1))
    );
    let gaps = F::list_gaps(&cursor.gaps(), &mut conn, 0, 100).await;
    assert!(gaps.unwrap().is_empty(), "the gap rolled back too");
    let apply = async |tx: &mut F::Conn, n: u64, (): &()| {
        tx.write_effect(&label(&cursor, n))
            .await
            .map_err(Error::from)
    };
    let outcomes = F::advance_batch(&cursor, &mut conn, &run, apply)
        .await
        .unwrap();
    let outcomes: Vec<String> = outcomes.iter().map(summary).collect();
    assert_eq!(
        outcomes,
        ["processed", "processed after [3..=3]", "processed"]
    );
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(4), Some(4))
    );
}

pub async fn a_stream_from_zero_missing_its_first_sequence_has_no_watermark_and_resumes_at_zero<
    F: Flavour,
>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();

    let first = send::<F>(&mut conn, &cursor, Sequenced::new(2).first_available(0)).await;

    assert_eq!(ranges(first.unwrap().gaps()), [0..=1]);
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (None, Some(2)),
        "nothing at or below a watermark is settled yet"
    );
    assert_eq!(resume_on::<F>(&mut conn, &cursor).await, Resume::At(0));
    assert!(send::<F>(&mut conn, &cursor, 0)
        .await
        .unwrap()
        .is_processed());
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(0), Some(2))
    );
}

pub async fn past_max_open_gaps_a_new_gap_is_refused_and_a_filling_sequence_accepted<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders().max_open_gaps(2);
    for n in [1, 3, 5] {
        assert!(send::<F>(&mut conn, &cursor, n)
            .await
            .unwrap()
            .is_processed());
    }
    assert_eq!(open_on::<F>(&mut conn, &cursor).await, [2..=2, 4..=4]);

    let third = send::<F>(&mut conn, &cursor, 7).await;

    assert_eq!(Ack::of(&third), Ack::Redeliver);
    assert!(
        matches!(
            third,
            Err(Error::Cursor(cursor::Refused::TooManyOpenGaps {
                open: 2,
                ..
            }))
        ),
        "{third:?}"
    );
    assert_eq!(effects(&mut check, &cursor, 7), 0);
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(1), Some(5))
    );
    assert_eq!(open_on::<F>(&mut conn, &cursor).await, [2..=2, 4..=4]);
    // The next sequence opens no gap, and a late one closes one.
    let next = send::<F>(&mut conn, &cursor, 6).await;
    assert_eq!(next.unwrap(), Outcome::Processed(()));
    let late = send::<F>(&mut conn, &cursor, 2).await;
    assert_eq!(late.unwrap(), Outcome::Processed(()));
    assert_eq!(open_on::<F>(&mut conn, &cursor).await, [4..=4]);
    let after = send::<F>(&mut conn, &cursor, 8).await.unwrap();
    assert_eq!(summary(&after), "processed after [7..=7]");
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(3), Some(8))
    );
}

pub async fn an_event_id_republished_under_a_new_sequence_is_a_duplicate_and_the_cursor_prunes_id_rows<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let cursor = orders();

    let first = send::<F>(&mut conn, &cursor, with_id(1, "evt-a")).await;
    assert!(first.unwrap().is_processed());
    assert!(check.has_inbox_row("projector", "evt-a"));
    let republished = send::<F>(&mut conn, &cursor, with_id(2, "evt-a"))
        .await
        .unwrap();
    assert_eq!(
        republished.duplicate().and_then(Duplicate::deliveries),
        Some(2),
        "a duplicate by its id: {republished:?}"
    );
    assert_eq!(effects(&mut check, &cursor, 2), 0);
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(2), Some(2))
    );
    for (n, id) in [(3, "evt-c"), (4, "evt-d")] {
        let sent = send::<F>(&mut conn, &cursor, with_id(n, id)).await;
        assert!(sent.unwrap().is_processed());
    }
    let after_gap = send::<F>(&mut conn, &cursor, with_id(6, "evt-f")).await;
    assert_eq!(summary(&after_gap.unwrap()), "processed after [5..=5]");

    assert_eq!(F::prune_events(&cursor, &mut conn, 2).await.unwrap(), 3);

    for pruned in ["evt-a", "evt-c", "evt-d"] {
        assert!(!check.has_inbox_row("projector", pruned), "{pruned} kept");
    }
    assert!(
        check.has_inbox_row("projector", "evt-f"),
        "above the watermark"
    );
    let again = send::<F>(&mut conn, &cursor, with_id(3, "evt-c"))
        .await
        .unwrap();
    assert_eq!(
        duplicate_sequence(&again),
        Some((3, Some(4))),
        "a duplicate by the cursor now: {again:?}"
    );
    let filled = send::<F>(&mut conn, &cursor, with_id(5, "evt-e")).await;
    assert!(filled.unwrap().is_processed());
    assert_eq!(F::prune_events(&cursor, &mut conn, 2).await.unwrap(), 2);
    assert_eq!(check.inbox_rows_like("projector", "evt-"), 0);
    for n in [1, 3, 4, 5, 6] {
        assert_eq!(effects(&mut check, &cursor, n), 1, "sequence {n}");
    }
}

pub async fn a_dead_lettered_sequence_moves_the_cursor_past_it<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("projector").unwrap().max_attempts(1);
    let cursor = inbox.cursor("orders-0").unwrap();
    let second = label(&cursor, 2);
    let failing = async |tx: &mut F::Conn| {
        tx.write_effect(&second).await.unwrap();
        Err::<(), _>(HandlerError::Refused)
    };
    let first = send::<F>(&mut conn, &cursor, with_id(1, "evt-1")).await;
    assert!(first.unwrap().is_processed());

    // Without its event id, a failure commits nothing and the sequence comes again.
    let bare = F::advance(&cursor, &mut conn, 2, failing).await;
    assert_eq!(bare, Err(HandlerError::Refused));
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(1), Some(1))
    );

    let dead = F::advance(&cursor, &mut conn, with_id(2, "evt-2"), failing).await;

    assert_eq!(Ack::of(&dead), Ack::Ack);
    assert!(dead.unwrap().is_dead_lettered());
    assert_eq!(effects(&mut check, &cursor, 2), 0);
    assert!(F::show(&inbox, &mut conn, "evt-2").await.is_ok());
    assert_eq!(
        position_on::<F>(&mut conn, &cursor).await,
        (Some(2), Some(2))
    );
    let third = send::<F>(&mut conn, &cursor, with_id(3, "evt-3")).await;
    assert_eq!(
        third.unwrap(),
        Outcome::Processed(()),
        "the next sequence, with no gap"
    );
    let gaps = F::list_gaps(&cursor.gaps(), &mut conn, 0, 100).await;
    assert!(gaps.unwrap().is_empty());
    assert!(send::<F>(&mut conn, &cursor, 2)
        .await
        .unwrap()
        .is_duplicate());
    assert_eq!(effects(&mut check, &cursor, 2), 0);
    assert_eq!(F::prune_events(&cursor, &mut conn, 10).await.unwrap(), 2);
    assert!(
        F::show(&inbox, &mut conn, "evt-2").await.is_ok(),
        "pruning by the cursor keeps dead letters"
    );
}
