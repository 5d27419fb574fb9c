//! The two flavours of the one configuration type.
//!
//! An [`Inbox`] is the same settings in either flavour: [`Blocking`] for sync Diesel's
//! connections ([`crate::Inbox`]), `Async` for diesel-async's (`asynch::Inbox`, feature
//! `async`). Its builders are written once, for every flavour, so a setting cannot exist in
//! one flavour alone; each flavour adds the operations that take its connections.
//!
//! ```
//! use diesel_inbox::{flavour, Inbox};
//!
//! let sync: Inbox = Inbox::new("billing")?.max_attempts(5);
//! let same: flavour::Inbox<flavour::Blocking> = sync.clone();
//! assert_eq!(same.consumer(), "billing");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "async")]
pub use crate::sql::Async;
pub use crate::sql::Blocking;

pub use crate::inbox::Inbox;
