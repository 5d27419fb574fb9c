//! The cursor area's statements that read the same on every backend, written once: a backend's
//! `impl CursorSql` takes each by name, `cursor_statement!(NAME, schema, codec, ..)`, with its
//! schema, codec and row mappings as explicit arguments (see `portable.rs`). The trait, and what
//! each statement does, is [`crate::sql::CursorSql`].

/// One `CursorSql` statement whose SQL reads the same on every backend, by name.
macro_rules! cursor_statement {
    // Sequence cursors. `advance_cursor` is the in-order fast path: one update, which finds
    // the row only when the sequence is the next one, no gap is open and the epoch matches.
    (advance_cursor, $schema:ident, $codec:ident) => {
        async fn advance_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            sequence: i64,
            epoch: i64,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_cursors::dsl as c;
            $crate::backend::cursor::AdvanceCursor::<
                <c::consumer as diesel::Expression>::SqlType,
                <c::updated_at as diesel::Expression>::SqlType,
                _,
                _,
            >::new($codec::key(key.0), $codec::key(key.1), sequence, epoch, $codec::time(now))
            .execute_on(conn)
            .await
            .map(|changed| changed == 1)
        }
    };
    // `lock`: `for_update` where the backend has row locks; SQLite's immediate transaction
    // holds the whole database instead.
    (cursor, $schema:ident, $codec:ident, $rows:ident $(, lock = $lock:ident)?) => {
        async fn cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
        ) -> QueryResult<Option<$crate::rows::CursorRow>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_cursors::dsl as c;
            c::diesel_inbox_cursors
                .find(($codec::key(key.0), $codec::key(key.1)))
                .select($rows::cursor_columns())
                $(.$lock())?
                .limit(1)
                .get_result_on::<$rows::CursorColumns>(conn)
                .await
                .optional()
                .map(|row| row.map(|row| $rows::cursor_row(row).1))
        }
    };
    (cursors, $schema:ident, $codec:ident, $rows:ident) => {
        async fn cursors<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
        ) -> QueryResult<Vec<(String, $crate::rows::CursorRow)>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_blocks::dsl as b;
            use $schema::diesel_inbox_cursors::dsl as c;
            // A chain stream's row (it has blocks) is not a sequence cursor's.
            let chain = b::diesel_inbox_blocks
                .filter(b::consumer.eq(c::consumer))
                .filter(b::stream.eq(c::stream));
            c::diesel_inbox_cursors
                .filter(c::consumer.eq($codec::key(consumer)))
                .filter(diesel::dsl::not(diesel::dsl::exists(chain)))
                .order(c::stream)
                .select($rows::cursor_columns())
                .load_on::<$rows::CursorColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::cursor_row).collect())
        }
    };
    // `insert`: `insert_into` with `on_conflict_do_nothing` (PostgreSQL, SQLite), or
    // `insert_or_ignore_into` (MySQL).
    (insert_cursor, $schema:ident, $codec:ident, $insert:ident $(, $on_conflict:ident)?) => {
        async fn insert_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::$insert(c::diesel_inbox_cursors)
                .values((
                    c::consumer.eq($codec::key(key.0)),
                    c::stream.eq($codec::key(key.1)),
                    c::updated_at.eq($codec::time(now)),
                ))
                $(.$on_conflict())?
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (save_cursor, $schema:ident, $codec:ident) => {
        async fn save_cursor<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            watermark: Option<i64>,
            high: Option<i64>,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                .set((
                    c::watermark.eq(watermark),
                    c::high.eq(high),
                    c::updated_at.eq($codec::time(now)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (bump_epoch, $schema:ident, $codec:ident) => {
        async fn bump_epoch<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            owner: &str,
            now: DateTime<Utc>,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_cursors::dsl as c;
            diesel::update(c::diesel_inbox_cursors.find(($codec::key(key.0), $codec::key(key.1))))
                .set((
                    c::epoch.eq(c::epoch + 1),
                    c::owner.eq(owner),
                    c::updated_at.eq($codec::time(now)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (gaps, $schema:ident, $codec:ident, $rows:ident) => {
        async fn gaps<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            stream: Option<&str>,
            state: Option<$crate::state::GapState>,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::GapRow>>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            let mut query = g::diesel_inbox_gaps
                .filter(g::consumer.eq($codec::key(consumer)))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(g::stream.eq($codec::key(stream)));
            }
            // The state is compared as text: a row whose state this version cannot read is
            // listed too, as unreadable, rather than left out.
            if let Some(state) = state {
                query = query.filter(
                    g::state
                        .eq(state)
                        .or(g::state.ne_all($crate::state::GapState::TEXTS)),
                );
            }
            query
                .order((g::stream, g::first_sequence, g::id))
                .select($rows::gap_columns())
                .load_on::<$rows::GapColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::gap_row).collect())
        }
    };
    (gap_page, $schema:ident, $codec:ident, $rows:ident) => {
        async fn gap_page<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            consumer: &str,
            stream: Option<&str>,
            state: Option<$crate::state::GapState>,
            after: i64,
            limit: i64,
        ) -> QueryResult<Vec<$crate::rows::Listed<$crate::rows::GapRow>>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            let mut query = g::diesel_inbox_gaps
                .filter(g::consumer.eq($codec::key(consumer)))
                .filter(g::id.gt(after))
                .into_boxed();
            if let Some(stream) = stream {
                query = query.filter(g::stream.eq($codec::key(stream)));
            }
            // The state is compared as text: a row whose state this version cannot read is
            // listed too, as unreadable, rather than left out.
            if let Some(state) = state {
                query = query.filter(
                    g::state
                        .eq(state)
                        .or(g::state.ne_all($crate::state::GapState::TEXTS)),
                );
            }
            query
                .order(g::id)
                .limit(limit)
                .select($rows::gap_columns())
                .load_on::<$rows::GapColumns>(conn)
                .await
                .map(|rows| rows.into_iter().map($rows::gap_row).collect())
        }
    };
    (gap_by_id, $schema:ident, $codec:ident) => {
        async fn gap_by_id<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            id: i64,
        ) -> QueryResult<Option<(String, String, $crate::state::GapState)>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            g::diesel_inbox_gaps
                .find(id)
                .select((g::consumer, g::stream, g::state))
                .limit(1)
                .get_result_on::<($codec::KeyOwned, $codec::KeyOwned, $crate::state::GapState)>(conn)
                .await
                .optional()
                .map(|row| {
                    row.map(|(c, s, state)| ($codec::key_string(c), $codec::key_string(s), state))
                })
        }
    };
    // `returning`: how the backend learns the new row's id.
    (insert_gap, $schema:ident, $codec:ident, returning) => {
        async fn insert_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
            detected_at: DateTime<Utc>,
        ) -> QueryResult<i64> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values(new_gap_row!($schema, $codec, key, sequences, cause, detected_at))
                .returning(g::id)
                .get_result_on::<i64>(conn)
                .await
        }
    };
    (insert_gap, $schema:ident, $codec:ident, last_insert_id) => {
        async fn insert_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
            detected_at: DateTime<Utc>,
        ) -> QueryResult<i64> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::insert_into(g::diesel_inbox_gaps)
                .values(new_gap_row!($schema, $codec, key, sequences, cause, detected_at))
                .execute_on(conn)
                .await?;
            diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "CAST(LAST_INSERT_ID() AS SIGNED)",
            ))
            .get_result_on::<i64>(conn)
            .await
        }
    };
    (update_gap, $schema:ident, $codec:ident) => {
        async fn update_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            id: i64,
            sequences: (i64, i64),
            cause: $crate::state::GapCause,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::update(g::diesel_inbox_gaps.find(id))
                .set((
                    g::first_sequence.eq(sequences.0),
                    g::last_sequence.eq(sequences.1),
                    g::cause.eq(cause),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (close_gap, $schema:ident, $codec:ident) => {
        async fn close_gap<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            id: i64,
            state: $crate::state::GapState,
            audit: Option<&$crate::Audit>,
            now: DateTime<Utc>,
        ) -> QueryResult<bool> {
            use $crate::sql::Run;
            use $crate::state::GapState;
            use $schema::diesel_inbox_gaps::dsl as g;
            diesel::update(g::diesel_inbox_gaps.find(id).filter(g::state.eq(GapState::Open)))
                .set((
                    g::state.eq(state),
                    g::closed_at.eq(Some($codec::time(now))),
                    g::resolved_by.eq(audit.map($crate::Audit::actor)),
                    g::resolution.eq(audit.map($crate::Audit::reason)),
                ))
                .execute_on(conn)
                .await
                .map(|changed| changed == 1)
        }
    };
    (insert_event_sequence, $schema:ident, $codec:ident) => {
        async fn insert_event_sequence<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            sequence: i64,
            event_id: &str,
        ) -> QueryResult<()> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_event_sequences::dsl as q;
            diesel::insert_into(q::diesel_inbox_event_sequences)
                .values((
                    q::consumer.eq($codec::key(key.0)),
                    q::stream.eq($codec::key(key.1)),
                    q::sequence.eq(sequence),
                    q::event_id.eq($codec::key(event_id)),
                ))
                .execute_on(conn)
                .await
                .map(drop)
        }
    };
    (sequenced_events, $schema:ident, $codec:ident) => {
        async fn sequenced_events<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            up_to: i64,
            limit: i64,
        ) -> QueryResult<Vec<(i64, String)>> {
            use $crate::sql::Run;
            use $schema::diesel_inbox_event_sequences::dsl as q;
            q::diesel_inbox_event_sequences
                .filter(q::consumer.eq($codec::key(key.0)))
                .filter(q::stream.eq($codec::key(key.1)))
                .filter(q::sequence.le(up_to))
                .order(q::sequence)
                .limit(limit)
                .select((q::sequence, q::event_id))
                .load_on::<(i64, $codec::KeyOwned)>(conn)
                .await
                .map(|rows| rows.into_iter().map(|(s, id)| (s, $codec::key_string(id))).collect())
        }
    };
    (delete_sequenced_events, $schema:ident, $codec:ident) => {
        async fn delete_sequenced_events<F, C: $crate::sql::Db<F, Backend = Self>>(
            conn: &mut C,
            key: $crate::backend::StreamKey<'_>,
            up_to: i64,
            event_ids: &[&str],
        ) -> QueryResult<usize> {
            use $crate::sql::Run;
            use $crate::state::InboxState;
            use $schema::diesel_inbox_event_sequences::dsl as q;
            use $schema::diesel_inbox_events::dsl as t;
            let ids: Vec<_> = event_ids.iter().map(|id| $codec::key(id)).collect();
            let events = diesel::delete(
                t::diesel_inbox_events
                    .filter(t::consumer.eq($codec::key(key.0)))
                    .filter(t::event_id.eq_any(ids))
                    .filter(t::state.eq(InboxState::Processed)),
            )
            .execute_on(conn)
            .await?;
            diesel::delete(
                q::diesel_inbox_event_sequences
                    .filter(q::consumer.eq($codec::key(key.0)))
                    .filter(q::stream.eq($codec::key(key.1)))
                    .filter(q::sequence.le(up_to)),
            )
            .execute_on(conn)
            .await?;
            Ok(events)
        }
    };
}

/// The in-order advance, written out: Diesel prepares every `UPDATE` anew (its SQL can vary
/// with the values), a round trip more each time, and keeps this one prepared, by its type.
/// `K` and `T` are the backend's SQL types of keys and times.
pub(crate) struct AdvanceCursor<K, T, Key, Time> {
    consumer: Key,
    stream: Key,
    sequence: i64,
    /// The sequence before it, where the row must stand.
    previous: i64,
    epoch: i64,
    now: Time,
    types: std::marker::PhantomData<fn() -> (K, T)>,
}

impl<K, T, Key, Time> AdvanceCursor<K, T, Key, Time> {
    pub(crate) fn new(consumer: Key, stream: Key, sequence: i64, epoch: i64, now: Time) -> Self {
        Self {
            consumer,
            stream,
            sequence,
            previous: sequence - 1,
            epoch,
            now,
            types: std::marker::PhantomData,
        }
    }
}

impl<DB, K, T, Key, Time> diesel::query_builder::QueryFragment<DB>
    for AdvanceCursor<K, T, Key, Time>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<K>
        + diesel::sql_types::HasSqlType<T>
        + diesel::sql_types::HasSqlType<diesel::sql_types::BigInt>,
    Key: diesel::serialize::ToSql<K, DB>,
    Time: diesel::serialize::ToSql<T, DB>,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        use diesel::sql_types::BigInt;
        out.push_sql("UPDATE diesel_inbox_cursors SET watermark = ");
        out.push_bind_param::<BigInt, _>(&self.sequence)?;
        out.push_sql(", high = ");
        out.push_bind_param::<BigInt, _>(&self.sequence)?;
        out.push_sql(", updated_at = ");
        out.push_bind_param::<T, _>(&self.now)?;
        out.push_sql(" WHERE consumer = ");
        out.push_bind_param::<K, _>(&self.consumer)?;
        out.push_sql(" AND stream = ");
        out.push_bind_param::<K, _>(&self.stream)?;
        // The row moves only from the sequence before: settled up to it, no gap open.
        out.push_sql(" AND high = ");
        out.push_bind_param::<BigInt, _>(&self.previous)?;
        out.push_sql(" AND watermark = high AND epoch = ");
        out.push_bind_param::<BigInt, _>(&self.epoch)
    }
}

/// One statement per backend, so the type names it in the connection's statement cache.
impl<K: 'static, T: 'static, Key, Time> diesel::query_builder::QueryId
    for AdvanceCursor<K, T, Key, Time>
{
    type QueryId = AdvanceCursor<K, T, (), ()>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<K, T, Key, Time, Conn> diesel::RunQueryDsl<Conn> for AdvanceCursor<K, T, Key, Time> {}
