//! Panics caught across `.await`: user code that panics inside a transaction must not leave
//! the connection inside it, in either flavour.

use std::future::{poll_fn, Future};
use std::panic::{self, AssertUnwindSafe};
use std::pin::pin;
use std::task::Poll;

/// Runs `future` to the end, catching a panic in any of its polls (the transaction is rolled
/// back, then the panic resumed). `AssertUnwindSafe`: after a panic the engine only rolls the
/// connection back, which Diesel's transaction manager survives.
pub(crate) async fn catch_unwind<T>(future: impl Future<Output = T>) -> std::thread::Result<T> {
    let mut future = pin!(future);
    poll_fn(
        |cx| match panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::run_ready;

    #[test]
    fn a_panic_inside_the_future_comes_back_as_an_error() {
        let caught = run_ready(catch_unwind(async { panic!("in the handler") }));
        let panic = caught.expect_err("the panic was caught");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"in the handler"));
    }

    #[test]
    fn a_future_that_does_not_panic_gives_its_output() {
        assert_eq!(run_ready(catch_unwind(async { 7 })).ok(), Some(7));
    }
}
