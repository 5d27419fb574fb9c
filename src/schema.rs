//! The inbox's tables an app joins against, as Diesel `table!`s, one module per backend: the
//! inbox's own rows ([`diesel_inbox_events`](sqlite::diesel_inbox_events)), the dead letters
//! and their history, the cursors' positions, the claims and the outbox. The other tables
//! (gaps, chain blocks, reorgs, replays, counters, leases) are the library's to read and write:
//! their areas' modules list and change them ([`cursor::Gaps`](crate::cursor::Gaps),
//! [`chain::Reorgs`](crate::chain::Reorgs), [`replay::Replays`](crate::replay::Replays),
//! [`retention`](crate::retention), `diesel-inbox` the CLI).
//!
//! The backends store keys and times in different SQL types (MySQL keeps ids in `VARBINARY`
//! so that no collation merges two of them), so each backend has its own module. The state
//! columns are `Text`; they read as [`DeadLetterState`](crate::dead_letter::DeadLetterState) and
//! [`HistoryKind`](crate::dead_letter::HistoryKind) as well as `String`.
//!
//! ```
//! # #[cfg(feature = "sqlite")] {
//! use diesel::prelude::*;
//! use diesel_inbox::schema::sqlite::diesel_inbox_events;
//!
//! let mut conn = SqliteConnection::establish(":memory:")?;
//! diesel_inbox::run_pending_migrations(&mut conn)?;
//! diesel_inbox::with_inbox(&mut conn, "evt-1", |_tx| Ok::<_, diesel_inbox::Error>(()))?;
//!
//! let deliveries: i64 = diesel_inbox_events::table
//!     .filter(diesel_inbox_events::event_id.eq("evt-1"))
//!     .select(diesel_inbox_events::deliveries)
//!     .first(&mut conn)?;
//! assert_eq!(deliveries, 1);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The tables an app joins against, from a backend's module of [`crate::tables`].
macro_rules! app_tables {
    ($backend:ident) => {
        pub use crate::tables::$backend::{
            diesel_inbox_claims, diesel_inbox_cursors, diesel_inbox_events,
            diesel_inbox_failure_log, diesel_inbox_failures, diesel_inbox_outbox,
        };
    };
}

/// The tables on PostgreSQL: keys are `TEXT COLLATE "C"`, times `TIMESTAMPTZ`.
#[cfg(feature = "postgres")]
pub mod postgres {
    app_tables!(postgres);
}

/// The tables on SQLite: keys are `TEXT` (binary collation), times UTC `TIMESTAMP`.
#[cfg(feature = "sqlite")]
pub mod sqlite {
    app_tables!(sqlite);
}

/// The tables on MySQL and MariaDB: keys are `VARBINARY`, times UTC `DATETIME(6)`.
#[cfg(feature = "mysql")]
pub mod mysql {
    app_tables!(mysql);
}
