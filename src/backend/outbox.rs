//! The outbox's statements, written once for every backend.
//!
//! A backend's `impl OutboxSql` takes each by name, `outbox_statement!(outbox_rows, schema,
//! codec)`: `schema` is its module of [`crate::schema`], `codec` its key and time conversions;
//! `insert_outbox` takes how a duplicate event id is told (`insert = do_nothing` or
//! `unique_error`), and the relay's reads `lock = for_update` where the backend has row locks.
//! The trait, and what each statement does, is [`crate::sql::OutboxSql`].

/// One `OutboxSql` statement whose SQL reads the same on every backend, by name.
macro_rules! outbox_statement {
    (insert_outbox, $schema:ident, $codec:ident, insert = $on_duplicate:ident) => {
        async fn insert_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        row: &$crate::rows::NewOutboxRow<'_>,
    ) -> QueryResult<bool> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        let now = $codec::time(row.now);
        let insert = diesel::insert_into(o::table).values((
            o::event_id.eq($codec::key(row.event_id)),
            o::topic.eq(row.topic),
            o::aggregate_type.eq($codec::key(row.aggregate_type)),
            o::aggregate_id.eq($codec::key(row.aggregate_id)),
            o::event_type.eq(row.event_type),
            o::headers.eq(row.headers),
            o::body.eq(row.body),
            o::state.eq($crate::state::OutboxState::Pending),
            o::attempts.eq(0_i64),
            o::available_at.eq(now),
            o::enqueued_at.eq(now),
        ));
        // A duplicate id must not fail the statement where a failed statement aborts the
        // caller's transaction (PostgreSQL): the business writes would be lost with it.
        // MySQL has no `ON CONFLICT DO NOTHING` but undoes a failed statement alone.
        outbox_insert!($on_duplicate, conn, insert, o)
    }
    };
    (outbox_heads, $schema:ident, $codec:ident $(, lock = $lock:ident)?) => {
        async fn outbox_heads<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        now: DateTime<Utc>,
        limit: i64,
    ) -> QueryResult<Vec<($crate::rows::OutboxRow, bool)>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        use $crate::state::OutboxState;
        // The same on every backend; the correlated subqueries read the aggregate index.
        const NO_EARLIER_PENDING: &str = "NOT EXISTS (SELECT 1 FROM diesel_inbox_outbox e \
            WHERE e.aggregate_type = diesel_inbox_outbox.aggregate_type \
            AND e.aggregate_id = diesel_inbox_outbox.aggregate_id \
            AND e.state = 'pending' AND e.position < diesel_inbox_outbox.position)";
        const LATER_PENDING: &str = "EXISTS (SELECT 1 FROM diesel_inbox_outbox e \
            WHERE e.aggregate_type = diesel_inbox_outbox.aggregate_type \
            AND e.aggregate_id = diesel_inbox_outbox.aggregate_id \
            AND e.state = 'pending' AND e.position > diesel_inbox_outbox.position)";
        let now = $codec::time(now);
        let query = o::table
            .filter(o::state.eq(OutboxState::Pending))
            .filter(o::available_at.le(now))
            .filter(o::lease_until.is_null().or(o::lease_until.le(now)))
            .filter(diesel::dsl::sql::<diesel::sql_types::Bool>(NO_EARLIER_PENDING))
            .order(o::position)
            .limit(limit)
            .select((
                outbox_columns!($schema),
                diesel::dsl::sql::<diesel::sql_types::Bool>(LATER_PENDING),
            ));
        $(let query = query.$lock().skip_locked();)?
        query
            .load_on::<(outbox_columns!($codec, types), bool)>(conn)
            .await?
            .into_iter()
            .map(|(row, more)| Ok(($crate::backend::readable(outbox_row!($codec, row))?, more)))
            .collect()
    }
    };
    (outbox_followers, $schema:ident, $codec:ident $(, lock = $lock:ident)?) => {
        async fn outbox_followers<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        head: &$crate::rows::OutboxRow,
        limit: i64,
    ) -> QueryResult<Vec<$crate::rows::OutboxRow>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        let query = o::table
            .filter(o::aggregate_type.eq($codec::key(&head.aggregate_type)))
            .filter(o::aggregate_id.eq($codec::key(&head.aggregate_id)))
            .filter(o::state.eq($crate::state::OutboxState::Pending))
            .filter(o::position.gt(head.position))
            .order(o::position)
            .limit(limit)
            .select(outbox_columns!($schema));
        $(let query = query.$lock();)?
        query
            .load_on::<outbox_columns!($codec, types)>(conn)
            .await?
            .into_iter()
            .map(|row| $crate::backend::readable(outbox_row!($codec, row)))
            .collect()
    }
    };
    (lease_outbox, $schema:ident, $codec:ident) => {
        async fn lease_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        positions: &[i64],
        token: &str,
        until: DateTime<Utc>,
    ) -> QueryResult<usize> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        diesel::update(
            o::table
                .filter(o::position.eq_any(positions))
                .filter(o::state.eq($crate::state::OutboxState::Pending)),
        )
        .set((
            o::lease_token.eq(Some(token)),
            o::lease_until.eq(Some($codec::time(until))),
        ))
        .execute_on(conn)
        .await
    }
    };
    (settle_outbox, $schema:ident, $codec:ident) => {
        async fn settle_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        positions: &[i64],
        token: &str,
        change: $crate::rows::OutboxChange<'_>,
        now: DateTime<Utc>,
    ) -> QueryResult<usize> {
        use $crate::sql::Run;
        use $crate::rows::OutboxChange;
        use $crate::state::OutboxState;
        use $schema::diesel_inbox_outbox as o;
        let held = o::table
            .filter(o::position.eq_any(positions))
            .filter(o::state.eq(OutboxState::Pending))
            .filter(o::lease_token.eq(token));
        let unleased = (
            o::lease_token.eq(None::<&str>),
            o::lease_until.eq(None::<$codec::Time>),
        );
        let update = diesel::update(held);
        match change {
            OutboxChange::Published => update
                .set((
                    unleased,
                    o::state.eq(OutboxState::Published),
                    o::published_at.eq(Some($codec::time(now))),
                ))
                .execute_on(conn)
                .await,
            OutboxChange::Retry { error, at } => update
                .set((
                    unleased,
                    o::attempts.eq(o::attempts + 1),
                    o::available_at.eq($codec::time(at)),
                    o::last_error.eq(Some(error)),
                ))
                .execute_on(conn)
                .await,
            OutboxChange::Failed { error } => update
                .set((
                    unleased,
                    o::state.eq(OutboxState::Failed),
                    o::attempts.eq(o::attempts + 1),
                    o::last_error.eq(Some(error)),
                ))
                .execute_on(conn)
                .await,
            OutboxChange::Released => update.set(unleased).execute_on(conn).await,
        }
    }
    };
    (outbox_rows, $schema:ident, $codec:ident) => {
        async fn outbox_rows<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        state: Option<$crate::state::OutboxState>,
        after: i64,
        limit: i64,
    ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::OutboxRow>>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        let mut query = o::table
            .filter(o::position.gt(after))
            .order(o::position)
            .limit(limit)
            .select(outbox_columns!($schema))
            .into_boxed();
        // The state is compared as text: a row whose state this version cannot read is
        // listed too, as unreadable, rather than left out.
        if let Some(state) = state {
            query = query.filter(
                o::state
                    .eq(state)
                    .or(o::state.ne_all($crate::state::OutboxState::TEXTS)),
            );
        }
        query
            .load_on::<outbox_columns!($codec, types)>(conn)
            .await
            .map(|rows| rows.into_iter().map(|row| outbox_row!($codec, row)).collect())
    }
    };
    (outbox_row, $schema:ident, $codec:ident) => {
        async fn outbox_row<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        position: i64,
    ) -> QueryResult<Option<$crate::rows::OutboxRow>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        o::table
            .find(position)
            .select(outbox_columns!($schema))
            .limit(1)
            .get_result_on::<outbox_columns!($codec, types)>(conn)
            .await
            .optional()?
            .map(|row| $crate::backend::readable(outbox_row!($codec, row)))
            .transpose()
    }
    };
    (outbox_row_of_event, $schema:ident, $codec:ident) => {
        async fn outbox_row_of_event<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        event_id: &str,
    ) -> QueryResult<Option<$crate::rows::OutboxRow>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        o::table
            .filter(o::event_id.eq($codec::key(event_id)))
            .select(outbox_columns!($schema))
            .limit(1)
            .get_result_on::<outbox_columns!($codec, types)>(conn)
            .await
            .optional()?
            .map(|row| $crate::backend::readable(outbox_row!($codec, row)))
            .transpose()
    }
    };
    (retry_outbox, $schema:ident, $codec:ident) => {
        async fn retry_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            position: i64,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
        use $crate::sql::Run;
        use $crate::state::OutboxState;
        use $schema::diesel_inbox_outbox as o;
        diesel::update(
            o::table
                .find(position)
                .filter(o::state.eq(OutboxState::Failed)),
        )
        .set((
            o::state.eq(OutboxState::Pending),
            o::attempts.eq(0_i64),
            o::available_at.eq($codec::time(now)),
        ))
        .execute_on(conn)
        .await
        .map(|changed| changed == 1)
    }
    };
    (delete_published_outbox, $schema:ident, $codec:ident) => {
        async fn delete_published_outbox<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
        cutoff: DateTime<Utc>,
        below: i64,
        limit: i64,
    ) -> QueryResult<usize> {
        use $crate::sql::Run;
        use $crate::state::OutboxState;
        use $schema::diesel_inbox_outbox as o;
        let published = o::state.eq(OutboxState::Published);
        let before = o::published_at.lt($codec::time(cutoff));
        let unreplayed = o::position.lt(below);
        // Two statements: MySQL takes no LIMIT in an IN subquery.
        let positions: Vec<i64> = o::table
            .filter(published)
            .filter(before)
            .filter(unreplayed)
            .order(o::published_at)
            .limit(limit)
            .select(o::position)
            .load_on::<i64>(conn)
            .await?;
        diesel::delete(
            o::table
                .filter(o::position.eq_any(&positions))
                .filter(published)
                .filter(before)
                .filter(unreplayed),
        )
        .execute_on(conn)
        .await
    }
    };
    (outbox_totals, $schema:ident, $codec:ident) => {
        async fn outbox_totals<F, C: $crate::sql::Db<F, Backend = Self>>(
        conn: &mut C,
    ) -> QueryResult<Vec<$crate::rows::OutboxTotals>> {
        use $crate::sql::Run;
        use $schema::diesel_inbox_outbox as o;
        o::table
            .group_by(o::state)
            .select((
                o::state,
                diesel::dsl::count_star(),
                diesel::dsl::min(o::enqueued_at),
            ))
            .load_on::<(String, i64, Option<$codec::Time>)>(conn)
            .await
            .map(|rows| {
                rows.into_iter()
                    .map(|(state, rows, oldest)| (state.parse(), rows, oldest.map($codec::utc)))
                    .collect()
            })
    }
    };
}

/// Runs the outbox INSERT on `$conn`: `Ok(true)` when it inserted, `Ok(false)` when the
/// event id was in the outbox. `do_nothing`: `ON CONFLICT DO NOTHING` (PostgreSQL, SQLite);
/// `unique_error`: the unique key's error, which undoes that statement alone (MySQL).
macro_rules! outbox_insert {
    (do_nothing, $conn:expr, $insert:expr, $o:ident) => {
        $insert
            .on_conflict($o::event_id)
            .do_nothing()
            .execute_on($conn)
            .await
            .map(|inserted| inserted == 1)
    };
    (unique_error, $conn:expr, $insert:expr, $o:ident) => {
        match $insert.execute_on($conn).await {
            Ok(_) => Ok(true),
            Err(diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            )) => Ok(false),
            Err(error) => Err(error),
        }
    };
}

/// The outbox row's select list (`outbox_columns!(schema)`), or its Rust types
/// (`outbox_columns!(codec, types)`).
macro_rules! outbox_columns {
    ($schema:ident) => {{
        use $schema::diesel_inbox_outbox as o;
        (
            o::position,
            o::event_id,
            o::topic,
            o::aggregate_type,
            o::aggregate_id,
            o::event_type,
            o::headers,
            o::body,
            o::state,
            o::attempts,
            o::available_at,
            o::lease_until,
            o::last_error,
            o::enqueued_at,
            o::published_at,
        )
    }};
    ($codec:ident, types) => {
        (
            i64,
            $codec::KeyOwned,
            String,
            $codec::KeyOwned,
            $codec::KeyOwned,
            String,
            String,
            Vec<u8>,
            // The state is read as text, and parsed per row: see `Listed`.
            String,
            i64,
            $codec::Time,
            Option<$codec::Time>,
            Option<String>,
            $codec::Time,
            Option<$codec::Time>,
        )
    };
}

/// An `OutboxRow` from the values of `outbox_columns!`, or its position and the state this
/// version cannot read (a `Listed` row).
macro_rules! outbox_row {
    ($codec:ident, $row:expr) => {{
        let (
            position,
            event_id,
            topic,
            aggregate_type,
            aggregate_id,
            event_type,
            headers,
            body,
            state,
            attempts,
            available_at,
            lease_until,
            last_error,
            enqueued_at,
            published_at,
        ) = $row;
        match state.parse::<$crate::state::OutboxState>() {
            Err(unknown) => Err($crate::rows::Unreadable {
                key: position.to_string(),
                unknown,
            }),
            Ok(state) => Ok($crate::rows::OutboxRow {
                position,
                event_id: $codec::key_string(event_id),
                topic,
                aggregate_type: $codec::key_string(aggregate_type),
                aggregate_id: $codec::key_string(aggregate_id),
                event_type,
                headers,
                body,
                state,
                attempts,
                available_at: $codec::utc(available_at),
                lease_until: lease_until.map($codec::utc),
                last_error,
                enqueued_at: $codec::utc(enqueued_at),
                published_at: published_at.map($codec::utc),
            }),
        }
    }};
}
