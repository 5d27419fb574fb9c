//! Every table of the inbox's schema as a Diesel `table!`, one module per backend: what the
//! statements read and write. [`crate::schema`] shows apps the tables they join against.
//!
//! The backends store keys and times in different SQL types (MySQL keeps ids in `VARBINARY`
//! so that no collation merges two of them), so each backend has its own module.

/// The inbox's tables, with the backend's SQL types for keys and times.
macro_rules! inbox_tables {
    (key = $key:ident, time = $time:ident) => {
        diesel::table! {
            /// One row per `(consumer, event_id)` the consumer has settled: processed, or
            /// held back by the failure policy.
            diesel_inbox_events (consumer, event_id) {
                /// The consumer name.
                consumer -> $key,
                /// The event id, byte for byte.
                event_id -> $key,
                /// `processed`, `dead_lettered` or `discarded`.
                state -> Text,
                /// When the event took effect (or was dead-lettered).
                processed_at -> $time,
                /// When the latest delivery arrived.
                last_seen_at -> $time,
                /// Deliveries counted: the settling one and every one since.
                deliveries -> BigInt,
                /// SHA-256 of the first delivery's payload, when one was given.
                payload_hash -> Nullable<Binary>,
                /// Deliveries that reused the id with a different payload.
                payload_conflicts -> BigInt,
                /// The effect's return value as JSON, when result storage is on.
                result -> Nullable<Text>,
            }
        }

        diesel::table! {
            /// One row per `(consumer, event_id)` whose effect failed, counting the attempts.
            diesel_inbox_failures (consumer, event_id) {
                /// The consumer name.
                consumer -> $key,
                /// The event id.
                event_id -> $key,
                /// A [`DeadLetterState`](crate::dead_letter::DeadLetterState).
                state -> Text,
                /// Failed attempts.
                attempts -> BigInt,
                /// The last failure's error text.
                last_error -> Text,
                /// The first failure.
                first_failed_at -> $time,
                /// The last failure.
                last_failed_at -> $time,
                /// The payload as last delivered, byte for byte.
                payload -> Nullable<Binary>,
                /// `json` or `bytes`.
                payload_kind -> Nullable<Text>,
                /// The last state change.
                updated_at -> $time,
            }
        }

        diesel::table! {
            /// Append-only history: every failed attempt and every transition, with who and why.
            diesel_inbox_failure_log (id) {
                /// Order of entries.
                id -> BigInt,
                /// The consumer name.
                consumer -> $key,
                /// The event id.
                event_id -> $key,
                /// A [`HistoryKind`](crate::dead_letter::HistoryKind).
                entry -> Text,
                /// The attempt number, for failures and dead-lettering.
                attempt -> Nullable<BigInt>,
                /// The error text, for failures.
                error -> Nullable<Text>,
                /// Who made the transition.
                actor -> Nullable<Text>,
                /// Why.
                reason -> Nullable<Text>,
                /// When.
                at -> $time,
            }
        }

        diesel::table! {
            /// Counts per consumer and hour of duplicate deliveries, payload conflicts,
            /// failed attempts, dead letters and transitions: what stats over a recent window
            /// sum.
            diesel_inbox_counters (consumer, counter, bucket) {
                /// The consumer name.
                consumer -> $key,
                /// What is counted.
                counter -> Text,
                /// The start of the hour (UTC) the counts fall in, plus the row's stripe in
                /// microseconds (0 to 15): a counter's counts for an hour are spread over a
                /// few rows, by event id, so that concurrent deliveries rarely meet on one.
                bucket -> $time,
                /// How many in that hour.
                total -> BigInt,
            }
        }

        diesel::table! {
            /// One row per `(consumer, stream)` read with a sequence cursor: its watermark and
            /// the epoch that fences it.
            diesel_inbox_cursors (consumer, stream) {
                /// The consumer name.
                consumer -> $key,
                /// The stream (partition, subject, chain) the sequences number.
                stream -> $key,
                /// Every sequence at or below it is settled; `NULL` before the first.
                watermark -> Nullable<BigInt>,
                /// The highest sequence settled; above the watermark while a gap is open.
                high -> Nullable<BigInt>,
                /// The fencing epoch: bumped by every acquire.
                epoch -> BigInt,
                /// Who acquired the current epoch.
                owner -> Nullable<Text>,
                /// The last change.
                updated_at -> $time,
            }
        }

        diesel::table! {
            /// The gap ledger: every range of sequences a cursor skipped, its cause and fate.
            diesel_inbox_gaps (id) {
                /// The gap's number, for ops to resolve it by.
                id -> BigInt,
                /// The consumer name.
                consumer -> $key,
                /// The stream.
                stream -> $key,
                /// The first missing sequence.
                first_sequence -> BigInt,
                /// The last missing sequence.
                last_sequence -> BigInt,
                /// A [`GapCause`](crate::cursor::GapCause).
                cause -> Text,
                /// A [`GapState`](crate::cursor::GapState).
                state -> Text,
                /// When the cursor found it.
                detected_at -> $time,
                /// When it was filled or resolved.
                closed_at -> Nullable<$time>,
                /// Who resolved it.
                resolved_by -> Nullable<Text>,
                /// Why.
                resolution -> Nullable<Text>,
            }
        }

        diesel::table! {
            /// The sequence each id row of a cursor consumer was settled at.
            diesel_inbox_event_sequences (consumer, stream, sequence) {
                /// The consumer name.
                consumer -> $key,
                /// The stream.
                stream -> $key,
                /// The sequence.
                sequence -> BigInt,
                /// The event id settled at it.
                event_id -> $key,
            }
        }

        diesel::table! {
            /// One row per `(consumer, event_id)` claimed for a side effect outside the
            /// database: who holds it, until when, and what came of it.
            diesel_inbox_claims (consumer, event_id) {
                /// The consumer name.
                consumer -> $key,
                /// The event id, byte for byte.
                event_id -> $key,
                /// A [`ClaimState`](crate::claim::ClaimState) as stored; `in_progress` past its
                /// lease reads as in doubt.
                state -> Text,
                /// The fencing token: bumped by every acquisition.
                attempt -> BigInt,
                /// Deliveries counted: the first and every one since.
                deliveries -> BigInt,
                /// When the holder's lease runs out.
                lease_until -> $time,
                /// When the claim was first acquired.
                claimed_at -> $time,
                /// The last change or delivery.
                updated_at -> $time,
                /// When it was completed.
                completed_at -> Nullable<$time>,
                /// SHA-256 of the first delivery's payload, when one was given.
                payload_hash -> Nullable<Binary>,
                /// The payload as first delivered, byte for byte.
                payload -> Nullable<Binary>,
                /// `json` or `bytes`.
                payload_kind -> Nullable<Text>,
                /// The side effect's result as JSON, once completed.
                result -> Nullable<Text>,
                /// Why it was released, abandoned or is in doubt.
                last_error -> Nullable<Text>,
                /// Who resolved it, when ops did.
                resolved_by -> Nullable<Text>,
                /// Why.
                resolution -> Nullable<Text>,
            }
        }

        diesel::table! {
            /// The transactional outbox: one row per enqueued event, in enqueue order.
            diesel_inbox_outbox (position) {
                /// Enqueue order, and so publish order per aggregate.
                position -> BigInt,
                /// The envelope's event id.
                event_id -> $key,
                /// Where the relay publishes it: a subject, topic, queue or routing key.
                topic -> Text,
                /// The aggregate's type.
                aggregate_type -> $key,
                /// The aggregate's id.
                aggregate_id -> $key,
                /// The event type.
                event_type -> Text,
                /// The message headers, a JSON object.
                headers -> Text,
                /// The message body: the payload's bytes.
                body -> Binary,
                /// An [`OutboxState`](crate::outbox::OutboxState).
                state -> Text,
                /// Failed publish attempts.
                attempts -> BigInt,
                /// When the relay may take it (its backoff after a failed attempt).
                available_at -> $time,
                /// The relay holding it.
                lease_token -> Nullable<Text>,
                /// Until when that relay holds it.
                lease_until -> Nullable<$time>,
                /// Why its last attempt failed.
                last_error -> Nullable<Text>,
                /// When it was enqueued.
                enqueued_at -> $time,
                /// When the broker accepted it.
                published_at -> Nullable<$time>,
            }
        }

        diesel::table! {
            /// The blocks a chain stream processed on its current branch, down to its
            /// finalized height.
            diesel_inbox_blocks (consumer, stream, height) {
                /// The consumer name.
                consumer -> $key,
                /// The chain stream.
                stream -> $key,
                /// The block's height.
                height -> BigInt,
                /// The block's hash, byte for byte.
                hash -> $key,
                /// Its parent's hash.
                parent_hash -> $key,
                /// When the block was processed.
                processed_at -> $time,
            }
        }

        diesel::table! {
            /// The events each of those blocks took effect for, in order.
            diesel_inbox_block_events (consumer, stream, height, position) {
                /// The consumer name.
                consumer -> $key,
                /// The chain stream.
                stream -> $key,
                /// The block's height.
                height -> BigInt,
                /// The event's place in the block, from 0.
                position -> BigInt,
                /// The event id.
                event_id -> $key,
            }
        }

        diesel::table! {
            /// The fork ledger: one row per reorg of a chain stream.
            diesel_inbox_reorgs (id) {
                /// The reorg's number.
                id -> BigInt,
                /// The consumer name.
                consumer -> $key,
                /// The chain stream.
                stream -> $key,
                /// The height of the last block both branches share.
                ancestor_height -> BigInt,
                /// The old branch's head.
                old_head_height -> BigInt,
                /// Its hash.
                old_head_hash -> $key,
                /// The block of the new branch that revealed the fork.
                new_head_height -> BigInt,
                /// Its hash.
                new_head_hash -> $key,
                /// Events whose effect the reorg reverted.
                events_reverted -> BigInt,
                /// Of those, how many took effect again on the new branch so far.
                events_reapplied -> BigInt,
                /// When it happened.
                happened_at -> $time,
            }
        }

        diesel::table! {
            /// Side effects outside the database made for events a reorg orphaned.
            diesel_inbox_orphaned_effects (reorg_id, event_id) {
                /// The reorg that orphaned the event.
                reorg_id -> BigInt,
                /// The consumer name.
                consumer -> $key,
                /// The event id, whose claim holds the side effect.
                event_id -> $key,
                /// The chain stream.
                stream -> $key,
                /// The orphaned block's height.
                height -> BigInt,
                /// Its hash.
                block_hash -> $key,
                /// The claim's state when the reorg found it.
                claim_state -> Text,
                /// When the reorg found it.
                found_at -> $time,
            }
        }

        diesel::table! {
            /// Governed replays: a bounded, recorded re-run of past events into a target
            /// consumer, reconciled before it is accepted.
            diesel_inbox_replays (id) {
                /// The replay's number.
                id -> BigInt,
                /// The target consumer, whose inbox the replay runs through.
                consumer -> $key,
                /// The source's name (`outbox`, `jetstream:ORDERS`).
                source -> Text,
                /// The first position of the range, where it is a position range.
                range_first -> Nullable<BigInt>,
                /// Its last position.
                range_last -> Nullable<BigInt>,
                /// The rest of the plan, a JSON document: its target, range, schema
                /// interpretation, expectation and side-effect policy.
                plan -> Text,
                /// Why the replay was asked for.
                reason -> Text,
                /// Who asked for it.
                requested_by -> Text,
                /// A [`ReplayState`](crate::replay::ReplayState).
                state -> Text,
                /// The source position of the last event settled.
                checkpoint -> Nullable<BigInt>,
                /// The counts so far, a JSON object: `read`, `processed`, `duplicates`,
                /// `failed`, `dead_lettered`, `skipped`, `suppressed`.
                counts -> Text,
                /// The input digest so far, as hex.
                digest -> Text,
                /// Raised by each runner that takes the replay over.
                fence -> BigInt,
                /// Until when the current runner holds it.
                lease_until -> Nullable<$time>,
                /// The reconciliation's evidence, a JSON document.
                evidence -> Nullable<Text>,
                /// When it last changed.
                updated_at -> $time,
            }
        }

        diesel::table! {
            /// Every transition of a replay, with who made it and why.
            diesel_inbox_replay_transitions (id) {
                /// The transition's number.
                id -> BigInt,
                /// The replay.
                replay_id -> BigInt,
                /// The state it left; none for its planning.
                from_state -> Nullable<Text>,
                /// The state it entered.
                to_state -> Text,
                /// Who made it.
                actor -> Text,
                /// Why.
                reason -> Text,
                /// When.
                at -> $time,
            }
        }

        diesel::table! {
            /// The events of a replay that did not simply take effect or come back as
            /// duplicates.
            diesel_inbox_replay_notes (replay_id, position, kind) {
                /// The replay.
                replay_id -> BigInt,
                /// The event's source position.
                position -> BigInt,
                /// A [`NoteKind`](crate::replay::NoteKind).
                kind -> Text,
                /// The event id.
                event_id -> $key,
                /// What happened.
                detail -> Text,
            }
        }

        diesel::table! {
            /// Holds that must span a cluster whose own locks are local to a node: one row
            /// per hold, kept by its holder until `held_until` (on a Galera node, the prune's).
            diesel_inbox_leases (name) {
                /// What is held: `prune`.
                name -> Text,
                /// The holder's random token.
                holder -> Text,
                /// Until when the holder keeps it, unless it renews it.
                held_until -> $time,
            }
        }

        diesel::table! {
            /// Which reorg reverted each event still reverted, from the revert to the event's
            /// re-application: the reorg whose `events_reapplied` it counts in.
            diesel_inbox_reverted_events (consumer, event_id) {
                /// The consumer name.
                consumer -> $key,
                /// The event id.
                event_id -> $key,
                /// The reorg that reverted it.
                reorg_id -> BigInt,
            }
        }

        diesel::allow_tables_to_appear_in_same_query!(
            diesel_inbox_events,
            diesel_inbox_failures,
            diesel_inbox_failure_log,
            diesel_inbox_counters,
            diesel_inbox_cursors,
            diesel_inbox_gaps,
            diesel_inbox_event_sequences,
            diesel_inbox_claims,
            diesel_inbox_outbox,
            diesel_inbox_blocks,
            diesel_inbox_block_events,
            diesel_inbox_reorgs,
            diesel_inbox_orphaned_effects,
            diesel_inbox_replays,
            diesel_inbox_replay_transitions,
            diesel_inbox_replay_notes,
            diesel_inbox_leases,
            diesel_inbox_reverted_events,
        );
    };
}

/// The tables on PostgreSQL: keys are `TEXT COLLATE "C"`, times `TIMESTAMPTZ`.
#[cfg(feature = "postgres")]
pub(crate) mod postgres {
    inbox_tables!(key = Text, time = Timestamptz);
}

/// The tables on SQLite: keys are `TEXT` (binary collation), times UTC `TIMESTAMP`.
#[cfg(feature = "sqlite")]
pub(crate) mod sqlite {
    inbox_tables!(key = Text, time = Timestamp);
}

/// The tables on MySQL and MariaDB: keys are `VARBINARY`, times UTC `DATETIME(6)`.
#[cfg(feature = "mysql")]
pub(crate) mod mysql {
    inbox_tables!(key = Binary, time = Datetime);
}
