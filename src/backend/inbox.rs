//! The inbox area's statements that read the same on every backend, written once: a backend's `impl
//! InboxSql` takes each by name, `inbox_statement!(store_result, schema, codec)`, with its schema,
//! codec and row mappings as explicit arguments (see `portable.rs`). The trait, and what each
//! statement does, is [`crate::sql::InboxSql`].

/// The upsert that records one delivery of `$key` (`(consumer, event_id)`) and reads the row
/// back as it now is, where the backend has `INSERT .. ON CONFLICT .. RETURNING`: a future of
/// the row's columns on `$conn`. Diesel would prepare the upsert anew each time; `Cached` keeps
/// it prepared.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! upsert_delivery {
    ($schema:ident, $codec:ident, $rows:ident, $conn:expr, $key:expr, $when:expr, $hash:expr) => {{
        use $crate::sql::Run;
        use $schema::diesel_inbox_events::dsl as t;
        let (consumer, event_id) = $key;
        let upsert = diesel::insert_into(t::diesel_inbox_events)
            .values(new_inbox_row!(
                $schema, $codec, consumer, event_id, $when, $hash
            ))
            .on_conflict((t::consumer, t::event_id))
            .do_update()
            .set((
                t::deliveries.eq(t::deliveries + 1),
                t::last_seen_at.eq($when),
            ))
            .returning($rows::existing_columns());
        $crate::sql::Cached(upsert).get_result_on::<$rows::ExistingColumns>($conn)
    }};
}

/// One `InboxSql` statement whose SQL reads the same on every backend, by name.
macro_rules! inbox_statement {
    // Recording deliveries where the backend has `INSERT .. ON CONFLICT .. RETURNING`
    // (PostgreSQL, SQLite): one statement learns whether the key is new and what the row holds.
    (record_delivery, $schema:ident, $codec:ident, $rows:ident, upsert_returning) => {
        async fn record_delivery<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            payload_hash: Option<&[u8]>,
        ) -> QueryResult<$crate::rows::Recorded> {
            let when = $codec::time(now);
            let row =
                upsert_delivery!($schema, $codec, $rows, conn, key, when, payload_hash).await?;
            let row = $crate::backend::known($rows::existing(row))?;
            Ok($crate::backend::recorded(row))
        }
    };
    (record_deliveries, $schema:ident, $codec:ident, $rows:ident, upsert_returning) => {
        async fn record_deliveries<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: DateTime<Utc>,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::Recorded>>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let when = $codec::time(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for chunk in items.chunks($crate::backend::ROWS_PER_STATEMENT) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|&(event_id, hash)| {
                        new_inbox_row!($schema, $codec, consumer, event_id, when, hash)
                    })
                    .collect();
                // A second inserter of the same key blocks until the first commits (then it
                // updates: a duplicate) or rolls back (then it inserts and runs the effect).
                let returned = diesel::insert_into(t::diesel_inbox_events)
                    .values(rows)
                    .on_conflict((t::consumer, t::event_id))
                    .do_update()
                    .set((
                        t::deliveries.eq(t::deliveries + 1),
                        t::last_seen_at.eq(when),
                    ))
                    .returning((t::event_id, $rows::existing_columns()))
                    .load_on::<(String, $rows::ExistingColumns)>(conn)
                    .await?;
                found.extend(
                    returned
                        .into_iter()
                        .map(|(id, row)| (id, $rows::existing(row))),
                );
            }
            $crate::backend::in_order(items, found)
        }
    };
    // SQLite: one upsert per row. Diesel sends a multi-row insert with a nullable value (the
    // payload hash) to SQLite as one statement per row anyway, which has no `DEFAULT` keyword;
    // one at a time, each stays prepared.
    (record_deliveries, $schema:ident, $codec:ident, $rows:ident, upsert_returning_per_row) => {
        async fn record_deliveries<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            items: &[(&str, Option<&[u8]>)],
            now: DateTime<Utc>,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::Recorded>>> {
            let when = $codec::time(now);
            let mut found = std::collections::HashMap::with_capacity(items.len());
            for &(event_id, hash) in items {
                let key = (consumer, event_id);
                let row = upsert_delivery!($schema, $codec, $rows, conn, key, when, hash).await?;
                found.insert(event_id.to_owned(), $rows::existing(row));
            }
            $crate::backend::in_order(items, found)
        }
    };
    (insert_held_row, $schema:ident, $codec:ident, on_conflict_do_nothing) => {
        async fn insert_held_row<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            now: DateTime<Utc>,
            state: $crate::state::InboxState,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let when = $codec::time(now);
            diesel::insert_into(t::diesel_inbox_events)
                .values((
                    t::consumer.eq($codec::key(key.0)),
                    t::event_id.eq($codec::key(key.1)),
                    t::state.eq(state),
                    t::processed_at.eq(when),
                    t::last_seen_at.eq(when),
                    t::deliveries.eq(1),
                ))
                .on_conflict_do_nothing()
                .execute_on(conn)
                .await
                .map(|inserted| inserted == 1)
        }
    };
    (note_payload_conflict, $schema:ident, $codec:ident) => {
        async fn note_payload_conflict<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            diesel::update(t::diesel_inbox_events.find(($codec::key(key.0), $codec::key(key.1))))
                // `record_delivery` counted it as a delivery; it is a conflict instead, so
                // `deliveries` counts the deliveries of the first payload only.
                .set((
                    t::deliveries.eq(t::deliveries - 1),
                    t::payload_conflicts.eq(t::payload_conflicts + 1),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (store_result, $schema:ident, $codec:ident) => {
        async fn store_result<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            json: &str,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            diesel::update(t::diesel_inbox_events.find(($codec::key(key.0), $codec::key(key.1))))
                .set(t::result.eq(json))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (set_inbox_state, $schema:ident, $codec:ident) => {
        async fn set_inbox_state<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            from: $crate::state::InboxState,
            to: $crate::state::InboxState,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let row = t::diesel_inbox_events
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(t::state.eq(from));
            diesel::update(row)
                .set(t::state.eq(to))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
        }
    };
    (delete_inbox_row, $schema:ident, $codec:ident) => {
        async fn delete_inbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
            state: $crate::state::InboxState,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            let row = t::diesel_inbox_events
                .find(($codec::key(key.0), $codec::key(key.1)))
                .filter(t::state.eq(state));
            diesel::delete(row)
                .execute_on(conn)
                .await
                .map(|deleted| deleted == 1)
        }
    };
    (inbox_row, $schema:ident, $codec:ident, $rows:ident) => {
        async fn inbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::Key<'_>,
        ) -> QueryResult<Option<$crate::rows::InboxRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            t::diesel_inbox_events
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::inbox_columns())
                .limit(1)
                .get_result_on::<$rows::InboxColumns>(conn)
                .await
                .optional()
                .map(|row| row.map($rows::inbox_row))
        }
    };
    (inbox_rows, $schema:ident, $rows:ident) => {
        async fn inbox_rows<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::InboxRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_events::dsl as t;
            t::diesel_inbox_events
                .order((t::consumer, t::event_id))
                .limit(limit)
                .select($rows::inbox_columns())
                .load_on::<$rows::InboxColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::inbox_row).collect())
        }
    };
    // `conflict` is the backend's upsert target for `diesel_inbox_counters`.
    // Where the backend has `RETURNING`: read back the total, so that Diesel keeps the upsert
    // prepared (see `Cached`).
    (bump_counter, $schema:ident, $codec:ident, conflict = $target:expr) => {
        async fn bump_counter<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            (consumer, event_id): $crate::backend::Key<'_>,
            counter: $crate::state::Counter,
            by: i64,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_counters::dsl as c;
            let bucket =
                $crate::backend::counter_bucket(now) + $crate::backend::counter_stripe(event_id);
            let upsert = diesel::insert_into(c::diesel_inbox_counters)
                .values((
                    c::consumer.eq($codec::key(consumer)),
                    c::counter.eq(counter),
                    c::bucket.eq($codec::time(bucket)),
                    c::total.eq(by),
                ))
                .on_conflict($target)
                .do_update()
                .set(c::total.eq(c::total + by))
                .returning(c::total);
            $crate::sql::Cached(upsert)
                .get_result_on::<i64>(conn)
                .await
                .map(drop)
        }
    };
}
