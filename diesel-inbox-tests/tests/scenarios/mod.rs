//! The inbox's behaviour, written once and run against every backend by `backend_tests!`.
#![allow(unreachable_pub)]

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{with_inbox, Error, Inbox, InvalidEventId, Outcome, RetryPolicy};
use futures_util::FutureExt;

use crate::support::{
    concurrently, setup, setup_flavour, transaction_depth, Backend, EffectConn, Flavour, Handle,
    StatementLog, TestConn, Tx,
};

mod batch;
mod chain;
mod claims;
mod corrupt_rows;
mod cursor;
mod failure_classes;
mod failure_policy;
mod fit;
mod helpers;
mod migrations;
mod operations;
mod outbox;
mod relay_crash;
mod replay;
mod retention;
mod stats;
pub use batch::*;
pub use chain::*;
pub use claims::*;
pub use corrupt_rows::*;
pub use cursor::*;
pub use failure_classes::*;
pub use failure_policy::*;
pub use fit::*;
pub use helpers::*;
pub use migrations::*;
pub use operations::*;
pub use outbox::*;
pub use relay_crash::*;
pub use replay::*;
pub use retention::*;
pub use stats::*;

/// The scenarios written once over both flavours ([`Flavour`]): one test each, made by
/// `$test!(scenario, flavour)`.
macro_rules! flavour_tests {
    ($test:ident, $flavour:ty) => {
        flavour_tests!(@each $test, $flavour;
            duplicate_delivery_runs_the_effect_once,
            handler_error_leaves_no_effect_and_no_row_and_redelivery_processes_it,
            handler_panic_leaves_no_effect_no_open_transaction_and_a_failure_record,
            two_consumers_each_process_the_same_event_once,
            nested_in_a_rolled_back_transaction_a_later_delivery_processes_it,
            nested_in_a_committed_transaction_the_event_stays_processed,
            invalid_ids_are_rejected_before_any_sql,
            ids_differing_by_case_accents_spaces_or_normal_form_stay_distinct,
            ids_holding_quotes_backslashes_or_sql_are_stored_as_they_are,
            a_consumer_expecting_duplicates_sends_no_insert_the_key_refuses,
            a_swallowed_statement_error_is_reported_as_processed_only_if_the_transaction_survives,
            a_transaction_ended_behind_the_inbox_is_not_reported_as_processed,
            contention_that_clears_is_retried_and_never_reaches_the_caller,
            contention_outlasting_the_retries_is_reported_and_commits_nothing,
            a_panic_while_storing_the_result_leaves_no_transaction_open,
            uuid_and_string_forms_of_one_id_are_one_event,
            each_delivery_path_sends_only_the_statements_it_needs,
            failures_are_counted_across_redeliveries,
            an_event_is_dead_lettered_at_exactly_max_attempts,
            dead_letters_keep_the_payload_byte_for_byte,
            a_redrive_processes_once_and_a_second_redrive_is_refused,
            a_failing_redrive_leaves_the_dead_letter_as_it_was,
            a_discarded_dead_letter_is_kept_and_never_runs,
            transitions_need_an_actor_a_reason_and_a_dead_letter,
            a_reused_id_with_a_different_payload_is_a_conflict,
            a_stored_result_is_returned_on_duplicate,
            a_panicking_handler_counts_as_a_failed_attempt,
            discarding_a_dead_letter_whose_inbox_row_was_deleted_still_holds_it_back,
            a_permanent_failure_is_dead_lettered_at_the_first_attempt,
            a_transient_failure_is_redelivered_and_never_counted,
            every_delivery_result_says_what_to_ack,
            contention_the_handler_returns_is_retried_and_each_attempt_rolled_back,
            a_released_dead_letter_runs_once_on_its_next_delivery,
            releasing_twice_or_a_retrying_event_is_an_invalid_transition,
            a_released_event_that_fails_max_attempts_again_is_dead_lettered_again,
            the_doctor_passes_a_healthy_database,
            the_doctor_fails_a_database_missing_an_index_or_a_migration,
            the_doctor_catches_every_dropped_index_and_its_remedy_restores_it,
            the_doctor_names_the_sql_for_a_missing_column_or_table_and_it_restores_them,
            stats_count_processed_duplicates_conflicts_failures_and_dead_letters,
            recent_counts_leave_out_what_happened_before_the_window,
            stats_all_lists_every_consumer,
            a_batch_runs_new_ids_once_and_reports_duplicates_in_order,
            a_failing_event_in_a_batch_loses_and_doubles_nothing,
            a_batch_dead_letters_an_event_at_max_attempts,
            a_panic_in_a_batch_rolls_back_the_whole_batch,
            a_swallowed_statement_error_in_a_batch_spoils_only_its_own_event,
            an_effect_that_ends_the_transaction_stops_the_batch_before_anything_commits,
            a_bulk_effect_receives_the_new_deliveries_once_in_one_call,
            a_failing_bulk_effect_runs_again_event_by_event_and_only_the_failing_one_rolls_back,
            a_poison_event_panicking_in_a_bulk_effect_is_dead_lettered_and_the_batch_gets_past_it,
            pruning_removes_only_processed_rows_older_than_the_window,
            a_redriven_event_is_kept_for_the_window_after_its_redrive,
            a_window_below_the_declared_redelivery_window_is_refused_and_deletes_nothing,
            a_prune_inside_a_transaction_is_refused,
            a_dry_run_counts_what_a_prune_deletes_and_deletes_nothing,
            a_large_prune_removes_every_old_row_in_bounded_batches,
            a_sequence_at_or_below_the_watermark_is_a_duplicate_and_its_effect_does_not_run,
            a_late_arrival_into_a_gap_is_processed_once_and_fills_it,
            a_cursor_behind_the_brokers_retention_records_an_evicted_gap_that_ops_resolve,
            a_zombie_instance_is_fenced_and_commits_nothing_not_even_its_effect,
            a_batch_with_a_duplicate_and_a_jump_updates_the_cursor_once_and_reports_in_order,
            an_effect_error_in_a_batch_rolls_the_whole_run_back,
            a_stream_from_zero_missing_its_first_sequence_has_no_watermark_and_resumes_at_zero,
            past_max_open_gaps_a_new_gap_is_refused_and_a_filling_sequence_accepted,
            an_event_id_republished_under_a_new_sequence_is_a_duplicate_and_the_cursor_prunes_id_rows,
            a_dead_lettered_sequence_moves_the_cursor_past_it,
            a_completed_claim_returns_its_stored_result_and_the_side_effect_runs_once,
            a_holder_outliving_its_lease_is_in_doubt_or_taken_over_and_then_fenced,
            a_late_completion_stands_over_ops_retry_but_not_over_ops_completion,
            only_a_claim_in_doubt_can_be_resolved,
            a_failed_side_effect_is_released_abandoned_or_in_doubt_as_its_error_says,
            a_reused_id_with_another_payload_is_refused_and_claims_nothing_more,
            a_claim_inside_a_transaction_is_refused_and_claims_nothing,
            the_completion_commits_with_its_record_writes_or_leaves_the_claim_in_doubt,
            a_long_side_effect_extends_its_lease_and_keeps_other_deliveries_out,
            a_held_claim_completes_with_its_records_in_one_transaction,
            an_enqueued_event_commits_with_the_business_writes_or_not_at_all,
            a_follow_up_event_enqueued_in_an_inbox_effect_is_enqueued_once_per_event,
            the_relay_publishes_in_order_per_aggregate_and_marks_rows_published,
            a_failing_publish_is_retried_and_holds_back_only_its_own_aggregate,
            a_poison_row_is_failed_with_its_reason_and_the_rows_after_it_are_published,
            an_unknown_schema_version_is_dead_lettered_with_its_reason_and_never_runs,
            a_delivery_of_an_event_whose_inbox_row_is_corrupt_is_rejected_naming_the_row,
            a_corrupt_gap_is_listed_as_unreadable_between_its_readable_neighbours,
            a_corrupt_outbox_row_is_listed_as_unreadable_between_its_readable_neighbours,
            a_batch_with_a_corrupt_inbox_row_rejects_that_event_and_processes_the_others,
            a_corrupt_history_line_or_counter_is_named_and_hides_nothing,
            migrations_apply_on_a_fresh_database_and_again_idempotently,
            a_migration_lock_held_past_the_bound_is_a_typed_error_and_applies_nothing,
            a_database_migrated_by_diesel_inbox_0_1_is_taken_over_with_its_events,
            assert_idempotent_passes_a_handler_whose_effect_is_inside_the_inbox,
            assert_idempotent_catches_an_effect_written_outside_the_inbox_transaction,
            assert_idempotent_catches_a_handler_that_makes_up_a_new_id_per_delivery,
            inbox_assertions_show_the_recorded_row_when_they_fail,
            inbox_assertions_tell_a_dead_lettered_event_from_a_processed_one,
            failed_and_panicking_deliveries_leave_no_row_and_are_not_counted,
            random_schedules_with_failures_take_effect_once_per_distinct_event,
            run_schedule_catches_an_effect_that_outlives_a_failed_delivery,
            a_reward_in_an_orphaned_block_re_included_by_its_replacement_is_credited_once,
            each_re_applied_event_is_credited_to_the_reorg_that_reverted_it_however_late,
            a_fork_reaching_the_finalized_height_is_refused_and_commits_nothing,
            a_block_forking_below_its_parent_rewinds_to_the_ancestor_its_branch_names,
            final_blocks_only_waits_for_finality_and_refuses_every_fork,
            a_replay_into_an_isolated_target_rebuilds_the_projection_and_its_reconciliation_accepts_it,
            a_target_changed_on_purpose_is_rejected_naming_what_differs,
            a_replay_into_the_live_consumer_finds_only_duplicates_and_runs_no_effect,
            the_ranges_end_holds_while_new_events_keep_arriving,
            a_schema_version_outside_the_plans_interpretation_is_skipped_and_named,
            a_failing_event_is_counted_and_named_and_the_replay_goes_on,
            an_enqueue_and_a_later_claim_suppressed_for_each_event_merge_into_its_one_note_in_one_run,
            random_chains_with_reorgs_settle_to_one_effect_per_canonical_event,
        );
    };
    (@each $test:ident, $flavour:ty; $($scenario:ident),+ $(,)?) => {
        $($test!($scenario, $flavour);)+
    };
}

/// A test of the blocking flavour: the scenario's futures are ready when made.
macro_rules! blocking_test {
    ($scenario:ident, $flavour:ty) => {
        #[test]
        fn $scenario() {
            $crate::support::block_on($crate::scenarios::$scenario::<$flavour>());
        }
    };
}

/// Generates one `#[test]` per scenario for the backend `$backend`: the sync API's own, and
/// those written once over both flavours, on the blocking one.
macro_rules! backend_tests {
    ($backend:ty) => {
        flavour_tests!(blocking_test, $crate::support::Blocking<$backend>);
        backend_tests!(@in scenarios, $backend;
            duplicates_on_different_connections_run_the_effect_once,
            concurrent_overlapping_deliveries_take_effect_once_per_id,
            handler_panic_on_a_pooled_connection_returns_it_to_the_pool_clean,
            a_duplicate_relaxes_durability_for_its_own_transaction_only,
            replicas_starting_together_all_migrate_and_the_schema_is_applied_once,
            concurrent_failures_of_one_event_count_correctly,
            concurrent_overlapping_batches_take_effect_once_per_id,
            delivering_one_event_from_many_threads_at_once_takes_effect_once,
            proptest_schedules_take_effect_once_per_distinct_event,
            diesels_harness_runs_and_reverts_all_app_migrations_beside_the_embedded_inbox,
            installed_inbox_migrations_run_and_revert_with_the_apps_own,
            installing_the_migrations_into_a_file_is_a_typed_error_and_writes_nothing,
            a_handler_deadlock_with_max_attempts_1_ends_processed,
            a_replay_killed_mid_run_resumes_and_processes_no_event_twice,
            two_runners_at_once_one_makes_progress_and_the_other_is_held_or_fenced,
            a_claim_inside_a_replayed_handler_makes_no_external_call_and_enqueues_are_dropped,
            the_outbox_prune_keeps_what_an_open_replay_reads_and_decided_replays_have_their_own_retention,
            a_replays_decisions_follow_its_lifecycle_and_are_audited,
            handler_contention_in_its_own_error_type_is_retried_and_never_counted,
            a_prune_racing_live_deliveries_and_redeliveries_doubles_and_loses_nothing,
            a_second_concurrent_prune_is_told_another_is_running,
            a_prune_lease_held_elsewhere_stops_a_prune_on_postgres_and_galera_only,
            pruning_removes_settled_claims_older_than_the_window_and_keeps_open_ones,
            two_instances_racing_on_one_stream_take_effect_once_per_sequence,
            a_sequence_redelivered_after_a_crash_between_commit_and_ack_is_a_duplicate,
            a_sequence_redelivered_after_a_crash_inside_its_transaction_is_processed_once,
            proptest_delivery_orders_take_effect_once_and_leave_open_exactly_the_missing_sequences,
            concurrent_deliveries_run_the_side_effect_once_and_the_others_see_it_in_progress,
            a_crash_after_the_claim_before_the_side_effect_is_in_doubt_or_rerun_and_never_doubled,
            a_crash_after_the_side_effect_before_the_completion_is_in_doubt_or_rerun_once_downstream,
            concurrent_relays_publish_every_row_once_in_order_per_aggregate,
            a_relay_outliving_its_lease_is_taken_over_and_its_marks_are_fenced,
            two_producers_of_one_aggregate_in_two_processes_publish_in_enqueue_order,
            a_corrupt_claim_is_listed_as_unreadable_between_its_readable_neighbours,
            a_handler_generic_over_the_connection_runs_its_query_once_per_event,
            a_side_effect_claimed_for_an_orphaned_event_is_listed_for_ops,
            a_crash_in_the_middle_of_a_reorgs_undo_leaves_the_old_branch_and_the_redelivery_finishes_it,
        );
        #[cfg(feature = "tokio")]
        backend_tests!(@in scenarios, $backend;
            an_r2d2_pool_runs_deliveries_and_the_relay_from_an_async_service,
        );
        #[cfg(feature = "deadpool")]
        backend_tests!(@in scenarios, $backend;
            a_deadpool_diesel_pool_runs_deliveries_and_the_relay_from_an_async_service,
        );
        #[cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        backend_tests!(@in scenarios, $backend;
            a_multi_connection_app_takes_effect_once_writing_through_its_own_enum,
        );
        #[cfg(feature = "anyhow")]
        backend_tests!(@in scenarios, $backend;
            an_anyhow_handler_meeting_a_deadlock_under_context_is_retried_and_never_counted,
            an_anyhow_handler_takes_effect_once_and_its_failures_keep_their_kind,
        );
        #[cfg(feature = "eyre")]
        backend_tests!(@in scenarios, $backend;
            an_eyre_handler_meeting_a_deadlock_under_context_is_retried_and_never_counted,
        );
        // Against the JetStream server too.
        backend_tests!(@in scenarios, $backend;
            a_relay_killed_at_random_points_loses_no_event_and_keeps_order_per_aggregate,
        );
    };
    // One test per scenario of the test binary's module `$module`.
    (@in $module:ident, $backend:ty; $($scenario:ident),+ $(,)?) => {
        $(
            #[test]
            fn $scenario() {
                $crate::$module::$scenario::<$backend>();
            }
        )+
    };
}

pub fn effect<C: EffectConn>(event_id: &str) -> impl FnMut(&mut C) -> QueryResult<()> + '_ {
    move |tx| tx.write_effect(event_id)
}

/// [`effect`] for a scenario written once over both flavours: a handler writing its row
/// through [`Tx`].
pub fn writes<F: Flavour>(event_id: &str) -> impl Handle<F, (), diesel::result::Error> + '_ {
    async move |tx: &mut F::Conn| tx.write_effect(event_id).await
}

pub async fn duplicate_delivery_runs_the_effect_once<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let before = chrono::Utc::now();

    let first = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    let second = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    let third = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;

    assert_eq!(first.unwrap(), Outcome::Processed(()));
    let second = second
        .unwrap()
        .duplicate()
        .expect("second delivery is a duplicate")
        .clone();
    let third = third
        .unwrap()
        .duplicate()
        .expect("third delivery is a duplicate")
        .clone();
    assert_eq!(
        (second.deliveries(), third.deliveries()),
        (Some(2), Some(3))
    );
    assert_eq!(second.processed_at(), third.processed_at());
    let skew = chrono::Duration::seconds(5);
    let processed_at = second
        .processed_at()
        .expect("an event id's record keeps its time");
    assert!(processed_at >= before - skew && processed_at <= chrono::Utc::now() + skew);
    assert_eq!(check.effect_count(), 1);
    assert_eq!(check.inbox_rows(), 1);
    assert_eq!(F::depth(&mut conn), 0);
    let stats = F::stats(&Inbox::default(), &mut conn, Duration::from_secs(3600)).await;
    let stats = stats.unwrap();
    assert_eq!((stats.totals.processed, stats.recent.duplicates), (1, 2));
}

pub fn duplicates_on_different_connections_run_the_effect_once<B: Backend>() {
    let (db, mut first) = setup::<B>();
    let mut second = db.connect();
    let pool = db.pool(1);

    assert!(with_inbox(&mut first, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    assert!(with_inbox(&mut second, "evt-1", effect("evt-1"))
        .unwrap()
        .is_duplicate());
    let mut pooled = pool.get().unwrap();
    let third = with_inbox(&mut pooled, "evt-1", effect("evt-1")).unwrap();

    assert_eq!(
        third
            .duplicate()
            .and_then(diesel_inbox::Duplicate::deliveries),
        Some(3)
    );
    assert_eq!(first.effect_count(), 1);
}

/// Several threads, each on its own pooled connection, deliver overlapping ids in different
/// orders, each id several times, all at once.
pub fn deliver_concurrently<B: Backend>(configure: fn(&mut B::Conn)) {
    const THREADS: usize = 6;
    const IDS: usize = 40;
    const COPIES: usize = 2;
    let (db, mut conn) = setup::<B>();

    let processed = concurrently(&db, THREADS, |t, conn| {
        configure(conn);
        let mut order: Vec<usize> = (0..IDS).flat_map(|i| [i; COPIES]).collect();
        fastrand::Rng::with_seed(t as u64).shuffle(&mut order);
        let mut processed = Vec::new();
        for i in order {
            let id = format!("evt-{i}");
            let outcome = with_inbox(conn, id.as_str(), effect(&id))
                .unwrap_or_else(|e| panic!("delivery of {id} failed: {e}"));
            if outcome.is_processed() {
                processed.push(i);
            }
        }
        processed
    });
    let mut processed: Vec<usize> = processed.into_iter().flatten().collect();
    processed.sort_unstable();
    assert_eq!(
        processed,
        (0..IDS).collect::<Vec<_>>(),
        "each id processed exactly once"
    );
    assert_eq!(conn.effect_count(), IDS);
    assert_eq!(conn.inbox_rows(), IDS);
    assert_eq!(conn.total_deliveries(), THREADS * IDS * COPIES);
}

pub fn concurrent_overlapping_deliveries_take_effect_once_per_id<B: Backend>() {
    deliver_concurrently::<B>(|_| {});
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum HandlerError {
    #[error("handler refused")]
    Refused,
    #[error(transparent)]
    Inbox(#[from] DisplayedError),
}

/// `diesel_inbox::Error` is not `PartialEq`; the scenarios compare its text.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct DisplayedError(String);

impl From<Error> for HandlerError {
    fn from(e: Error) -> Self {
        HandlerError::Inbox(DisplayedError(e.to_string()))
    }
}

impl From<diesel_inbox::AdminError> for HandlerError {
    fn from(e: diesel_inbox::AdminError) -> Self {
        HandlerError::Inbox(DisplayedError(e.to_string()))
    }
}

/// Every failure counted, the default.
impl diesel_inbox::HandlerError for HandlerError {}

pub async fn handler_error_leaves_no_effect_and_no_row_and_redelivery_processes_it<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;

    let failed = F::with_inbox(&mut conn, "evt-1", async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await.unwrap();
        Err::<(), _>(HandlerError::Refused)
    })
    .await;

    assert_eq!(
        failed,
        Err(HandlerError::Refused),
        "the handler's own error, unchanged"
    );
    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
    assert_eq!(check.effect_count(), 1);
}

fn panic_inside_inbox<C: EffectConn>(conn: &mut C) {
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = with_inbox(conn, "evt-1", |tx| -> QueryResult<()> {
            tx.write_effect("evt-1").unwrap();
            panic!("handler bug");
        });
    }));
    let message = caught.expect_err("the panic continues past the inbox");
    assert_eq!(message.downcast_ref::<&str>(), Some(&"handler bug"));
}

pub async fn handler_panic_leaves_no_effect_no_open_transaction_and_a_failure_record<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;

    let delivery = F::with_inbox(&mut conn, "evt-1", async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await.unwrap();
        panic!("handler bug");
        #[allow(unreachable_code)]
        QueryResult::Ok(())
    });
    let caught = AssertUnwindSafe(delivery).catch_unwind().await;

    let message = caught.expect_err("the panic continues past the inbox");
    assert_eq!(message.downcast_ref::<&str>(), Some(&"handler bug"));
    assert_eq!(F::depth(&mut conn), 0);
    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let record = F::show(&Inbox::default(), &mut conn, "evt-1")
        .await
        .expect("the panic is recorded as a failed attempt");
    assert_eq!(
        (record.attempts, record.last_error.as_str()),
        (1, "handler panicked: handler bug")
    );
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
    assert_eq!(check.effect_count(), 1);
}

pub fn handler_panic_on_a_pooled_connection_returns_it_to_the_pool_clean<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let pool = db.pool(1);
    let mut pooled = pool.get().unwrap();
    // A temporary table lives as long as its connection: it tells a reused one from a new one.
    pooled
        .batch_execute("CREATE TEMPORARY TABLE marker (x INT)")
        .unwrap();

    panic_inside_inbox(&mut pooled);
    drop(pooled);

    let mut pooled = pool.get().expect("the pool's only connection came back");
    assert_eq!(transaction_depth(&mut pooled), 0);
    assert!(
        pooled.batch_execute("SELECT x FROM marker").is_ok(),
        "the pool replaced the connection instead of reusing it"
    );
    assert_eq!((conn.effect_count(), conn.inbox_rows()), (0, 0));
    assert!(with_inbox(&mut pooled, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
}

pub async fn two_consumers_each_process_the_same_event_once<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let (billing, audit) = (Inbox::new("billing").unwrap(), Inbox::new("audit").unwrap());

    for _ in 0..2 {
        for inbox in [&billing, &audit] {
            let _ = F::process(inbox, &mut conn, "evt-1", writes("evt-1"))
                .await
                .unwrap();
        }
    }

    assert_eq!(check.effect_count(), 2);
    assert_eq!(check.inbox_rows(), 2);
    let again = F::process(&billing, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(again.unwrap().is_duplicate());
}

pub async fn nested_in_a_rolled_back_transaction_a_later_delivery_processes_it<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;

    F::begin(&mut conn).await;
    let nested = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(nested.unwrap().is_processed());
    assert_eq!(F::depth(&mut conn), 1, "its savepoint released");
    F::end(&mut conn, false).await;

    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
    assert_eq!(check.effect_count(), 1);
}

pub async fn nested_in_a_committed_transaction_the_event_stays_processed<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;

    F::begin(&mut conn).await;
    let nested = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(nested.unwrap().is_processed());
    // A failing nested delivery rolls back its savepoint only.
    let refuse = async |_: &mut F::Conn| Err::<(), _>(HandlerError::Refused);
    let failed = F::with_inbox(&mut conn, "evt-2", refuse).await;
    assert_eq!(failed, Err(HandlerError::Refused));
    assert_eq!(F::depth(&mut conn), 1);
    F::end(&mut conn, true).await;

    let again = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(again.unwrap().is_duplicate());
    let second = F::with_inbox(&mut conn, "evt-2", writes("evt-2")).await;
    assert!(second.unwrap().is_processed());
    assert_eq!(check.effect_count(), 2);
}

pub async fn invalid_ids_are_rejected_before_any_sql<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let too_long = "x".repeat(256);
    let cases = [
        ("", InvalidEventId::Empty),
        (too_long.as_str(), InvalidEventId::TooLong { len: 256 }),
        ("a\0b", InvalidEventId::ContainsNul { index: 1 }),
    ];
    let log = F::log(&mut conn);

    for (id, expected) in cases {
        let ran = AtomicBool::new(false);
        let result = F::with_inbox(&mut conn, id, async |_: &mut F::Conn| {
            ran.store(true, Ordering::Relaxed);
            Ok::<_, Error>(())
        })
        .await;
        match result {
            Err(Error::InvalidEventId(got)) => assert_eq!(got, expected),
            other => panic!("{id:?} was not rejected as invalid: {other:?}"),
        }
        assert!(!ran.into_inner(), "the effect must not run for {id:?}");
        let sent = log.take();
        assert!(sent.is_empty(), "{id:?} sent {sent:?}");
    }
    assert_eq!(check.inbox_rows(), 0);
    let longest = F::with_inbox(&mut conn, "x".repeat(255), writes("long")).await;
    assert!(longest.unwrap().is_processed());
}

pub async fn ids_differing_by_case_accents_spaces_or_normal_form_stay_distinct<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = [
        "order-1",
        "Order-1",
        "ORDER-1",
        "order-1 ",
        "order-1  ",
        " order-1",
        "cafe",
        "café",
        "cafe\u{301}",
        "CAFÉ",
        "strasse",
        "straße",
        "STRASSE",
        "ﬁle",
        "file",
        "Ａ",
        "A",
        "a",
    ];

    for id in ids {
        let outcome = F::with_inbox(&mut conn, id, writes(id)).await.unwrap();
        assert!(
            outcome.is_processed(),
            "{id:?} was taken for a duplicate of another id"
        );
    }
    for id in ids {
        let again = F::with_inbox(&mut conn, id, writes(id)).await.unwrap();
        assert!(again.is_duplicate(), "{id:?}");
    }
    assert_eq!(check.effect_count(), ids.len());
    assert_eq!(check.inbox_rows(), ids.len());
}

/// A consumer that expects duplicates sends none an insert the unique key refuses (on
/// PostgreSQL a duplicate's first transaction is otherwise rolled back), and its deliveries
/// still take effect once.
pub async fn a_consumer_expecting_duplicates_sends_no_insert_the_key_refuses<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default().expect_duplicates(true);
    let log = F::log(&mut conn);

    let first = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(first.unwrap().is_processed());
    let processed = log.take();
    let again = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(again.unwrap().is_duplicate());
    let duplicate = log.take();

    assert!(
        !duplicate.iter().any(|sent| sent.starts_with("ROLLBACK")),
        "{duplicate:#?}"
    );
    // At most the one message more that a new event's upsert costs on PostgreSQL.
    assert!(
        processed.len() <= F::Backend::PROCESSED_PATH.len() + 1,
        "{processed:#?}"
    );
    assert_eq!(check.effect_count(), 1);
    assert_eq!(check.inbox_rows(), 1);
}

/// PostgreSQL's insert travels with the `BEGIN` as text: no id, whatever it holds, changes
/// the statement, and each is stored byte for byte.
pub async fn ids_holding_quotes_backslashes_or_sql_are_stored_as_they_are<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ids = [
        "o'k",
        "''",
        "\\'",
        "x'); DROP TABLE diesel_inbox_events; --",
        "$$; COMMIT; $$",
        "\"double\"",
        "tab\tnew\nline",
        "rocket 🚀",
    ];

    for (n, id) in ids.into_iter().enumerate() {
        // The effect's own row is named apart: the async flavour's test effect writes it as text.
        let effect = format!("odd-{n}");
        let outcome = F::with_inbox(&mut conn, id, writes(&effect)).await.unwrap();
        assert!(outcome.is_processed(), "{id:?}");
        let again = F::with_inbox(&mut conn, id, writes(&effect)).await.unwrap();
        assert!(again.is_duplicate(), "{id:?}");
        assert!(
            check.has_inbox_row(diesel_inbox::DEFAULT_CONSUMER, id),
            "{id:?}"
        );
    }
    assert_eq!(check.effect_rows().len(), ids.len());
    assert_eq!(check.inbox_rows(), ids.len());
}

pub async fn a_swallowed_statement_error_is_reported_as_processed_only_if_the_transaction_survives<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let ending = <F::Backend as Backend>::transaction_ending_statement(&mut check);
    let failing = ending.unwrap_or("INSERT INTO no_such_table VALUES (1)");

    let result = F::with_inbox(&mut conn, "evt-1", async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await?;
        let swallowed = tx.execute(failing).await;
        assert!(swallowed.is_err(), "{failing} must fail");
        QueryResult::Ok(())
    })
    .await;

    assert_eq!(F::depth(&mut conn), 0);
    if ending.is_some() {
        // PostgreSQL would turn COMMIT into a silent ROLLBACK, and SQLite has rolled back
        // already; the inbox must say so.
        let error = result.expect_err("reported as processed");
        assert!(
            matches!(
                Error::from_diesel(&error),
                Some(Error::TransactionAborted { .. })
            ),
            "{error:?}"
        );
        assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
        let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
        assert!(redelivered.unwrap().is_processed());
    } else {
        // MySQL/MariaDB undo only the failed statement: the effect and the inbox row commit,
        // and what the database commits, the inbox reports.
        assert_eq!(result, Ok(Outcome::Processed(())));
        assert_eq!((check.effect_count(), check.inbox_rows()), (1, 1));
    }
}

pub async fn a_transaction_ended_behind_the_inbox_is_not_reported_as_processed<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::default().retry(RetryPolicy::none());

    // What a deadlock does on MySQL, or an I/O error on SQLite: the database rolls back the
    // whole transaction, and the handler carries on outside it.
    let result = F::process(&inbox, &mut conn, "evt-1", async |tx: &mut F::Conn| {
        tx.execute("ROLLBACK").await?;
        Ok::<_, Error>(())
    })
    .await;

    if <F::Backend as Backend>::DEADLOCK_ENDS_TRANSACTION {
        // Contention: retried, and here with no retries left, reported as such.
        assert!(
            matches!(result, Err(Error::RetriesExhausted { attempts: 1, .. })),
            "{result:?}"
        );
    } else {
        assert!(
            matches!(result, Err(Error::TransactionAborted { .. })),
            "{result:?}"
        );
    }
    assert_eq!(F::depth(&mut conn), 0);
    assert_eq!(check.inbox_rows(), 0);
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
    assert_eq!(check.inbox_rows(), 1);
}

/// A second connection that has processed `event_id` inside a transaction it has not ended,
/// so the inbox row stays locked (on SQLite: the whole database) until it commits or rolls back.
struct LockHolder {
    end: mpsc::Sender<bool>,
    thread: thread::JoinHandle<()>,
}

impl LockHolder {
    fn hold<C: TestConn>(mut holder: C, event_id: &'static str) -> Self {
        let (locked, is_locked) = mpsc::channel();
        let (end, commit) = mpsc::channel::<bool>();
        let thread = thread::spawn(move || {
            let _ = holder.transaction(|tx| {
                assert!(with_inbox(tx, event_id, effect(event_id))?.is_processed());
                locked.send(()).unwrap();
                if commit.recv().unwrap() {
                    Ok(())
                } else {
                    Err(diesel::result::Error::RollbackTransaction)
                }
            });
        });
        is_locked.recv().expect("the holder took the lock");
        Self { end, thread }
    }

    fn end(self, commit: bool) {
        self.end.send(commit).unwrap();
        self.thread.join().unwrap();
    }
}

pub async fn contention_that_clears_is_retried_and_never_reaches_the_caller<F: Flavour>() {
    let (db, mut check, mut conn) = setup_flavour::<F>().await;
    let holder = LockHolder::hold(db.connect(), "evt-1");
    conn.execute(<F::Backend as Backend>::FAIL_FAST_ON_LOCKS)
        .await
        .unwrap();

    // Past the first attempt's lock wait: only a retry can see the holder's commit.
    let wait = <F::Backend as Backend>::LOCK_WAIT + Duration::from_millis(500);
    let releaser = thread::spawn(move || {
        thread::sleep(wait);
        holder.end(true);
    });
    let inbox = Inbox::default().retry(
        RetryPolicy::default()
            .max_retries(50)
            .base_delay(Duration::from_millis(20))
            .max_delay(Duration::from_millis(100)),
    );
    let outcome = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    releaser.join().unwrap();

    assert!(
        outcome.unwrap().is_duplicate(),
        "the holder's commit processed it first"
    );
    assert_eq!(check.effect_count(), 1);
}

pub async fn contention_outlasting_the_retries_is_reported_and_commits_nothing<F: Flavour>() {
    let (db, mut check, mut conn) = setup_flavour::<F>().await;
    let holder = LockHolder::hold(db.connect(), "evt-1");
    conn.execute(<F::Backend as Backend>::FAIL_FAST_ON_LOCKS)
        .await
        .unwrap();

    let inbox = Inbox::default().retry(RetryPolicy::default().max_retries(2));
    let result = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;

    match result {
        Err(diesel::result::Error::QueryBuilderError(_)) | Ok(_) => {
            panic!("expected the contention error itself, got {result:?}")
        }
        Err(_) => {}
    }
    let typed = F::process(&inbox, &mut conn, "evt-1", async |tx: &mut F::Conn| {
        tx.write_effect("evt-1").await.map_err(Error::from)
    })
    .await;
    assert!(
        matches!(typed, Err(Error::RetriesExhausted { attempts: 3, .. })),
        "{typed:?}"
    );
    assert_eq!(F::depth(&mut conn), 0);
    holder.end(false);
    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
}

pub fn a_duplicate_relaxes_durability_for_its_own_transaction_only<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let session_setting = B::commit_durability(&mut conn);
    assert!(with_inbox(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    let log = StatementLog::install(&mut conn);

    assert!(with_inbox(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_duplicate());

    let sent = log.take();
    let relaxed_at = sent.iter().position(|s| s.contains("synchronous_commit"));
    if session_setting.is_some() {
        // PostgreSQL: switched off inside the duplicate's transaction, before its COMMIT.
        let relaxed_at = relaxed_at.unwrap_or_else(|| panic!("not relaxed: {sent:?}"));
        assert!(
            sent.first().is_some_and(|s| s.starts_with("BEGIN")),
            "{sent:?}"
        );
        assert!(
            sent.last().is_some_and(|s| s.ends_with("COMMIT")),
            "{sent:?}"
        );
        assert!(relaxed_at < sent.len() - 1, "{sent:?}");
    } else {
        assert_eq!(
            relaxed_at, None,
            "this backend has no per-transaction switch: {sent:?}"
        );
    }
    assert_eq!(
        B::commit_durability(&mut conn),
        session_setting,
        "the session keeps its setting"
    );
    conn.transaction(|tx| {
        assert!(with_inbox(tx, "evt-1", effect("evt-1"))?.is_duplicate());
        assert_eq!(
            B::commit_durability(tx),
            session_setting,
            "the caller's transaction keeps it too"
        );
        QueryResult::Ok(())
    })
    .unwrap();
}

/// A result whose serialization panics: a bug outside the effect, still inside the transaction.
struct Explosive;

impl serde::Serialize for Explosive {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("cannot serialize")
    }
}

pub async fn a_panic_while_storing_the_result_leaves_no_transaction_open<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;

    let inbox = Inbox::default();
    let delivery =
        F::process_storing_result(&inbox, &mut conn, "evt-1", async |tx: &mut F::Conn| {
            tx.write_effect("evt-1").await?;
            QueryResult::Ok(Explosive)
        });
    let caught = AssertUnwindSafe(delivery).catch_unwind().await;

    assert!(caught.is_err(), "the panic continues");
    assert_eq!(F::depth(&mut conn), 0);
    assert_eq!((check.effect_count(), check.inbox_rows()), (0, 0));
    let redelivered = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(redelivered.unwrap().is_processed());
}

pub async fn uuid_and_string_forms_of_one_id_are_one_event<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let id = uuid::Uuid::from_u128(0x67e5_5044_10b1_426f_9247_bb68_0e5f_e0c8);

    let first = F::with_inbox(&mut conn, id, writes("uuid")).await;
    assert!(first.unwrap().is_processed());
    let as_text = "67e55044-10b1-426f-9247-bb680e5fe0c8".to_owned();
    let same = F::with_inbox(&mut conn, as_text.clone(), writes("uuid")).await;
    assert!(same.unwrap().is_duplicate());
    let upper = F::with_inbox(&mut conn, as_text.to_uppercase(), writes("uuid")).await;
    assert!(upper.unwrap().is_processed());
}

pub async fn each_delivery_path_sends_only_the_statements_it_needs<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let log = F::log(&mut conn);

    let first = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(first.unwrap().is_processed());
    let processed = log.take();
    let again = F::with_inbox(&mut conn, "evt-1", writes("evt-1")).await;
    assert!(again.unwrap().is_duplicate());
    let duplicate = log.take();
    // A cursor's in-order path: its second sequence finds the cursor row and advances it.
    let cursor = Inbox::default().cursor("pinned").unwrap();
    let mut in_order = Vec::new();
    for sequence in 1..=2_u64 {
        let label = format!("seq-{sequence}");
        let apply = async |tx: &mut F::Conn| tx.write_effect(&label).await.map_err(Error::from);
        let outcome = F::advance(&cursor, &mut conn, sequence, apply).await;
        assert!(outcome.unwrap().is_processed());
        in_order = log.take();
    }
    let kept = log.take_kept();

    // Every prepared statement (Diesel's log shows its binds) stays prepared: Diesel prepares
    // an `UPDATE` or an upsert anew each time unless told it may keep it, a round trip more.
    // Behind a pooler the test support turns Diesel's cache off: nothing stays prepared.
    let cached = !diesel_inbox_test::behind_pooler();
    for statement in processed.iter().chain(&duplicate).chain(&in_order) {
        if let Some((sql, _binds)) = statement.split_once(" -- binds: ").filter(|_| cached) {
            assert!(
                kept.iter().any(|k| k == sql),
                "prepared anew each time: {sql}\n{kept:#?}"
            );
        }
    }
    for (path, sent, expected) in [
        ("processed", processed, F::Backend::PROCESSED_PATH),
        ("duplicate", duplicate, F::Backend::DUPLICATE_PATH),
        ("cursor, in order", in_order, F::Backend::CURSOR_PATH),
    ] {
        let sent: Vec<String> = sent.iter().map(|s| s.replace(['"', '`'], "")).collect();
        assert_eq!(sent.len(), expected.len(), "{path}: {sent:#?}");
        for (statement, start) in sent.iter().zip(expected) {
            assert!(
                statement.starts_with(start),
                "{path}: expected {start:?}, sent {statement:?}"
            );
        }
    }
}
