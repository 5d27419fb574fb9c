//! Runs the engine's futures to the end on the calling thread, for sync connections.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// Polls `future` once and returns its output. Only for futures over sync connections
/// ([`Blocking`](crate::sql::Blocking)): every statement's future is complete when it is
/// made, so the whole future completes in its first poll, and nothing ever waits on the waker.
pub(crate) fn run_ready<T>(future: impl Future<Output = T>) -> T {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("a sync connection's statement never waits"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_future_of_ready_steps_completes_in_one_poll() {
        let doubled = run_ready(async { std::future::ready(21).await * 2 });
        assert_eq!(doubled, 42);
    }

    #[test]
    #[should_panic(expected = "never waits")]
    fn a_future_that_waits_is_a_bug_not_a_hang() {
        run_ready(std::future::pending::<()>());
    }
}
