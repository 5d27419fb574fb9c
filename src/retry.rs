//! How long to wait before retrying a transaction that lost a race, and how long a
//! transaction may stall before the server ends it.

use std::time::Duration;

/// Bounded, jittered exponential backoff for contention errors.
///
/// Contention (serialization failures, deadlocks, lock-wait timeouts, a busy SQLite database)
/// aborts the whole transaction; the inbox rolls it back, waits, and runs it again, effect
/// included. Only when the retries run out does the caller see
/// [`Error::RetriesExhausted`](crate::Error::RetriesExhausted).
///
/// It also bounds how long each of those transactions may stall: see
/// [`idle_timeout`](Self::idle_timeout).
///
/// ```
/// use std::time::Duration;
/// use diesel_inbox::{Inbox, RetryPolicy};
///
/// let inbox = Inbox::new("payments")?
///     .retry(RetryPolicy::default().max_retries(3).base_delay(Duration::from_millis(20)));
/// # Ok::<(), diesel_inbox::InvalidConsumerName>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct RetryPolicy {
    max_retries: u32,
    base_delay: Duration,
    max_delay: Duration,
    idle_timeout: Option<Duration>,
}

impl Default for RetryPolicy {
    /// Ten retries, waits starting at 5 ms and doubling up to 500 ms; an idle timeout of
    /// [`DEFAULT_IDLE_TIMEOUT`](Self::DEFAULT_IDLE_TIMEOUT).
    fn default() -> Self {
        Self {
            max_retries: 10,
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_millis(500),
            idle_timeout: Some(Self::DEFAULT_IDLE_TIMEOUT),
        }
    }
}

impl RetryPolicy {
    /// No retries: the first contention error is returned.
    pub fn none() -> Self {
        Self::default().max_retries(0)
    }

    /// Retries after the first attempt. Defaults to 10.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Wait before the first retry; each later one doubles it. Defaults to 5 ms.
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// Longest single wait. Defaults to 500 ms.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The default [`idle_timeout`](Self::idle_timeout): one minute.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

    /// The longest the inbox's transaction may sit open with no statement running: a handler
    /// between two statements, or a client waiting for a reply that a stuck server never sends.
    /// Past it, the server ends the session; what was waiting gets a lost connection
    /// ([`Error::ConnectionLost`](crate::Error::ConnectionLost), or
    /// [`Error::CommitUnknown`](crate::Error::CommitUnknown) at the commit), so
    /// [`Ack::Redeliver`](crate::Ack::Redeliver), nothing committed, and a broken connection
    /// that pools discard. Defaults to [`DEFAULT_IDLE_TIMEOUT`](Self::DEFAULT_IDLE_TIMEOUT).
    ///
    /// PostgreSQL: `SET LOCAL idle_in_transaction_session_timeout`, sent with the `BEGIN` (no
    /// round trip of its own). MariaDB sets no variable for one transaction: there the bound
    /// is the server's `idle_transaction_timeout`, which [`doctor`](crate::doctor) checks
    /// (see [`crate::doctor`], "Beyond one server"). SQLite is in process: nothing to wait for.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// No idle timeout of the inbox's own: the session's setting applies.
    pub fn without_idle_timeout(mut self) -> Self {
        self.idle_timeout = None;
        self
    }

    /// The configured idle timeout, if any.
    pub(crate) fn idle_limit(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// The configured number of retries.
    pub fn retries(&self) -> u32 {
        self.max_retries
    }

    /// The wait before retry number `retry` (1-based): the exponential step, capped, then
    /// jittered down to between half and all of it so that racing consumers spread out.
    pub(crate) fn delay(&self, retry: u32, rng: &mut fastrand::Rng) -> Duration {
        let step = self
            .base_delay
            .saturating_mul(1 << retry.saturating_sub(1).min(20))
            .min(self.max_delay);
        let nanos = u64::try_from(step.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos / 2 + rng.u64(0..=nanos - nanos / 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_stay_capped_and_jitter_within_half() {
        let policy = RetryPolicy::default()
            .base_delay(Duration::from_millis(10))
            .max_delay(Duration::from_millis(50));
        let mut rng = fastrand::Rng::with_seed(7);
        for (retry, full) in [(1, 10), (2, 20), (3, 40), (4, 50), (30, 50)] {
            for _ in 0..100 {
                let d = policy.delay(retry, &mut rng);
                assert!(
                    d >= Duration::from_millis(full) / 2 && d <= Duration::from_millis(full),
                    "retry {retry}: {d:?} outside [{full}/2, {full}] ms"
                );
            }
        }
    }

    #[test]
    fn none_means_zero_retries() {
        assert_eq!(RetryPolicy::none().retries(), 0);
    }
}
