//! Stats per consumer: totals from the tables, a recent window from the index and the hourly
//! counters, on every backend.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_inbox::{retention::Counts, Audit, Delivery, Error, Inbox};

use super::{refuse, writes, HandlerError};
use crate::support::{setup_flavour, Flavour, TestConn, Tx};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// `[processed, duplicates, payload_conflicts, failed_attempts, dead_lettered, discarded]`:
/// `Counts` is non-exhaustive, so a test outside the crate compares its fields.
fn counts(c: Counts) -> [u64; 6] {
    [
        c.processed,
        c.duplicates,
        c.payload_conflicts,
        c.failed_attempts,
        c.dead_lettered,
        c.discarded,
    ]
}

fn json(event_id: &str, n: i64) -> Delivery {
    Delivery::new(event_id)
        .unwrap()
        .json(serde_json::json!({ "n": n }))
}

pub async fn stats_count_processed_duplicates_conflicts_failures_and_dead_letters<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("stats").unwrap().max_attempts(2);
    let ops = Audit::new("ops", "a bad event").unwrap();

    // A failure that a later delivery resolves: counted as an attempt, not as unresolved.
    let failed = F::process(&inbox, &mut conn, "evt-0", refuse::<F>()).await;
    assert!(failed.is_err());
    let healed = F::process(&inbox, &mut conn, "evt-0", writes("evt-0")).await;
    assert!(healed.unwrap().is_processed());
    for (i, id) in ["evt-1", "evt-2", "evt-3"].into_iter().enumerate() {
        let delivery = json(id, i64::try_from(i).unwrap());
        let first = F::process(&inbox, &mut conn, &delivery, writes(id)).await;
        assert!(first.unwrap().is_processed());
    }
    for (id, n) in [("evt-1", 0), ("evt-2", 1)] {
        let again = F::process(&inbox, &mut conn, json(id, n), writes(id)).await;
        assert!(again.unwrap().is_duplicate());
    }
    let typed = async |tx: &mut F::Conn| tx.write_effect("evt-3").await.map_err(Error::from);
    let conflict = F::process(&inbox, &mut conn, json("evt-3", 99), typed).await;
    assert!(
        matches!(conflict, Err(Error::PayloadMismatch { .. })),
        "{conflict:?}"
    );
    for id in ["evt-4", "evt-5"] {
        let first = F::process(&inbox, &mut conn, id, refuse::<F>()).await;
        assert_eq!(first, Err(HandlerError::Refused));
        let second = F::process(&inbox, &mut conn, id, refuse::<F>()).await;
        assert!(second.unwrap().is_dead_lettered());
    }
    F::discard(&inbox, &mut conn, "evt-5", &ops).await.unwrap();

    let stats = F::stats(&inbox, &mut conn, DAY).await.unwrap();
    assert_eq!(stats.consumer, "stats");
    // processed, duplicates, payload conflicts, failed attempts, dead letters, discarded
    assert_eq!(counts(stats.totals), [4, 2, 1, 5, 1, 1], "{stats:?}");
    // Recent dead letters are the events dead-lettered in the window, discarded or not.
    assert_eq!(counts(stats.recent), [4, 2, 1, 5, 2, 1], "{stats:?}");
    let evt_4 = F::show(&inbox, &mut conn, "evt-4").await.unwrap();
    assert_eq!(stats.oldest_unresolved_failure, Some(evt_4.first_failed_at));
    let skew = chrono::Duration::seconds(60);
    let expected_since = chrono::Utc::now() - chrono::Duration::days(1);
    assert!(
        (stats.recent_since - expected_since).abs() < skew,
        "{stats:?}"
    );

    // A conflicting delivery is a conflict, not one more delivery of the row: 2 + 2 + 1 for
    // evt-1..3, 1 for evt-0, 1 for each dead letter's held row.
    assert_eq!(check.payload_conflicts("evt-3"), 1);
    assert_eq!(check.total_deliveries(), 8);
    assert_eq!(check.effect_count(), 4);
}

/// Moves everything `consumer` has in the inbox table and the counters far into the past.
fn backdate<C: TestConn>(conn: &mut C, consumer: &str) {
    // Long enough ago in every time zone that no session setting matters.
    let past = "'2000-01-01 00:00:00'";
    conn.batch_execute(&format!(
        "UPDATE diesel_inbox_events SET processed_at = {past}, last_seen_at = {past} \
         WHERE consumer = '{consumer}';
         UPDATE diesel_inbox_counters SET bucket = {past} WHERE consumer = '{consumer}';"
    ))
    .unwrap();
}

pub async fn recent_counts_leave_out_what_happened_before_the_window<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("window").unwrap().max_attempts(1);

    // Before the window: one processed with a duplicate, one dead-lettered.
    let first = F::process(&inbox, &mut conn, "old-1", writes("old-1")).await;
    assert!(first.unwrap().is_processed());
    let again = F::process(&inbox, &mut conn, "old-1", writes("old-1")).await;
    assert!(again.unwrap().is_duplicate());
    let failed = F::process(&inbox, &mut conn, "old-2", refuse::<F>()).await;
    assert!(failed.unwrap().is_dead_lettered());
    backdate(&mut check, "window");
    // In the window: one processed with a duplicate.
    let first = F::process(&inbox, &mut conn, "new-1", writes("new-1")).await;
    assert!(first.unwrap().is_processed());
    let again = F::process(&inbox, &mut conn, "new-1", writes("new-1")).await;
    assert!(again.unwrap().is_duplicate());

    let stats = F::stats(&inbox, &mut conn, DAY).await.unwrap();
    assert_eq!(counts(stats.recent), [1, 1, 0, 0, 0, 0], "{stats:?}");
    assert_eq!(counts(stats.totals), [2, 2, 0, 1, 1, 0], "{stats:?}");
    let old_2 = F::show(&inbox, &mut conn, "old-2").await.unwrap();
    assert_eq!(stats.oldest_unresolved_failure, Some(old_2.first_failed_at));

    // A window reaching back past the backdated rows counts them again.
    let century = Duration::from_secs(100 * 365 * 86_400);
    let all_time = F::stats(&inbox, &mut conn, century).await.unwrap();
    assert_eq!(counts(all_time.recent), [2, 2, 0, 1, 1, 0], "{all_time:?}");
}

pub async fn stats_all_lists_every_consumer<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let orders = Inbox::new("b-orders").unwrap();
    let audit = Inbox::new("a-audit").unwrap();
    let payments = Inbox::new("c-payments").unwrap();

    let first = F::process(&orders, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(first.unwrap().is_processed());
    // Only a failure row and a counter: no inbox row.
    let failed = F::process(&audit, &mut conn, "evt-1", refuse::<F>()).await;
    assert_eq!(failed, Err(HandlerError::Refused));
    // Only counters left, once its rows are gone (as retention would prune them).
    let paid = F::process(&payments, &mut conn, "evt-2", writes("evt-2")).await;
    assert!(paid.unwrap().is_processed());
    let again = F::process(&payments, &mut conn, "evt-2", writes("evt-2")).await;
    assert!(again.unwrap().is_duplicate());
    check
        .batch_execute("DELETE FROM diesel_inbox_events WHERE consumer = 'c-payments'")
        .unwrap();

    let all = F::stats_all(&mut conn, DAY).await.unwrap();
    let names: Vec<_> = all.iter().map(|s| s.consumer.as_str()).collect();
    assert_eq!(names, ["a-audit", "b-orders", "c-payments"]);
    let by_name: Vec<_> = all
        .iter()
        .map(|s| (counts(s.totals), counts(s.recent)))
        .collect();
    assert_eq!(
        by_name,
        [
            ([0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 0, 0]),
            ([1, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]),
            ([0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0]),
        ]
    );
    assert!(all[0].oldest_unresolved_failure.is_some());
    let one = F::stats(&orders, &mut conn, DAY).await.unwrap();
    assert_eq!((one.totals, one.recent), (all[1].totals, all[1].recent));
    assert_eq!(all[1].oldest_unresolved_failure, None);
}
