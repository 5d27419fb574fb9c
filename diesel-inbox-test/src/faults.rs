//! Fault injection: a handler that fails on chosen attempts, or at random from a seed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// How an injected fault makes a handler fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Fault {
    /// The handler returns an [`InjectedFault`] as its error.
    Error,
    /// The handler panics.
    Panic,
}

/// The error an injected [`Fault::Error`] returns, converted into the handler's error type.
///
/// Handlers returning [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html) get it as
/// [`diesel::result::Error::QueryBuilderError`](https://docs.rs/diesel/2/diesel/result/enum.Error.html#variant.QueryBuilderError), which `downcast_ref` recovers; give your own
/// error type a `From<InjectedFault>` (in tests only, if you like).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fault injected on attempt {attempt} by diesel_inbox_test")]
pub struct InjectedFault {
    attempt: u32,
}

impl InjectedFault {
    /// The attempt the fault failed, counted from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Lets handlers that return [`diesel::QueryResult`](https://docs.rs/diesel/2/diesel/result/type.QueryResult.html) take injected faults.
impl From<InjectedFault> for diesel::result::Error {
    fn from(fault: InjectedFault) -> Self {
        diesel::result::Error::QueryBuilderError(Box::new(fault))
    }
}

/// A plan of failures for a handler: which of its attempts fail, and how.
///
/// [`wrap`](Self::wrap) a handler (typically the effect you pass to
/// [`with_inbox`](diesel_inbox::with_inbox)) to count its calls and fail the planned ones: the
/// handler runs first, so its writes are in the transaction when the fault strikes, and the
/// test sees them rolled back. Then drive your retry path (redelivery, a retry loop, a
/// broker's nack) and check that the event still took effect once.
///
/// Clones share their counts, so keep one to read [`attempts`](Self::attempts) and
/// [`injected`](Self::injected) after handing the wrapped handler away.
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// use diesel::prelude::*;
/// use diesel_inbox_test::{assert_deliveries, Faults, TestDatabase};
/// use diesel_inbox::{with_inbox, Inbox};
///
/// let db = TestDatabase::sqlite();
/// let mut conn = db.connect();
/// let faults = Faults::on_attempts([1, 2]);
/// let mut effect = faults.wrap(|_tx: &mut SqliteConnection| QueryResult::Ok(()));
///
/// // The consumer's retry path: deliver again until the inbox accepts it.
/// let mut delivered = with_inbox(&mut conn, "evt-1", &mut effect);
/// while delivered.is_err() {
///     delivered = with_inbox(&mut conn, "evt-1", &mut effect);
/// }
///
/// assert_eq!((faults.attempts(), faults.injected()), (3, 2));
/// // Failed deliveries rolled back: the inbox counts only the one that succeeded.
/// assert_deliveries(&mut conn, &Inbox::default(), "evt-1", 1);
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Faults {
    plan: Plan,
    fault: Fault,
    counts: Arc<Counts>,
}

#[derive(Debug, Clone)]
enum Plan {
    Attempts(BTreeSet<u32>),
    Random { seed: u64, probability: f64 },
}

#[derive(Debug, Default)]
struct Counts {
    attempts: AtomicU32,
    injected: AtomicU32,
}

impl Faults {
    /// Fails the given attempts, counted from 1; the others run the handler as it is.
    pub fn on_attempts(attempts: impl IntoIterator<Item = u32>) -> Self {
        Self::with_plan(Plan::Attempts(attempts.into_iter().collect()))
    }

    /// Fails each attempt with `probability`, decided by `seed` and the attempt's number, so
    /// a seed fails the same attempts on every run.
    ///
    /// ```
    /// use diesel_inbox_test::Faults;
    ///
    /// let (a, b) = (Faults::random(7, 0.5), Faults::random(7, 0.5));
    /// assert!((1..=100).all(|n| a.fails(n) == b.fails(n)));
    /// assert!((1..=100).any(|n| a.fails(n)) && (1..=100).any(|n| !a.fails(n)));
    /// ```
    ///
    /// # Panics
    ///
    /// When `probability` is not within `0.0..=1.0`.
    pub fn random(seed: u64, probability: f64) -> Self {
        assert!(
            (0.0..=1.0).contains(&probability),
            "a fault probability is within 0.0..=1.0, not {probability}"
        );
        Self::with_plan(Plan::Random { seed, probability })
    }

    fn with_plan(plan: Plan) -> Self {
        Self {
            plan,
            fault: Fault::Error,
            counts: Arc::default(),
        }
    }

    /// How the planned attempts fail. Defaults to [`Fault::Error`].
    pub fn fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// Whether the plan fails attempt `attempt` (counted from 1).
    pub fn fails(&self, attempt: u32) -> bool {
        match &self.plan {
            Plan::Attempts(attempts) => attempts.contains(&attempt),
            Plan::Random { seed, probability } => {
                // One generator per attempt: the decision does not depend on earlier calls.
                let mixed = seed ^ u64::from(attempt).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                fastrand::Rng::with_seed(mixed).f64() < *probability
            }
        }
    }

    /// `handler`, failing on the planned attempts after it has run: with an
    /// [`InjectedFault`] error, or a panic, as [`fault`](Self::fault) says. The handler's own
    /// error, when it returns one, comes back unchanged. An async handler calls
    /// [`inject`](Self::inject) at its end instead.
    ///
    /// # Panics
    ///
    /// The returned handler panics on the planned attempts when the fault is
    /// [`Fault::Panic`].
    pub fn wrap<C, T, E, H>(&self, mut handler: H) -> impl FnMut(&mut C) -> Result<T, E>
    where
        H: FnMut(&mut C) -> Result<T, E>,
        E: From<InjectedFault>,
    {
        let faults = self.clone();
        move |conn| {
            let attempt = faults.count();
            let value = handler(conn)?;
            faults.strike(attempt)?;
            Ok(value)
        }
    }

    /// Counts one attempt and fails it if the plan says so: the fault for a handler to call
    /// where it would fail, after its effect, the async handlers included, which
    /// [`wrap`](Self::wrap) does not take.
    ///
    /// ```
    /// use diesel_inbox_test::{Faults, InjectedFault};
    ///
    /// let faults = Faults::on_attempts([2]);
    /// let handler = async || -> Result<(), InjectedFault> {
    ///     // ... the effect, awaited ...
    ///     faults.inject()
    /// };
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// assert!(handler().await.is_ok());
    /// assert_eq!(handler().await.unwrap_err().attempt(), 2);
    /// # });
    /// assert_eq!((faults.attempts(), faults.injected()), (2, 1));
    /// ```
    ///
    /// # Errors
    ///
    /// [`InjectedFault`] on a planned attempt when the fault is [`Fault::Error`].
    ///
    /// # Panics
    ///
    /// On a planned attempt when the fault is [`Fault::Panic`].
    pub fn inject(&self) -> Result<(), InjectedFault> {
        self.strike(self.count())
    }

    /// Counts an attempt: its number, from 1.
    fn count(&self) -> u32 {
        self.counts.attempts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Fails `attempt` if the plan says so.
    fn strike(&self, attempt: u32) -> Result<(), InjectedFault> {
        if !self.fails(attempt) {
            return Ok(());
        }
        self.counts.injected.fetch_add(1, Ordering::SeqCst);
        let injected = InjectedFault { attempt };
        match self.fault {
            Fault::Panic => panic!("{injected}"),
            Fault::Error => Err(injected),
        }
    }

    /// Attempts counted so far: calls of the wrapped handlers and of [`inject`](Self::inject).
    pub fn attempts(&self) -> u32 {
        self.counts.attempts.load(Ordering::SeqCst)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u32 {
        self.counts.injected.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{self, AssertUnwindSafe};

    use diesel::QueryResult;

    use super::*;

    /// The wrapper needs no database: any argument stands in for the connection.
    struct NoDatabase;

    fn run(
        handler: &mut impl FnMut(&mut NoDatabase) -> Result<u32, diesel::result::Error>,
    ) -> Vec<bool> {
        (0..5).map(|_| handler(&mut NoDatabase).is_ok()).collect()
    }

    #[test]
    fn chosen_attempts_fail_and_the_others_return_the_handlers_value() {
        let faults = Faults::on_attempts([2, 4]);
        let mut handler = faults.wrap(|_: &mut NoDatabase| Ok(7));

        assert_eq!(run(&mut handler), [true, false, true, false, true]);
        assert_eq!((faults.attempts(), faults.injected()), (5, 2));
        match handler(&mut NoDatabase) {
            Ok(7) => {}
            other => panic!("attempt 6 is not planned to fail: {other:?}"),
        }
    }

    #[test]
    fn an_injected_error_says_which_attempt_it_failed() {
        let faults = Faults::on_attempts([1]);
        let mut handler = faults.wrap(|_: &mut NoDatabase| Ok(()));

        let Err(diesel::result::Error::QueryBuilderError(error)) = handler(&mut NoDatabase) else {
            panic!("attempt 1 should fail with the injected fault");
        };
        assert_eq!(
            error
                .downcast_ref::<InjectedFault>()
                .map(InjectedFault::attempt),
            Some(1)
        );
    }

    #[test]
    fn the_handlers_own_error_wins_over_a_planned_fault() {
        let faults = Faults::on_attempts([1]);
        let mut handler =
            faults.wrap(|_: &mut NoDatabase| Err::<(), _>(diesel::result::Error::NotFound));

        assert_eq!(
            handler(&mut NoDatabase),
            Err(diesel::result::Error::NotFound)
        );
        assert_eq!(faults.injected(), 0);
    }

    #[test]
    fn a_panicking_fault_panics_after_the_handler_ran() {
        let faults = Faults::on_attempts([1]).fault(Fault::Panic);
        let mut ran = false;
        let mut handler = faults.wrap(|_: &mut NoDatabase| {
            ran = true;
            QueryResult::Ok(())
        });

        let caught = panic::catch_unwind(AssertUnwindSafe(|| handler(&mut NoDatabase)));

        let message = caught.expect_err("attempt 1 panics");
        let message = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(message.contains("attempt 1"), "{message}");
        drop(handler);
        assert!(ran, "the handler runs before the fault strikes");
    }

    #[test]
    fn random_faults_follow_the_seed_and_the_probability() {
        let failures = |seed, p| {
            let faults = Faults::random(seed, p);
            (1..=1000).filter(|&n| faults.fails(n)).count()
        };

        assert_eq!(failures(1, 0.0), 0);
        assert_eq!(failures(1, 1.0), 1000);
        assert!(
            (200..300).contains(&failures(1, 0.25)),
            "{}",
            failures(1, 0.25)
        );
        let (a, b) = (Faults::random(1, 0.5), Faults::random(2, 0.5));
        assert!((1..=64).any(|n| a.fails(n) != b.fails(n)), "seeds differ");
    }
}
