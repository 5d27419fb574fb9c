//! Delivery schedules: what a broker does to a consumer (duplicates, reorderings, failed
//! deliveries), run through the inbox and checked against one effect per distinct event.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Debug};
use std::future::{poll_fn, Future};
use std::panic::{self, AssertUnwindSafe};
use std::pin::pin;
use std::sync::{Mutex, PoisonError};
use std::task::Poll;

use diesel::QueryResult;
use diesel_inbox::{Error, EventId, Inbox, InboxConnection, InboxRecord, Outcome};
use proptest::strategy::{Just, Strategy};

use crate::faults::Fault;
use crate::harness::{observe, DeliveryReport};
use crate::reach::{now, Reach};

/// One delivery in a [`Schedule`]: the event, and the fault that fails it, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    event_id: EventId,
    fault: Option<Fault>,
}

impl Step {
    /// A delivery of `event_id`, failed by `fault` after the effect ran, or not failed.
    pub fn new(event_id: EventId, fault: Option<Fault>) -> Self {
        Self { event_id, fault }
    }

    /// The event delivered.
    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }

    /// The fault injected into this delivery. It strikes only when the delivery runs the
    /// effect: a duplicate skips the effect, and the fault with it.
    pub fn fault(&self) -> Option<Fault> {
        self.fault
    }
}

/// The deliveries a consumer sees, in order: events more than once, out of order, some
/// deliveries failed by an injected fault, as an at-least-once broker hands them over.
///
/// Make one with [`Schedule::random`], [`ScheduleOptions::random`], the proptest strategy
/// [`ScheduleOptions::strategy`], or by hand with [`Schedule::new`]; run it with
/// [`run_schedule`].
///
/// ```
/// use diesel_inbox_test::Schedule;
///
/// let schedule = Schedule::random(42);
/// assert_eq!(schedule, Schedule::random(42), "a seed gives the same schedule");
/// // Generated schedules end each event with a delivery that no fault fails.
/// assert_eq!(schedule.expected_effects(), schedule.distinct_events());
/// println!("{schedule}"); // evt-3, evt-0 (error), evt-3, evt-0, ...
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Schedule {
    steps: Vec<Step>,
}

impl Schedule {
    /// The deliveries `steps`, in order.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        Self {
            steps: steps.into_iter().collect(),
        }
    }

    /// A random schedule from `seed`, shaped by [`ScheduleOptions::default`].
    pub fn random(seed: u64) -> Self {
        ScheduleOptions::default().random(seed)
    }

    /// The deliveries, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// How many distinct events the schedule delivers.
    pub fn distinct_events(&self) -> usize {
        self.steps
            .iter()
            .map(Step::event_id)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// How many effects a correct handler leaves: one per distinct event that has at least
    /// one delivery no fault fails.
    pub fn expected_effects(&self) -> usize {
        self.steps
            .iter()
            .filter(|step| step.fault.is_none())
            .map(Step::event_id)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Steps `(event number, fault)` made into a schedule of `evt-<n>` ids in which each
    /// event's last delivery succeeds, as a broker redelivers until one does.
    fn completing(mut steps: Vec<(usize, Option<Fault>)>) -> Self {
        let mut seen = BTreeSet::new();
        for (event, fault) in steps.iter_mut().rev() {
            if seen.insert(*event) {
                *fault = None;
            }
        }
        Self::new(steps.into_iter().map(|(event, fault)| {
            let id = EventId::new(format!("evt-{event}")).expect("a valid generated id");
            Step::new(id, fault)
        }))
    }
}

/// The schedule as a list, `evt-3, evt-0 (error), evt-0 (panic), ...`, to read in a failure.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, step) in self.steps.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            f.write_str(step.event_id.as_str())?;
            match step.fault {
                None => {}
                Some(Fault::Error) => f.write_str(" (error)")?,
                Some(Fault::Panic) => f.write_str(" (panic)")?,
            }
        }
        Ok(())
    }
}

/// The shape of random schedules: how many events, how many copies of each, how often a
/// delivery fails.
///
/// Each event is delivered between 1 and [`max_copies`](Self::max_copies) times, all
/// deliveries shuffled together; each delivery but an event's last fails with
/// [`failure_rate`](Self::failure_rate), by an error or (with [`panics`](Self::panics)) as
/// often by a panic. The last delivery of each event succeeds, as a broker redelivers a
/// failed message until one does, so every event should take effect once.
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub struct ScheduleOptions {
    events: usize,
    max_copies: usize,
    failure_rate: f64,
    panics: bool,
}

impl Default for ScheduleOptions {
    /// 6 events, up to 4 copies each, a quarter of deliveries failing, half of those by panic.
    fn default() -> Self {
        Self {
            events: 6,
            max_copies: 4,
            failure_rate: 0.25,
            panics: true,
        }
    }
}

impl ScheduleOptions {
    /// How many distinct events a schedule delivers (at most, for the proptest strategy).
    /// Defaults to 6.
    ///
    /// # Panics
    ///
    /// When `events` is 0.
    pub fn events(mut self, events: usize) -> Self {
        assert!(events > 0, "a schedule delivers at least one event");
        self.events = events;
        self
    }

    /// The most deliveries of one event. Defaults to 4.
    ///
    /// # Panics
    ///
    /// When `copies` is 0.
    pub fn max_copies(mut self, copies: usize) -> Self {
        assert!(copies > 0, "each event is delivered at least once");
        self.max_copies = copies;
        self
    }

    /// The chance that a delivery other than an event's last fails. Defaults to 0.25.
    ///
    /// # Panics
    ///
    /// When `rate` is not within `0.0..=1.0`.
    pub fn failure_rate(mut self, rate: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&rate),
            "a failure rate is within 0.0..=1.0, not {rate}"
        );
        self.failure_rate = rate;
        self
    }

    /// Whether failures are panics as often as errors; otherwise all are errors. Defaults to
    /// `true`.
    pub fn panics(mut self, panics: bool) -> Self {
        self.panics = panics;
        self
    }

    /// A schedule of exactly [`events`](Self::events) events, drawn from `seed`: the same
    /// seed gives the same schedule.
    pub fn random(&self, seed: u64) -> Schedule {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut steps = Vec::new();
        for event in 0..self.events {
            for _ in 0..rng.usize(1..=self.max_copies) {
                let fails = rng.f64() < self.failure_rate;
                steps.push((event, fails.then(|| self.fault(rng.bool()))));
            }
        }
        rng.shuffle(&mut steps);
        Schedule::completing(steps)
    }

    /// A proptest strategy for schedules of 1 to [`events`](Self::events) events. A failing
    /// case shrinks toward fewer events, fewer copies, fewer faults and less shuffling.
    ///
    /// ```
    /// use diesel_inbox_test::ScheduleOptions;
    /// use proptest::prelude::*;
    ///
    /// proptest!(|(schedule in ScheduleOptions::default().events(3).strategy())| {
    ///     prop_assert!((1..=3).contains(&schedule.distinct_events()));
    ///     prop_assert_eq!(schedule.expected_effects(), schedule.distinct_events());
    /// });
    /// ```
    pub fn strategy(&self) -> impl Strategy<Value = Schedule> {
        let options = *self;
        let fault = (
            proptest::bool::weighted(options.failure_rate),
            proptest::bool::ANY,
        )
            .prop_map(move |(fails, panics)| fails.then(|| options.fault(panics)));
        let event = proptest::collection::vec(fault, 1..=options.max_copies);
        proptest::collection::vec(event, 1..=options.events)
            .prop_map(|events| {
                let steps = events.into_iter().enumerate().flat_map(|(event, faults)| {
                    faults.into_iter().map(move |fault| (event, fault))
                });
                steps.collect::<Vec<_>>()
            })
            .prop_flat_map(|steps| Just(steps).prop_shuffle())
            .prop_map(Schedule::completing)
    }

    fn fault(&self, panics: bool) -> Fault {
        if self.panics && panics {
            Fault::Panic
        } else {
            Fault::Error
        }
    }
}

/// Why a delivery in a schedule failed.
pub(crate) enum Failed<E> {
    /// The fault the schedule injected: expected.
    Injected,
    /// The effect's own error: the test's failure.
    Effect(E),
    /// The inbox's error: the test's failure.
    Inbox(Error),
}

/// The inbox records a failed delivery with this text.
impl<E: Debug> fmt::Display for Failed<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Injected => f.write_str("fault injected by run_schedule"),
            Self::Effect(error) => write!(f, "the effect failed: {error:?}"),
            Self::Inbox(error) => write!(f, "{error}"),
        }
    }
}

impl<E> From<Error> for Failed<E> {
    fn from(error: Error) -> Self {
        Self::Inbox(error)
    }
}

impl<E: Debug> diesel_inbox::HandlerError for Failed<E> {
    fn inbox_error(&self) -> Option<&Error> {
        match self {
            Self::Inbox(error) => Some(error),
            Self::Injected | Self::Effect(_) => None,
        }
    }
}

/// What the run saw of one event.
#[derive(Default)]
struct Seen {
    processed: usize,
    /// Deliveries that committed: the one that processed it, and the duplicates.
    counted: u64,
    /// Its inbox row after the run.
    record: Option<InboxRecord>,
}

/// What a schedule's deliveries came to, before the checks.
pub(crate) struct Played<'s> {
    seen: BTreeMap<&'s EventId, Seen>,
    duplicates: usize,
    failed: usize,
}

/// One step's fault, and whether it struck: set by the handler, read after the delivery.
pub(crate) struct Struck {
    fault: Option<Fault>,
    struck: Mutex<Option<Fault>>,
}

impl Struck {
    /// What the `n`th step's handler returns: the effect's error as it is, or else its value
    /// failed by the step's fault, if any.
    pub(crate) fn strike<T, E>(
        &self,
        effect: Result<T, E>,
        n: usize,
        id: &EventId,
    ) -> Result<T, Failed<E>> {
        let value = effect.map_err(Failed::Effect)?;
        let Some(fault) = self.fault else {
            return Ok(value);
        };
        *self.struck.lock().unwrap_or_else(PoisonError::into_inner) = Some(fault);
        match fault {
            Fault::Panic => panic!("fault injected in delivery {n} ({id}) by run_schedule"),
            Fault::Error => Err(Failed::Injected),
        }
    }

    fn panicked(&self) -> bool {
        *self.struck.lock().unwrap_or_else(PoisonError::into_inner) == Some(Fault::Panic)
    }
}

/// How a schedule's steps reach the inbox in one flavour: each step delivered with the
/// test's effect, then struck by the step's fault.
pub(crate) trait Deliver<C> {
    /// The inbox, which reads the rows back.
    type Inbox: Reach<C>;
    /// What the effect returns.
    type Output;
    /// Its error.
    type Error: Debug;

    /// Delivers step `n`, event `id`, through `inbox`.
    fn deliver(
        &mut self,
        inbox: &Self::Inbox,
        conn: &mut C,
        n: usize,
        id: &EventId,
        struck: &Struck,
    ) -> impl Future<Output = Result<Outcome<Self::Output>, Failed<Self::Error>>>;
}

/// The sync flavour's steps: `effect(tx, id)` through [`Inbox::process`].
struct SyncSteps<G>(G);

impl<C, T, E, G> Deliver<C> for SyncSteps<G>
where
    C: InboxConnection,
    E: Debug,
    G: FnMut(&mut C, &EventId) -> Result<T, E>,
{
    type Inbox = Inbox;
    type Output = T;
    type Error = E;

    fn deliver(
        &mut self,
        inbox: &Inbox,
        conn: &mut C,
        n: usize,
        id: &EventId,
        struck: &Struck,
    ) -> impl Future<Output = Result<Outcome<T>, Failed<E>>> {
        // Lazy, so that a panic in the effect is raised where the delivery is polled.
        let effect = &mut self.0;
        async move { inbox.process(conn, id, |tx| struck.strike(effect(tx, id), n, id)) }
    }
}

/// `future`'s output, or the panic it raised while polled.
pub(crate) async fn caught<F: Future>(future: F) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut future = pin!(future);
    poll_fn(
        |cx| match panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        },
    )
    .await
}

/// Delivers each step of `schedule` through `inbox`, then reads each event's inbox row:
/// [`run_schedule`]'s deliveries, in either flavour. Panics on a delivery the schedule did
/// not fail that failed, as [`run_schedule`] documents.
pub(crate) async fn play<'s, C, D: Deliver<C>>(
    conn: &mut C,
    inbox: &D::Inbox,
    schedule: &'s Schedule,
    steps: &mut D,
) -> Played<'s> {
    let mut played = Played {
        seen: BTreeMap::new(),
        duplicates: 0,
        failed: 0,
    };
    for (n, step) in (1..).zip(schedule.steps()) {
        let id = step.event_id();
        let struck = Struck {
            fault: step.fault(),
            struck: Mutex::new(None),
        };
        let delivery = caught(steps.deliver(inbox, conn, n, id, &struck)).await;
        let tally = played.seen.entry(id).or_default();
        match delivery {
            // Asked, not matched: later modes add outcomes, which fail the run below.
            Ok(Ok(outcome)) if outcome.is_processed() => {
                tally.processed += 1;
                tally.counted += 1;
            }
            Ok(Ok(outcome)) if outcome.is_duplicate() => {
                played.duplicates += 1;
                tally.counted += 1;
            }
            Ok(Ok(_)) => panic!(
                "delivery {n} ({id}) ended neither processed nor duplicate\nschedule: {schedule}"
            ),
            Ok(Err(Failed::Injected)) => played.failed += 1,
            Ok(Err(Failed::Effect(e))) => panic!(
                "the effect failed in delivery {n} ({id}), where no fault was injected: {e:?}\n\
                 schedule: {schedule}"
            ),
            Ok(Err(Failed::Inbox(e))) => {
                panic!("the inbox failed in delivery {n} ({id}): {e}\nschedule: {schedule}")
            }
            Err(_) if struck.panicked() => played.failed += 1,
            Err(payload) => panic::resume_unwind(payload),
        }
    }
    for (id, seen) in &mut played.seen {
        seen.record = inbox
            .record(conn, id)
            .await
            .unwrap_or_else(|e| panic!("cannot read the inbox table: {e}"));
    }
    played
}

/// [`run_schedule`]'s checks, on what the run `played` and the effect count `before` and
/// `after` it.
#[track_caller]
pub(crate) fn judge(
    schedule: &Schedule,
    played: Played<'_>,
    before: i64,
    after: i64,
) -> DeliveryReport {
    let Played {
        seen,
        duplicates,
        failed,
    } = played;
    let expected = schedule.expected_effects();
    let grew = after - before;
    if usize::try_from(grew).ok() != Some(expected) {
        let hint = if usize::try_from(grew).is_ok_and(|grew| grew > expected) {
            "failed deliveries kept their effect: the effect writes outside the inbox \
             transaction (another connection, or before or after the inbox call)"
        } else {
            "does `effects` count what the effect writes, on the database it writes to?"
        };
        panic!(
            "{} deliveries of {} distinct events ({failed} failed by injected faults) took \
             effect {grew} times, expected {expected} (the effect count went from {before} \
             to {after}): {hint}\nschedule: {schedule}",
            schedule.steps().len(),
            schedule.distinct_events(),
        );
    }

    let mut processed = 0;
    for (id, seen) in seen {
        processed += seen.processed;
        match (seen.processed, seen.record) {
            (0, None) if seen.counted == 0 => {}
            (1, Some(record)) if record.deliveries() == seen.counted => {}
            (processed, record) => panic!(
                "event {id} was processed {processed} times in {} deliveries that did not fail; \
                 the inbox row: {}\nschedule: {schedule}",
                seen.counted,
                record.map_or_else(|| "none".to_owned(), |r| r.to_string()),
            ),
        }
    }

    DeliveryReport {
        deliveries: schedule.steps().len(),
        processed,
        duplicates,
        failed,
        effects: grew,
    }
}

/// Runs `schedule` through `inbox` on `conn`, with `effect` as the handler's effect, and
/// asserts that each distinct event took effect exactly once.
///
/// Each step is one delivery, `inbox.process(conn, id, ..)`, running `effect(tx, id)`; a step
/// with a fault then fails the transaction, by an error or a panic, after the effect wrote.
/// `effects` counts the effect as it stands in the database, before and after the run (see
/// [`assert_idempotent`](super::assert_idempotent)).
///
/// The checks, with the schedule in every failure message:
/// - the effect count grew by [`Schedule::expected_effects`]: once per distinct event;
/// - no event was processed twice, and each one with a successful delivery was processed;
/// - each event's inbox row counts exactly the deliveries that did not fail, and an event
///   whose deliveries all failed has no row.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::connection::SimpleConnection;
/// use diesel::dsl::sql;
/// use diesel::prelude::*;
/// use diesel::sql_types::{BigInt, Text};
/// use diesel_inbox_test::{run_schedule, Schedule, TestDatabase};
/// use diesel_inbox::Inbox;
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// conn.batch_execute("CREATE TABLE ledger (event_id TEXT NOT NULL)")?;
///
/// for seed in 0..5 {
///     // Every random schedule uses the ids evt-0, evt-1, ...: a consumer per run keeps them apart.
///     let inbox = Inbox::new(&format!("ledger-{seed}"))?;
///     let schedule = Schedule::random(seed);
///     let report = run_schedule(
///         &mut conn,
///         &inbox,
///         &schedule,
///         |tx, id| {
///             diesel::sql_query("INSERT INTO ledger VALUES (?)")
///                 .bind::<Text, _>(format!("{seed}/{id}"))
///                 .execute(tx)
///         },
///         |conn| sql::<BigInt>("SELECT COUNT(*) FROM ledger").get_result(conn),
///     );
///     assert_eq!(report.processed(), schedule.distinct_events());
/// }
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Panics
///
/// When a check fails; when the effect or the inbox fails on a delivery with no fault
/// injected; when counting the effect or reading the inbox fails. A panic in `effect` other
/// than an injected one propagates.
#[track_caller]
pub fn run_schedule<C, T, E, F, O>(
    conn: &mut C,
    inbox: &Inbox,
    schedule: &Schedule,
    effect: F,
    mut effects: O,
) -> DeliveryReport
where
    C: InboxConnection,
    F: FnMut(&mut C, &EventId) -> Result<T, E>,
    E: Debug,
    O: FnMut(&mut C) -> QueryResult<i64>,
{
    let before = observe(&mut effects, conn, "before the first delivery");
    let played = now(play(conn, inbox, schedule, &mut SyncSteps(effect)));
    let after = observe(&mut effects, conn, "after the last delivery");
    judge(schedule, played, before, after)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// For each event, whether its last delivery succeeds.
    fn last_deliveries_succeed(schedule: &Schedule) -> bool {
        let mut last = BTreeMap::new();
        for step in schedule.steps() {
            last.insert(step.event_id(), step.fault());
        }
        last.values().all(Option::is_none)
    }

    #[test]
    fn a_seed_gives_the_same_schedule_and_another_seed_another() {
        assert_eq!(Schedule::random(7), Schedule::random(7));
        assert_ne!(Schedule::random(7), Schedule::random(8));
    }

    #[test]
    fn random_schedules_deliver_every_event_and_end_each_with_a_success() {
        let options = ScheduleOptions::default().events(5).failure_rate(0.9);
        for seed in 0..50 {
            let schedule = options.random(seed);
            assert_eq!(schedule.distinct_events(), 5, "{schedule}");
            assert!(last_deliveries_succeed(&schedule), "{schedule}");
            assert_eq!(schedule.expected_effects(), 5);
        }
    }

    #[test]
    fn random_schedules_contain_duplicates_reorderings_and_both_kinds_of_fault() {
        let schedules: Vec<_> = (0..20).map(Schedule::random).collect();
        let steps = || schedules.iter().flat_map(Schedule::steps);

        assert!(schedules
            .iter()
            .any(|s| s.steps().len() > s.distinct_events()));
        assert!(steps().any(|s| s.fault() == Some(Fault::Error)));
        assert!(steps().any(|s| s.fault() == Some(Fault::Panic)));
        let in_order = |s: &Schedule| {
            s.steps()
                .windows(2)
                .all(|w| w[0].event_id() <= w[1].event_id())
        };
        assert!(schedules.iter().any(|s| !in_order(s)));
    }

    #[test]
    fn without_panics_every_fault_is_an_error() {
        let options = ScheduleOptions::default().failure_rate(1.0).panics(false);
        let schedule = options.random(3);
        assert!(schedule
            .steps()
            .iter()
            .all(|s| s.fault() != Some(Fault::Panic)));
        assert!(schedule
            .steps()
            .iter()
            .any(|s| s.fault() == Some(Fault::Error)));
    }

    #[test]
    fn expected_effects_leave_out_events_whose_every_delivery_fails() {
        let id = |s: &str| EventId::new(s).unwrap();
        let schedule = Schedule::new([
            Step::new(id("a"), Some(Fault::Error)),
            Step::new(id("b"), None),
            Step::new(id("a"), Some(Fault::Panic)),
        ]);

        assert_eq!(schedule.distinct_events(), 2);
        assert_eq!(schedule.expected_effects(), 1);
        assert_eq!(schedule.to_string(), "a (error), b, a (panic)");
    }

    proptest! {
        #[test]
        fn generated_schedules_stay_within_their_options(
            schedule in ScheduleOptions::default().events(4).max_copies(3).strategy()
        ) {
            prop_assert!((1..=4).contains(&schedule.distinct_events()));
            prop_assert!(schedule.steps().len() <= 4 * 3);
            prop_assert!(last_deliveries_succeed(&schedule));
        }
    }
}
