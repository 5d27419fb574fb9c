//! Statements that read the same on every backend, written once and stamped into each backend
//! module, where the names they use are defined: `Time`, `ts`/`utc` (times), `k`/`key_string`
//! (keys), and the tables from `inbox_tables!`.

/// The inbox's tables, with the key and time SQL types of the backend.
macro_rules! inbox_tables {
    (key = $key:ident, time = $time:ident) => {
        diesel::table! {
            #[sql_name = "diesel_inbox"]
            inbox (consumer, event_id) {
                consumer -> $key,
                event_id -> $key,
                state -> Text,
                processed_at -> $time,
                last_seen_at -> $time,
                deliveries -> BigInt,
                payload_hash -> Nullable<Binary>,
                payload_conflicts -> BigInt,
                result -> Nullable<Text>,
            }
        }

        diesel::table! {
            #[sql_name = "diesel_inbox_failures"]
            failures (consumer, event_id) {
                consumer -> $key,
                event_id -> $key,
                state -> Text,
                attempts -> BigInt,
                last_error -> Text,
                first_failed_at -> $time,
                last_failed_at -> $time,
                payload -> Nullable<Binary>,
                payload_kind -> Nullable<Text>,
                updated_at -> $time,
            }
        }

        diesel::table! {
            #[sql_name = "diesel_inbox_failure_log"]
            failure_log (id) {
                id -> BigInt,
                consumer -> $key,
                event_id -> $key,
                entry -> Text,
                attempt -> Nullable<BigInt>,
                error -> Nullable<Text>,
                actor -> Nullable<Text>,
                reason -> Nullable<Text>,
                at -> $time,
            }
        }
    };
}

/// The `InboxBackend` methods whose SQL is the same everywhere. `failures_conflict` is the
/// backend's upsert target for `diesel_inbox_failures`; `lock` is `for_update` where the backend
/// has row locks (SQLite locks the whole database for the transaction instead).
macro_rules! portable_statements {
    (failures_conflict = $target:expr $(, lock = $lock:ident)?) => {
        fn note_payload_conflict(&mut self, key: $crate::backend::Key<'_>) -> QueryResult<()> {
            use inbox::dsl as t;
            diesel::update(t::inbox.find((k(key.0), k(key.1))))
                .set(t::payload_conflicts.eq(t::payload_conflicts + 1))
                .execute(self)
                .map(drop)
        }

        fn store_result(&mut self, key: $crate::backend::Key<'_>, json: &str) -> QueryResult<()> {
            use inbox::dsl as t;
            diesel::update(t::inbox.find((k(key.0), k(key.1))))
                .set(t::result.eq(json))
                .execute(self)
                .map(drop)
        }

        fn record_failure(
            &mut self,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            error: &str,
            payload: Option<&$crate::Payload>,
        ) -> QueryResult<(i64, String)> {
            use failures::dsl as f;
            let stored = payload.map(|p| (p.to_bytes(), p.kind()));
            let (bytes, kind) = (stored.as_ref().map(|s| &s.0[..]), stored.as_ref().map(|s| s.1));
            let when = ts(now);
            // The counter is bumped in the database, so concurrent failures of one event each
            // get their own attempt number.
            diesel::insert_into(f::failures)
                .values((
                    f::consumer.eq(k(key.0)),
                    f::event_id.eq(k(key.1)),
                    f::state.eq("retrying"),
                    f::attempts.eq(1),
                    f::last_error.eq(error),
                    f::first_failed_at.eq(when),
                    f::last_failed_at.eq(when),
                    f::payload.eq(bytes),
                    f::payload_kind.eq(kind),
                    f::updated_at.eq(when),
                ))
                .on_conflict($target)
                .do_update()
                .set((
                    f::attempts.eq(f::attempts + 1),
                    f::last_error.eq(error),
                    f::last_failed_at.eq(when),
                    f::payload.eq(bytes),
                    f::payload_kind.eq(kind),
                    f::updated_at.eq(when),
                ))
                .execute(self)?;
            let (attempts, state) = f::failures
                .find((k(key.0), k(key.1)))
                .select((f::attempts, f::state))
                .first::<(i64, String)>(self)?;
            self.log(key, &LogRow {
                entry: "failed".to_owned(),
                attempt: Some(attempts),
                error: Some(error.to_owned()),
                actor: None,
                reason: None,
                at: now,
            })?;
            Ok((attempts, state))
        }

        fn set_inbox_state(
            &mut self,
            key: $crate::backend::Key<'_>,
            from: &str,
            to: Option<&str>,
        ) -> QueryResult<bool> {
            use inbox::dsl as t;
            let row = t::inbox.find((k(key.0), k(key.1))).filter(t::state.eq(from));
            let changed = match to {
                Some(to) => diesel::update(row).set(t::state.eq(to)).execute(self)?,
                None => diesel::delete(row).execute(self)?,
            };
            Ok(changed == 1)
        }

        fn failure(
            &mut self,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<Option<FailureRow>> {
            use failures::dsl as f;
            f::failures
                .find((k(key.0), k(key.1)))
                .select(failure_columns())
                $(.$lock())?
                .first::<FailureColumns>(self)
                .optional()
                .map(|row| row.map(failure_row))
        }

        fn inbox_row(
            &mut self,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<Option<$crate::backend::sealed::InboxRow>> {
            use inbox::dsl as t;
            t::inbox
                .find((k(key.0), k(key.1)))
                .select(inbox_columns())
                .first::<InboxColumns>(self)
                .optional()
                .map(|row| row.map(inbox_row))
        }

        fn inbox_rows(&mut self, limit: i64) -> QueryResult<Vec<$crate::backend::sealed::InboxRow>> {
            use inbox::dsl as t;
            t::inbox
                .order((t::consumer, t::event_id))
                .limit(limit)
                .select(inbox_columns())
                .load::<InboxColumns>(self)
                .map(|rows| rows.into_iter().map(inbox_row).collect())
        }

        fn failures(&mut self, consumer: &str, state: &str) -> QueryResult<Vec<FailureRow>> {
            use failures::dsl as f;
            f::failures
                .filter(f::consumer.eq(k(consumer)).and(f::state.eq(state)))
                .order((f::first_failed_at, f::event_id))
                .select(failure_columns())
                .load::<FailureColumns>(self)
                .map(|rows| rows.into_iter().map(failure_row).collect())
        }

        fn set_failure_state(
            &mut self,
            key: $crate::backend::Key<'_>,
            from: &str,
            to: &str,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use failures::dsl as f;
            diesel::update(f::failures.find((k(key.0), k(key.1))).filter(f::state.eq(from)))
                .set((f::state.eq(to), f::updated_at.eq(ts(now))))
                .execute(self)
                .map(|changed| changed == 1)
        }

        fn log(&mut self, key: $crate::backend::Key<'_>, row: &LogRow) -> QueryResult<()> {
            use failure_log::dsl as l;
            diesel::insert_into(l::failure_log)
                .values((
                    l::consumer.eq(k(key.0)),
                    l::event_id.eq(k(key.1)),
                    l::entry.eq(&row.entry),
                    l::attempt.eq(row.attempt),
                    l::error.eq(row.error.as_deref()),
                    l::actor.eq(row.actor.as_deref()),
                    l::reason.eq(row.reason.as_deref()),
                    l::at.eq(ts(row.at)),
                ))
                .execute(self)
                .map(drop)
        }

        fn failure_log(&mut self, key: $crate::backend::Key<'_>) -> QueryResult<Vec<LogRow>> {
            use failure_log::dsl as l;
            type Columns = (String, Option<i64>, Option<String>, Option<String>, Option<String>, Time);
            l::failure_log
                .filter(l::consumer.eq(k(key.0)).and(l::event_id.eq(k(key.1))))
                .order(l::id)
                .select((l::entry, l::attempt, l::error, l::actor, l::reason, l::at))
                .load::<Columns>(self)
                .map(|rows| {
                    rows.into_iter()
                        .map(|(entry, attempt, error, actor, reason, at)| LogRow {
                            entry,
                            attempt,
                            error,
                            actor,
                            reason,
                            at: utc(at),
                        })
                        .collect()
                })
        }
    };
}

/// Row mappings for `diesel_inbox` and `diesel_inbox_failures`, shared by the queries that
/// read them back.
macro_rules! row_mappings {
    () => {
        type ExistingColumns = (Time, i64, String, Option<Vec<u8>>, Option<String>);

        fn existing_columns() -> (
            inbox::processed_at,
            inbox::deliveries,
            inbox::state,
            inbox::payload_hash,
            inbox::result,
        ) {
            use inbox::dsl as t;
            (
                t::processed_at,
                t::deliveries,
                t::state,
                t::payload_hash,
                t::result,
            )
        }

        fn existing(row: ExistingColumns) -> Existing {
            let (processed_at, deliveries, state, payload_hash, result) = row;
            Existing {
                processed_at: utc(processed_at),
                deliveries,
                state,
                payload_hash,
                result,
            }
        }

        type InboxColumns = (KeyOwned, KeyOwned, String, Time, Time, i64);

        fn inbox_columns() -> (
            inbox::consumer,
            inbox::event_id,
            inbox::state,
            inbox::processed_at,
            inbox::last_seen_at,
            inbox::deliveries,
        ) {
            use inbox::dsl as t;
            (
                t::consumer,
                t::event_id,
                t::state,
                t::processed_at,
                t::last_seen_at,
                t::deliveries,
            )
        }

        fn inbox_row(row: InboxColumns) -> $crate::backend::sealed::InboxRow {
            let (consumer, event_id, state, processed_at, last_seen_at, deliveries) = row;
            $crate::backend::sealed::InboxRow {
                consumer: key_string(consumer),
                event_id: key_string(event_id),
                state,
                processed_at: utc(processed_at),
                last_seen_at: utc(last_seen_at),
                deliveries,
            }
        }

        type FailureColumns = (
            KeyOwned,
            String,
            i64,
            String,
            Time,
            Time,
            Option<Vec<u8>>,
            Option<String>,
            Time,
        );

        fn failure_columns() -> (
            failures::event_id,
            failures::state,
            failures::attempts,
            failures::last_error,
            failures::first_failed_at,
            failures::last_failed_at,
            failures::payload,
            failures::payload_kind,
            failures::updated_at,
        ) {
            use failures::dsl as f;
            (
                f::event_id,
                f::state,
                f::attempts,
                f::last_error,
                f::first_failed_at,
                f::last_failed_at,
                f::payload,
                f::payload_kind,
                f::updated_at,
            )
        }

        fn failure_row(row: FailureColumns) -> FailureRow {
            let (
                event_id,
                state,
                attempts,
                last_error,
                first,
                last,
                payload,
                payload_kind,
                updated,
            ) = row;
            FailureRow {
                event_id: key_string(event_id),
                state,
                attempts,
                last_error,
                first_failed_at: utc(first),
                last_failed_at: utc(last),
                payload,
                payload_kind,
                updated_at: utc(updated),
            }
        }
    };
}

/// The values of a fresh inbox row, as every recording statement inserts it: one delivery,
/// processed and last seen `now`, with the payload's fingerprint if any.
macro_rules! new_inbox_row {
    ($consumer:expr, $event_id:expr, $now:expr, $payload_hash:expr) => {
        (
            inbox::consumer.eq(k($consumer)),
            inbox::event_id.eq(k($event_id)),
            inbox::processed_at.eq($now),
            inbox::last_seen_at.eq($now),
            inbox::deliveries.eq(1),
            inbox::payload_hash.eq($payload_hash),
        )
    };
}

/// Recording deliveries where the backend has `INSERT .. ON CONFLICT .. RETURNING` (PostgreSQL,
/// SQLite): one statement learns, for every key, whether it is new and what the row holds.
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlite")),
    allow(unused_macros)
)]
macro_rules! upsert_returning {
    () => {
        fn record_delivery(
            &mut self,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            payload_hash: Option<&[u8]>,
        ) -> QueryResult<Recorded> {
            use inbox::dsl as t;
            // The single-row statement has a fixed shape, so Diesel keeps it prepared; the
            // multi-row one below is prepared per batch.
            let when = ts(now);
            let row = diesel::insert_into(t::inbox)
                .values(new_inbox_row!(key.0, key.1, when, payload_hash))
                .on_conflict((t::consumer, t::event_id))
                .do_update()
                .set((
                    t::deliveries.eq(t::deliveries + 1),
                    t::last_seen_at.eq(when),
                ))
                .returning(existing_columns())
                .get_result::<ExistingColumns>(self)?;
            Ok($crate::backend::recorded(existing(row)))
        }

        fn record_deliveries(
            &mut self,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: DateTime<Utc>,
        ) -> QueryResult<Vec<Recorded>> {
            use inbox::dsl as t;
            let when = ts(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for chunk in items.chunks($crate::backend::ROWS_PER_STATEMENT) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|&(event_id, hash)| new_inbox_row!(consumer, event_id, when, hash))
                    .collect();
                // A second inserter of the same key blocks until the first commits (then it
                // updates: a duplicate) or rolls back (then it inserts and runs the effect).
                let returned = diesel::insert_into(t::inbox)
                    .values(rows)
                    .on_conflict((t::consumer, t::event_id))
                    .do_update()
                    .set((
                        t::deliveries.eq(t::deliveries + 1),
                        t::last_seen_at.eq(when),
                    ))
                    .returning((t::event_id, existing_columns()))
                    .load::<(String, ExistingColumns)>(self)?;
                found.extend(returned.into_iter().map(|(id, row)| (id, existing(row))));
            }
            $crate::backend::in_order(items, found)
        }

        fn settle(
            &mut self,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            state: &str,
        ) -> QueryResult<bool> {
            use inbox::dsl as t;
            let when = ts(now);
            diesel::insert_into(t::inbox)
                .values((
                    t::consumer.eq(key.0),
                    t::event_id.eq(key.1),
                    t::state.eq(state),
                    t::processed_at.eq(when),
                    t::last_seen_at.eq(when),
                    t::deliveries.eq(1),
                ))
                .on_conflict_do_nothing()
                .execute(self)
                .map(|inserted| inserted == 1)
        }
    };
}
