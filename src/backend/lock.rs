//! Waiting, for a bounded time, for the lock that lets one process at a time apply the inbox
//! migrations. Each backend takes the lock its own way (see its `lock_migrations`); where the
//! database cannot wait by itself (PostgreSQL's `pg_try_advisory_lock`), a [`Wait`] says how
//! long to sleep between tries, until the bound.

use std::time::{Duration, Instant};

use crate::AdminError;

/// How long to sleep between two tries of a lock that the database cannot wait for.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long to sleep before the next try, `elapsed` into a wait bounded by `timeout`; `None`
/// once the bound is reached: give up.
fn next_sleep(elapsed: Duration, timeout: Duration) -> Option<Duration> {
    let left = timeout
        .checked_sub(elapsed)
        .filter(|left| !left.is_zero())?;
    Some(left.min(POLL_INTERVAL))
}

/// A bounded wait for a lock that the database cannot wait for by itself: try, and while
/// not taken, sleep for [`Wait::next`] and try again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    started: Instant,
    timeout: Duration,
}

impl Wait {
    /// A wait of at most `timeout`, from now.
    pub(crate) fn start(timeout: Duration) -> Self {
        Self {
            started: Instant::now(),
            timeout,
        }
    }

    /// How long to sleep before the next try; [`AdminError::MigrationLocked`] once the bound has
    /// passed.
    pub(crate) fn next(&self) -> Result<Duration, AdminError> {
        let elapsed = self.started.elapsed();
        next_sleep(elapsed, self.timeout).ok_or(AdminError::MigrationLocked { waited: elapsed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_sleeps_in_short_steps_and_never_past_its_bound() {
        let bound = Duration::from_secs(1);
        assert_eq!(next_sleep(Duration::ZERO, bound), Some(POLL_INTERVAL));
        assert_eq!(
            next_sleep(Duration::from_millis(980), bound),
            Some(Duration::from_millis(20))
        );
        assert_eq!(next_sleep(bound, bound), None);
        assert_eq!(next_sleep(Duration::from_secs(2), bound), None);
    }

    #[test]
    fn a_zero_bound_gives_up_after_the_first_try() {
        let wait = Wait::start(Duration::ZERO);
        assert!(matches!(
            wait.next(),
            Err(AdminError::MigrationLocked { .. })
        ));
        assert!(Wait::start(Duration::from_secs(60)).next().is_ok());
    }
}
