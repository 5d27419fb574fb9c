//! Retention: pruning processed rows older than the redelivery window, on every backend.

use diesel_inbox::AdminError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use diesel::connection::SimpleConnection;
use diesel_inbox::{
    retention::{Pruned, Retention},
    Audit, Error, Inbox, Payload,
};

use super::{effect, refuse, writes};
use crate::support::{setup, setup_flavour, Backend, BackendOf, CheckConn, Flavour, TestConn, Tx};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

fn orders() -> Inbox {
    Inbox::new("orders").unwrap()
}

fn days_ago(days: i64) -> DateTime<Utc> {
    Utc::now() - TimeDelta::days(days)
}

/// Every kind of row retention meets, for the consumer "orders" (and one of "billing"):
/// old processed rows (one with failures behind it), a young one, old dead-lettered and
/// discarded rows, an old row redelivered lately, a retrying event, and counters. Delivered
/// on `conn`, backdated through `check`.
async fn rows_of_every_kind<F: Flavour>(conn: &mut F::Conn, check: &mut CheckConn<F>) {
    let inbox = orders();
    for id in ["old-done", "young", "old-redelivered"] {
        let done = F::process(&inbox, conn, id, writes(id)).await;
        assert!(done.unwrap().is_processed());
    }
    // Failed once, then took effect: its failure row and history are settled.
    let failed = F::process(&inbox, conn, "old-recovered", refuse::<F>()).await;
    assert!(failed.is_err());
    let recovered = F::process(&inbox, conn, "old-recovered", writes("old-recovered")).await;
    assert!(recovered.unwrap().is_processed());
    // Failing still: no inbox row.
    let failing = F::process(&inbox, conn, "retrying", refuse::<F>()).await;
    assert!(failing.is_err());
    let giving_up = orders().max_attempts(1);
    for id in ["old-dead", "old-discarded"] {
        let dead = F::process(&giving_up, conn, id, refuse::<F>()).await;
        assert!(dead.unwrap().is_dead_lettered());
    }
    let obsolete = Audit::new("ops", "obsolete").unwrap();
    F::discard(&inbox, conn, "old-discarded", &obsolete)
        .await
        .unwrap();
    let billing = Inbox::new("billing").unwrap();
    let billed = F::process(&billing, conn, "old-done", writes("billing")).await;
    assert!(billed.unwrap().is_processed());

    let old = days_ago(30);
    BackendOf::<F>::backdate(
        check,
        "orders",
        &["old-done", "old-recovered", "old-dead", "old-discarded"],
        old,
        old,
    );
    BackendOf::<F>::backdate(
        check,
        "orders",
        &["old-redelivered"],
        old,
        days_ago(1) + TimeDelta::hours(20),
    );
    BackendOf::<F>::backdate(check, "billing", &["old-done"], old, old);
    // Only the counters below: one old and one young hour of `orders`, one old of `billing`.
    check
        .batch_execute("DELETE FROM diesel_inbox_counters")
        .unwrap();
    BackendOf::<F>::insert_counter(check, "orders", days_ago(30));
    BackendOf::<F>::insert_counter(check, "orders", days_ago(1));
    BackendOf::<F>::insert_counter(check, "billing", days_ago(30));
}

pub async fn pruning_removes_only_processed_rows_older_than_the_window<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    rows_of_every_kind::<F>(&mut conn, &mut check).await;
    let inbox = orders();
    assert_eq!(check.failure_rows("orders", "old-recovered"), (1, 1));
    assert_eq!(check.failure_rows("orders", "retrying"), (1, 1));

    let week = Retention::older_than(7 * DAY);
    let pruned = F::prune(&inbox, &mut conn, &week).await.unwrap();

    assert_eq!(
        (
            pruned.events,
            pruned.failures,
            pruned.history,
            pruned.counters
        ),
        (2, 1, 1, 1),
        "{pruned:?}"
    );
    assert!(!pruned.dry_run);
    assert_eq!(pruned.batches, 1);
    for gone in ["old-done", "old-recovered"] {
        assert!(!check.has_inbox_row("orders", gone), "{gone} kept");
    }
    for kept in ["young", "old-redelivered", "old-dead", "old-discarded"] {
        assert!(check.has_inbox_row("orders", kept), "{kept} pruned");
    }
    assert!(
        check.has_inbox_row("billing", "old-done"),
        "another consumer's row"
    );
    assert_eq!(check.failure_rows("orders", "old-recovered"), (0, 0));
    assert_eq!(
        check.failure_rows("orders", "retrying"),
        (1, 1),
        "a retrying event keeps its failures"
    );
    assert_eq!(check.failure_rows("orders", "old-dead"), (1, 2));
    assert_eq!(
        (
            BackendOf::<F>::counters(&mut check, "orders"),
            BackendOf::<F>::counters(&mut check, "billing")
        ),
        (1, 1)
    );
    // Dead letters still hold their deliveries back.
    let held = F::process(&inbox, &mut conn, "old-dead", writes("old-dead")).await;
    assert!(held.unwrap().is_dead_lettered());
    let young = F::process(&inbox, &mut conn, "young", writes("young")).await;
    assert!(young.unwrap().is_duplicate());
    // The documented cost: a redelivery after the window runs the effect again.
    let late = F::process(&inbox, &mut conn, "old-done", writes("old-done")).await;
    assert!(late.unwrap().is_processed());
    assert_eq!(check.effects_of("old-done"), 2);
    let again = F::prune(&inbox, &mut conn, &week).await.unwrap();
    assert_eq!((again.events, again.batches, again.counters), (0, 0, 0));
}

/// The hand-written prune's double charge: an event that failed a month ago and was redriven
/// today is as young as its redrive, and keeps its row and its history for the window.
pub async fn a_redriven_event_is_kept_for_the_window_after_its_redrive<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(1);
    let dead = F::process(&inbox, &mut conn, "charge-1", refuse::<F>()).await;
    assert!(dead.unwrap().is_dead_lettered());
    <F::Backend as Backend>::backdate(
        &mut check,
        "orders",
        &["charge-1"],
        days_ago(30),
        days_ago(30),
    );
    let audit = Audit::new("ops", "card network back").unwrap();
    let charge = async |tx: &mut F::Conn, _: Option<&Payload>| tx.write_effect("charge-1").await;
    let redriven = F::redrive(&inbox, &mut conn, "charge-1", &audit, charge).await;
    assert!(redriven.unwrap().is_processed());

    let week = Retention::older_than(7 * DAY);
    let pruned = F::prune(&inbox, &mut conn, &week).await.unwrap();

    assert_eq!((pruned.events, pruned.failures, pruned.history), (0, 0, 0));
    let redelivered = F::process(&inbox, &mut conn, "charge-1", writes("charge-1")).await;
    assert!(redelivered.unwrap().is_duplicate());
    assert_eq!(check.effects_of("charge-1"), 1, "charged once");
    assert_eq!(check.failure_rows("orders", "charge-1"), (1, 3));
}

pub async fn a_window_below_the_declared_redelivery_window_is_refused_and_deletes_nothing<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    rows_of_every_kind::<F>(&mut conn, &mut check).await;
    let inbox = orders().redelivery_window(14 * DAY);
    let log = F::log(&mut conn);

    let refused = F::prune(&inbox, &mut conn, &Retention::older_than(7 * DAY)).await;

    match refused {
        Err(ref error @ AdminError::RetentionBelowWindow { older_than, window }) => {
            assert_eq!((older_than, window), (7 * DAY, 14 * DAY));
            let message = error.to_string();
            assert!(
                message.contains("redelivery window of 14 days")
                    && message.contains("run the effect again"),
                "{message}"
            );
        }
        other => panic!("expected RetentionBelowWindow, got {other:?}"),
    }
    let dry = Retention::older_than(DAY).dry_run(true);
    let dry = F::prune(&inbox, &mut conn, &dry).await;
    assert!(
        matches!(dry, Err(AdminError::RetentionBelowWindow { .. })),
        "{dry:?}"
    );
    assert_eq!(
        log.take(),
        Vec::<String>::new(),
        "no SQL before the refusal"
    );
    assert!(check.has_inbox_row("orders", "old-done"));
    assert_eq!(check.inbox_rows(), 7);
    // The default window is 7 days.
    let six_days = Retention::older_than(6 * DAY);
    let below_default = F::prune(&orders(), &mut conn, &six_days).await;
    assert!(
        matches!(below_default, Err(AdminError::RetentionBelowWindow { window, .. }) if window == 7 * DAY)
    );
    let two_weeks = Retention::older_than(14 * DAY);
    assert!(F::prune(&orders(), &mut conn, &two_weeks).await.is_ok());
}

pub async fn a_prune_inside_a_transaction_is_refused<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    rows_of_every_kind::<F>(&mut conn, &mut check).await;

    F::begin(&mut conn).await;
    let refused = F::prune(&orders(), &mut conn, &Retention::older_than(7 * DAY)).await;
    assert!(
        matches!(
            refused,
            Err(AdminError::Inbox(Error::InsideTransaction {
                operation: "Inbox::prune"
            }))
        ),
        "{refused:?}"
    );
    F::end(&mut conn, true).await;

    assert!(check.has_inbox_row("orders", "old-done"));
}

pub async fn a_dry_run_counts_what_a_prune_deletes_and_deletes_nothing<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    rows_of_every_kind::<F>(&mut conn, &mut check).await;
    let inbox = orders();
    let retention = Retention::older_than(7 * DAY);

    let dry = F::prune(&inbox, &mut conn, &retention.dry_run(true)).await;
    let dry = dry.unwrap();

    assert!(dry.dry_run);
    assert_eq!(
        (
            dry.events,
            dry.failures,
            dry.history,
            dry.counters,
            dry.batches
        ),
        (2, 1, 1, 1, 0),
        "{dry:?}"
    );
    assert_eq!(check.inbox_rows(), 7, "nothing deleted");
    assert_eq!(check.failure_rows("orders", "old-recovered"), (1, 1));
    assert_eq!(<F::Backend as Backend>::counters(&mut check, "orders"), 2);
    let real = F::prune(&inbox, &mut conn, &retention).await.unwrap();
    assert_eq!(
        (real.events, real.failures, real.history, real.counters),
        (dry.events, dry.failures, dry.history, dry.counters)
    );
}

/// Prefills old (pruned) and young (kept) rows in one statement each.
fn prefill<B: Backend>(conn: &mut B::Conn, old: usize, young: usize) {
    conn.batch_execute(&B::fill_sql("orders", "old-", old, days_ago(30)))
        .unwrap();
    if young > 0 {
        conn.batch_execute(&B::fill_sql(
            "orders",
            "young-",
            young,
            Utc::now() - TimeDelta::hours(1),
        ))
        .unwrap();
    }
}

pub fn a_prune_racing_live_deliveries_and_redeliveries_doubles_and_loses_nothing<B: Backend>() {
    const OLD: usize = 2_000;
    const YOUNG: usize = 500;
    const NEW_PER_THREAD: usize = 150;
    const DELIVERERS: usize = 2;
    let (db, mut conn) = setup::<B>();
    prefill::<B>(&mut conn, OLD, YOUNG);
    let inbox = orders();
    let pruning = AtomicBool::new(true);

    // Thread 0 prunes; 1..=DELIVERERS deliver new ids; the last redelivers the young ones.
    let results = crate::support::concurrently(&db, DELIVERERS + 2, |thread, conn| {
        if thread == 0 {
            let pruned = inbox
                .prune(conn, &Retention::older_than(7 * DAY).batch_size(50))
                .unwrap();
            pruning.store(false, Ordering::SeqCst);
            return (Some(pruned), 0, 0);
        }
        let (mut processed, mut duplicates) = (0, 0);
        if thread <= DELIVERERS {
            for i in 0..NEW_PER_THREAD {
                let id = format!("new-{thread}-{i}");
                let outcome = inbox.process(conn, id.as_str(), effect(&id)).unwrap();
                processed += usize::from(outcome.is_processed());
            }
        } else {
            // Round after round while the prune runs (at least one, at most 20).
            for round in 0..20 {
                for i in 1..=YOUNG {
                    let id = format!("young-{i}");
                    let outcome = inbox.process(conn, id.as_str(), effect(&id)).unwrap();
                    duplicates += usize::from(outcome.is_duplicate());
                }
                if round > 0 && !pruning.load(Ordering::SeqCst) {
                    break;
                }
            }
        }
        (None, processed, duplicates)
    });

    let pruned: Vec<Pruned> = results.iter().filter_map(|r| r.0.clone()).collect();
    let pruned = &pruned[0];
    let processed: usize = results.iter().map(|r| r.1).sum();
    let duplicates: usize = results.iter().map(|r| r.2).sum();
    assert_eq!(pruned.events, OLD as u64, "{pruned:?}");
    assert!(pruned.batches >= (OLD / 50) as u64, "{pruned:?}");
    assert_eq!(
        processed,
        DELIVERERS * NEW_PER_THREAD,
        "every new id took effect"
    );
    assert!(
        duplicates >= YOUNG && duplicates.is_multiple_of(YOUNG),
        "{duplicates}"
    );
    assert_eq!(
        conn.effect_count(),
        DELIVERERS * NEW_PER_THREAD,
        "no effect twice, none lost"
    );
    for thread in 1..=DELIVERERS {
        for i in 0..NEW_PER_THREAD {
            let id = format!("new-{thread}-{i}");
            assert_eq!(conn.effects_of(&id), 1, "{id}");
        }
    }
    assert_eq!(conn.inbox_rows_like("orders", "young-"), YOUNG);
    assert_eq!(
        conn.inbox_rows_like("orders", "new-"),
        DELIVERERS * NEW_PER_THREAD
    );
    assert_eq!(conn.inbox_rows_like("orders", "old-"), 0);
    println!(
        "racing prune: {} rows in {} batches, longest {:?}, {:?} in all, {duplicates} young redeliveries meanwhile",
        pruned.events, pruned.batches, pruned.longest_batch, pruned.elapsed
    );
}

pub fn a_second_concurrent_prune_is_told_another_is_running<B: Backend>() {
    const OLD: usize = 1_000;
    let (db, mut conn) = setup::<B>();
    prefill::<B>(&mut conn, OLD, 0);
    let inbox = orders();
    let retention = Retention::older_than(7 * DAY).batch_size(10);

    if let Some((lock, unlock)) = B::PRUNE_LOCK {
        // Another session holds the lock, as a running prune would.
        let mut holder = db.connect();
        holder.batch_execute(lock).unwrap();
        let refused = inbox.prune(&mut conn, &retention);
        assert!(
            matches!(refused, Err(AdminError::PruneRunning)),
            "{refused:?}"
        );
        assert_eq!(conn.inbox_rows(), OLD, "nothing deleted");
        let dry = inbox.prune(&mut conn, &retention.dry_run(true)).unwrap();
        assert_eq!(dry.events, OLD as u64, "a dry run takes no lock");
        holder.batch_execute(unlock).unwrap();
        // Released again after a prune, by error too: a second prune on another session runs.
        let pruned = inbox.prune(&mut conn, &retention).unwrap();
        assert_eq!(pruned.events, OLD as u64);
        holder.batch_execute(lock).unwrap();
        holder.batch_execute(unlock).unwrap();
    } else if B::PRUNE_HOLDS_LEASE {
        // PostgreSQL: the lease row is the lock (refused while held: the lease scenario).
        // Two prunes at once: one runs, the other runs after it or is told one is running,
        // and between them they delete every row once and leave no lease behind.
        let results =
            crate::support::concurrently(&db, 2, |_, conn| match inbox.prune(conn, &retention) {
                Ok(pruned) => pruned.events,
                Err(AdminError::PruneRunning) => 0,
                Err(error) => panic!("{error:?}"),
            });
        assert_eq!(results.iter().sum::<u64>(), OLD as u64, "{results:?}");
        assert_eq!(conn.inbox_rows(), 0);
        assert_eq!(B::prune_lease_holder(&mut conn), None, "ended");
    } else {
        // SQLite: no lock of its own; two prunes at once interleave their batches under the
        // writer lock, and between them delete every row once.
        let results =
            crate::support::concurrently(&db, 2, |_, conn| inbox.prune(conn, &retention).unwrap());
        let total: u64 = results.iter().map(|pruned| pruned.events).sum();
        assert_eq!(total, OLD as u64, "{results:?}");
        assert_eq!(conn.inbox_rows(), 0);
    }
}

pub fn a_prune_lease_held_elsewhere_stops_a_prune_on_postgres_and_galera_only<B: Backend>() {
    const OLD: usize = 100;
    let (_db, mut conn) = setup::<B>();
    prefill::<B>(&mut conn, OLD, 0);
    let inbox = orders();
    let retention = Retention::older_than(7 * DAY).batch_size(10);
    // A prune on another node holds the lease for an hour.
    B::hold_prune_lease(&mut conn, "elsewhere", Utc::now() + TimeDelta::hours(1));

    let pruned = inbox.prune(&mut conn, &retention);

    if B::prune_holds_lease(&mut conn) {
        // PostgreSQL: the lease is the prune's lock. Galera: the prune lock is the node's own,
        // and the lease is what the other nodes' prunes hold.
        assert!(
            matches!(pruned, Err(AdminError::PruneRunning)),
            "{pruned:?}"
        );
        assert_eq!(conn.inbox_rows(), OLD, "nothing deleted");
        // An expired lease is taken over, renewed by every batch, and ended.
        B::hold_prune_lease(&mut conn, "elsewhere", Utc::now() - TimeDelta::seconds(1));
        let pruned = inbox.prune(&mut conn, &retention).unwrap();
        assert_eq!(pruned.events, OLD as u64, "{pruned:?}");
        assert_eq!(B::prune_lease_holder(&mut conn), None, "ended");
    } else {
        // The server's own prune lock holds for every session: no lease is read or written.
        assert_eq!(pruned.unwrap().events, OLD as u64);
        assert_eq!(
            B::prune_lease_holder(&mut conn).as_deref(),
            Some("elsewhere")
        );
    }
}

pub async fn a_large_prune_removes_every_old_row_in_bounded_batches<F: Flavour>() {
    let rows: usize = std::env::var("DIESEL_INBOX_PRUNE_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let filling = Instant::now();
    prefill::<F::Backend>(&mut check, rows, 10);
    let filled = filling.elapsed();

    let week = Retention::older_than(7 * DAY);
    let pruned = F::prune(&orders(), &mut conn, &week).await.unwrap();

    assert_eq!(pruned.events, rows as u64);
    assert_eq!(pruned.batches, rows.div_ceil(1000) as u64);
    assert_eq!(check.inbox_rows_like("orders", "old-"), 0);
    assert_eq!(check.inbox_rows_like("orders", "young-"), 10);
    println!(
        "large prune: {rows} rows (filled in {filled:?}) pruned in {:?}, {} batches of 1000, longest batch {:?}",
        pruned.elapsed, pruned.batches, pruned.longest_batch
    );
}

pub fn pruning_removes_settled_claims_older_than_the_window_and_keeps_open_ones<B: Backend>() {
    use diesel_inbox::claim::{ClaimState, Claimed, Resolution};

    let (_db, mut conn) = setup::<B>();
    let claims = orders().claims().lease(Duration::from_millis(1));
    let done = |_: &diesel_inbox::claim::Claim| Ok::<_, Error>(());
    for id in ["old-completed", "young-completed", "old-redelivered"] {
        assert!(claims.run(&mut conn, id, done).unwrap().has_run());
    }
    let abandon = |_: &diesel_inbox::claim::Claim| Err::<(), _>(Error::permanent("never"));
    assert!(claims.run(&mut conn, "old-abandoned", abandon).is_ok());
    let release = |_: &diesel_inbox::claim::Claim| Err::<(), _>(Error::transient("later"));
    assert!(claims.run(&mut conn, "old-released", release).is_err());
    let Claimed::Acquired(lost) = claims.claim(&mut conn, "old-in-doubt").unwrap() else {
        panic!("acquired")
    };
    std::mem::forget(lost);
    std::thread::sleep(Duration::from_millis(5));
    let audit = Audit::new("ops", "found it").unwrap();
    claims
        .resolve(&mut conn, "old-in-doubt", Resolution::Retry, &audit)
        .unwrap();
    let Claimed::Acquired(lost) = claims.claim(&mut conn, "old-in-doubt").unwrap() else {
        panic!("acquired again")
    };
    std::mem::forget(lost);
    for id in [
        "old-completed",
        "old-abandoned",
        "old-released",
        "old-in-doubt",
        "old-redelivered",
    ] {
        B::backdate_claim(&mut conn, "orders", id, days_ago(30));
    }
    // Still delivered: kept, or its next delivery would run the side effect again.
    let again = claims.run(&mut conn, "old-redelivered", done).unwrap();
    assert!(matches!(
        again,
        diesel_inbox::claim::ClaimOutcome::Completed(())
    ));

    let would = orders()
        .prune(&mut conn, &Retention::older_than(7 * DAY).dry_run(true))
        .unwrap();
    let pruned = orders()
        .prune(&mut conn, &Retention::older_than(7 * DAY))
        .unwrap();

    assert_eq!((would.claims, pruned.claims), (2, 2), "{pruned:?}");
    let left: Vec<_> = claims
        .list(&mut conn, None, 100)
        .unwrap()
        .into_iter()
        .map(|c| c.expect("a readable claim"))
        .map(|c| (c.event_id.as_str().to_owned(), c.state))
        .collect();
    assert_eq!(
        left,
        // in event id order
        [
            ("old-in-doubt".to_owned(), ClaimState::InDoubt),
            ("old-redelivered".to_owned(), ClaimState::Completed),
            ("old-released".to_owned(), ClaimState::Released),
            ("young-completed".to_owned(), ClaimState::Completed),
        ]
    );
}
