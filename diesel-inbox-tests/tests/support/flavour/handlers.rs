//! The shapes of the handlers the scenarios pass, as each flavour takes them.

#[cfg(feature = "async")]
use diesel_inbox::asynch::Handler;

use super::*;

/// A handler the scenarios pass to flavour `F`: an async closure over `&mut F::Conn`, whose
/// future is `Send` where the async flavour is compiled in, as `asynch` requires.
pub(crate) trait Handle<F: Flavour + ?Sized, T, E>: Send {
    /// One call, as the blocking flavour makes it.
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>>;

    /// The handler as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    fn into_async(
        self,
    ) -> impl for<'c> AsyncFnMut(&'c mut F::Conn) -> Result<T, E>
           + for<'c> Handler<(&'c mut F::Conn,), T, E>;
}

#[cfg(feature = "async")]
impl<F, T, E, H> Handle<F, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c> AsyncFnMut(&'c mut F::Conn) -> Result<T, E>
        + for<'c> Handler<(&'c mut F::Conn,), T, E>,
{
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>> {
        self(tx)
    }

    fn into_async(
        self,
    ) -> impl for<'c> AsyncFnMut(&'c mut F::Conn) -> Result<T, E>
           + for<'c> Handler<(&'c mut F::Conn,), T, E> {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<F, T, E, H> Handle<F, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c> AsyncFnMut(&'c mut F::Conn) -> Result<T, E> + Send,
{
    fn call<'c>(&'c mut self, tx: &'c mut F::Conn) -> impl Future<Output = Result<T, E>> {
        self(tx)
    }
}

/// A two-argument handler the scenarios pass to flavour `F`: an async closure over
/// `&mut F::Conn` and `$arg`, as `asynch`'s method takes it where the async flavour is
/// compiled in (a two-argument `Handler`, whose future is `Send`).
macro_rules! handle_with {
    ($(#[$doc:meta])* $name:ident<$($l:lifetime),+>($arg:ty) -> $out:ty) => {
        $(#[$doc])*
        pub(crate) trait $name<F: Flavour + ?Sized, T, E>: Send {
            /// One call, as the blocking flavour makes it.
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>>;

            /// The handler as `asynch` takes it.
            #[cfg(feature = "async")]
            #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
            fn into_async(
                self,
            ) -> impl for<'c, $($l),+> AsyncFnMut(&'c mut F::Conn, $arg) -> Result<$out, E>
                   + for<'c, $($l),+> Handler<(&'c mut F::Conn, $arg), $out, E>;
        }

        #[cfg(feature = "async")]
        impl<F, T, E, H> $name<F, T, E> for H
        where
            F: Flavour + ?Sized,
            H: for<'c, $($l),+> AsyncFnMut(&'c mut F::Conn, $arg) -> Result<$out, E>
                + for<'c, $($l),+> Handler<(&'c mut F::Conn, $arg), $out, E>,
        {
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>> {
                self(tx, arg)
            }

            fn into_async(
                self,
            ) -> impl for<'c, $($l),+> AsyncFnMut(&'c mut F::Conn, $arg) -> Result<$out, E>
                   + for<'c, $($l),+> Handler<(&'c mut F::Conn, $arg), $out, E> {
                self
            }
        }

        #[cfg(not(feature = "async"))]
        impl<F, T, E, H> $name<F, T, E> for H
        where
            F: Flavour + ?Sized,
            H: for<'c, $($l),+> AsyncFnMut(&'c mut F::Conn, $arg) -> Result<$out, E> + Send,
        {
            fn call<'c, $($l),+>(
                &'c mut self,
                tx: &'c mut F::Conn,
                arg: $arg,
            ) -> impl Future<Output = Result<$out, E>> {
                self(tx, arg)
            }
        }
    };
}

handle_with! {
    /// A redrive's handler: the transaction and the stored payload.
    Rerun<'p>(Option<&'p Payload>) -> T
}

handle_with! {
    /// A batch's handler, called once per new delivery.
    PerDelivery<'d>(&'d Delivery) -> T
}

handle_with! {
    /// A bulk handler, called once with every new delivery of the batch.
    Bulk<'d, 'e>(&'d [&'e Delivery]) -> ()
}

/// A cursor batch's handler the scenarios pass to flavour `F`: an async closure over
/// `&mut F::Conn`, the sequence and its item.
pub(crate) trait PerSequence<F: Flavour + ?Sized, M, T, E>: Send {
    /// One call, as the blocking flavour makes it.
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>>;

    /// The handler as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    #[allow(
        clippy::type_complexity,
        reason = "the shape as asynch states it: the closure's arguments, and its Send future"
    )]
    fn into_async(
        self,
    ) -> impl for<'c, 'm> AsyncFnMut(&'c mut F::Conn, u64, &'m M) -> Result<T, E>
           + for<'c, 'm> Handler<(&'c mut F::Conn, u64, &'m M), T, E>;
}

#[cfg(feature = "async")]
impl<F, M, T, E, H> PerSequence<F, M, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c, 'm> AsyncFnMut(&'c mut F::Conn, u64, &'m M) -> Result<T, E>
        + for<'c, 'm> Handler<(&'c mut F::Conn, u64, &'m M), T, E>,
{
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>> {
        self(tx, sequence, item)
    }

    fn into_async(
        self,
    ) -> impl for<'c, 'm> AsyncFnMut(&'c mut F::Conn, u64, &'m M) -> Result<T, E>
           + for<'c, 'm> Handler<(&'c mut F::Conn, u64, &'m M), T, E> {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<F, M, T, E, H> PerSequence<F, M, T, E> for H
where
    F: Flavour + ?Sized,
    H: for<'c, 'm> AsyncFnMut(&'c mut F::Conn, u64, &'m M) -> Result<T, E> + Send,
{
    fn call<'c>(
        &'c mut self,
        tx: &'c mut F::Conn,
        sequence: u64,
        item: &M,
    ) -> impl Future<Output = Result<T, E>> {
        self(tx, sequence, item)
    }
}

/// A side effect under a claim the scenarios pass: an async closure over the held
/// [`Claim`], as `asynch` takes it where the async flavour is compiled in.
pub(crate) trait Acts<T, E>: Send {
    /// The one call, as the blocking flavour makes it.
    fn call(self, claim: &Claim) -> impl Future<Output = Result<T, E>>;

    /// The side effect as `asynch` takes it.
    #[cfg(feature = "async")]
    #[allow(dead_code, reason = "the sync test binaries compile it too, unused")]
    fn into_async(
        self,
    ) -> impl for<'c> AsyncFnMut(&'c Claim) -> Result<T, E> + for<'c> Handler<(&'c Claim,), T, E>;
}

#[cfg(feature = "async")]
impl<T, E, H> Acts<T, E> for H
where
    H: for<'c> AsyncFnMut(&'c Claim) -> Result<T, E> + for<'c> Handler<(&'c Claim,), T, E>,
{
    async fn call(mut self, claim: &Claim) -> Result<T, E> {
        self(claim).await
    }

    fn into_async(
        self,
    ) -> impl for<'c> AsyncFnMut(&'c Claim) -> Result<T, E> + for<'c> Handler<(&'c Claim,), T, E>
    {
        self
    }
}

#[cfg(not(feature = "async"))]
impl<T, E, H> Acts<T, E> for H
where
    H: for<'c> AsyncFnMut(&'c Claim) -> Result<T, E> + Send,
{
    async fn call(mut self, claim: &Claim) -> Result<T, E> {
        self(claim).await
    }
}

handle_with! {
    /// A claim's record writes: the transaction and the side effect's result.
    Keeps<'v>(&'v T) -> ()
}

handle_with! {
    /// A schedule's effect: the transaction and the event id of the step.
    Scheduled<'i>(&'i EventId) -> T
}
