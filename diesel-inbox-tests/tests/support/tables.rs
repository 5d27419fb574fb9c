//! The library's own bookkeeping tables the retention scenarios set up and read back
//! (`diesel_inbox::schema` shows apps only the tables they join against).

/// The counters and the leases, with the backend's SQL types for keys and times.
macro_rules! bookkeeping_tables {
    (key = $key:ident, time = $time:ident) => {
        diesel::table! {
            diesel_inbox_counters (consumer, counter, bucket) {
                consumer -> $key,
                counter -> Text,
                bucket -> $time,
                total -> BigInt,
            }
        }

        diesel::table! {
            diesel_inbox_leases (name) {
                name -> Text,
                holder -> Text,
                held_until -> $time,
            }
        }
    };
}

#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    bookkeeping_tables!(key = Text, time = Timestamptz);
}

#[cfg(feature = "sqlite")]
pub(crate) mod sqlite {
    bookkeeping_tables!(key = Text, time = Timestamp);
}

#[cfg(feature = "mysql")]
pub(crate) mod mysql {
    bookkeeping_tables!(key = Binary, time = Datetime);
}
