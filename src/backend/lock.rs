//! Waiting, for a bounded time, for the lock that lets one process at a time apply the inbox
//! migrations. Each backend takes the lock its own way (see its `with_migration_lock`); where the
//! database cannot wait by itself (PostgreSQL's `pg_try_advisory_lock`), [`poll`] tries again
//! until the bound.

use std::time::{Duration, Instant};

use diesel::QueryResult;

use crate::Error;

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

/// Calls `try_lock` until it takes the lock (`Ok(true)`), sleeping between tries, for at most
/// `timeout`; [`Error::MigrationLocked`] when the bound passes first.
pub(crate) fn poll(
    timeout: Duration,
    mut try_lock: impl FnMut() -> QueryResult<bool>,
) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        if try_lock()? {
            return Ok(());
        }
        let Some(sleep) = next_sleep(started.elapsed(), timeout) else {
            return Err(Error::MigrationLocked {
                waited: started.elapsed(),
            });
        };
        std::thread::sleep(sleep);
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
    fn a_zero_bound_tries_once_and_gives_up() {
        let mut tries = 0;
        let outcome = poll(Duration::ZERO, || {
            tries += 1;
            Ok(false)
        });
        assert!(matches!(outcome, Err(Error::MigrationLocked { .. })));
        assert_eq!(tries, 1);
    }

    #[test]
    fn a_lock_taken_on_a_later_try_ends_the_wait() {
        let mut tries = 0;
        let outcome = poll(Duration::from_secs(60), || {
            tries += 1;
            Ok(tries == 3)
        });
        assert!(outcome.is_ok());
        assert_eq!(tries, 3);
    }
}
