//! Rows this version cannot read (a state edited by hand, or written by a newer version): named
//! with their table, key and text, never hidden, and never redelivered in a loop, on every
//! backend. The CLI's side (dead letters listed as unreadable, stats, export) is in the CLI package's tests/cli.rs.

use diesel_inbox::AdminError;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel_inbox::{
    claim::Claimed,
    envelope::Envelope,
    outbox::{Outbox, OutboxState},
    Ack, CorruptRow, Delivery, Error, Inbox, Payload,
};

use crate::support::{setup, setup_flavour, Backend, Flavour, TestConn, Tx};

/// The listed rows as `Ok(key)` or `Err((table, column, text, where clause))`: what a test
/// compares, in the listing's order.
fn shape<T>(
    rows: &[Result<T, CorruptRow>],
    key: impl Fn(&T) -> String,
) -> Vec<Result<String, (String, String, String)>> {
    rows.iter()
        .map(|row| match row {
            Ok(row) => Ok(key(row)),
            Err(corrupt) => Err((
                corrupt.table().to_owned(),
                corrupt.column().to_owned(),
                corrupt.text().to_owned(),
            )),
        })
        .collect()
}

/// The value of `column` in a corrupt row's key: where a listing's next page starts.
fn key_of(corrupt: &CorruptRow, column: &str) -> String {
    corrupt.key().iter().find(|(k, _)| k == column).map_or_else(
        || panic!("{corrupt} has no {column} in its key"),
        |(_, v)| v.clone(),
    )
}

/// The corrupt row's error, or a panic saying what came instead.
#[track_caller]
fn corrupt<T: std::fmt::Debug>(result: Result<T, impl Into<AdminError>>) -> CorruptRow {
    match result.map_err(Into::into) {
        Err(AdminError::Inbox(Error::CorruptRow(corrupt))) => corrupt,
        other => panic!("expected Error::CorruptRow, got {other:?}"),
    }
}

pub async fn a_delivery_of_an_event_whose_inbox_row_is_corrupt_is_rejected_naming_the_row<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("orders").unwrap();
    let ok = async |_: &mut F::Conn| Ok::<_, Error>(());
    for id in ["evt-1", "evt-2"] {
        assert!(F::process(&inbox, &mut conn, id, ok)
            .await
            .unwrap()
            .is_processed());
    }
    check
        .batch_execute("UPDATE diesel_inbox_events SET state = 'paused' WHERE event_id = 'evt-1'")
        .unwrap();

    let delivered = F::process(&inbox, &mut conn, "evt-1", ok).await;
    assert_eq!(Ack::of(&delivered), Ack::Reject, "{delivered:?}");
    let error = corrupt(delivered);
    assert_eq!(
        (error.table(), error.column(), error.text()),
        ("diesel_inbox_events", "state", "paused")
    );
    assert!(error.to_string().contains(
        "UPDATE diesel_inbox_events SET state = '...' WHERE consumer = 'orders' AND event_id = 'evt-1'"
    ));
    // the neighbour is a duplicate as before; stats count the corrupt row instead of failing
    let neighbour = F::process(&inbox, &mut conn, "evt-2", ok).await;
    assert!(neighbour.unwrap().is_duplicate());
    let stats = F::stats(&inbox, &mut conn, Duration::from_secs(60)).await;
    let stats = stats.unwrap();
    assert_eq!((stats.totals.processed, stats.totals.unreadable), (1, 1));
}

pub fn a_corrupt_claim_is_listed_as_unreadable_between_its_readable_neighbours<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = Inbox::new("payments").unwrap().claims();
    for id in ["pay-1", "pay-2", "pay-3"] {
        let delivery = Delivery::new(id)
            .unwrap()
            .json(serde_json::json!({ "amount": 5 }));
        let Claimed::Acquired(claim) = claims.claim(&mut conn, delivery).unwrap() else {
            panic!("a new claim is acquired")
        };
        claim.release(&mut conn, "not now").unwrap();
    }
    conn.batch_execute("UPDATE diesel_inbox_claims SET state = 'frozen' WHERE event_id = 'pay-2'")
        .unwrap();

    let listed = claims.list(&mut conn, None, 100).unwrap();
    let frozen = || {
        Err((
            "diesel_inbox_claims".to_owned(),
            "state".to_owned(),
            "frozen".to_owned(),
        ))
    };
    let id = |c: &diesel_inbox::claim::ClaimRecord| c.event_id.as_str().to_owned();
    assert_eq!(
        shape(&listed, id),
        [Ok("pay-1".to_owned()), frozen(), Ok("pay-3".to_owned())]
    );
    let Err(bad) = &listed[1] else { unreachable!() };
    assert!(
        bad.to_string().contains(
            "UPDATE diesel_inbox_claims SET state = '...' WHERE consumer = 'payments' AND event_id = 'pay-2'"
        ),
        "{bad}"
    );
    // A listing shows no payloads; the lookup of one claim does.
    let Ok(first) = &listed[0] else {
        unreachable!()
    };
    assert_eq!(
        (first.payload.as_ref(), first.payload_kind.as_deref()),
        (None, Some("json"))
    );
    let shown = claims.show(&mut conn, "pay-1").unwrap().unwrap();
    assert_eq!(
        shown.payload,
        Some(Payload::Json(serde_json::json!({ "amount": 5 })))
    );
    // The next page starts after the corrupt row's key, as after any other.
    let page = claims.list(&mut conn, None, 2).unwrap();
    assert_eq!(shape(&page, id), [Ok("pay-1".to_owned()), frozen()]);
    let Err(last) = &page[1] else { unreachable!() };
    let after = key_of(last, "event_id");
    let next = claims.list(&mut conn, Some(&after), 2).unwrap();
    assert_eq!(shape(&next, id), [Ok("pay-3".to_owned())]);
    // Its own lookup names it.
    let shown = corrupt(claims.show(&mut conn, "pay-2"));
    assert_eq!(
        (shown.table(), shown.text()),
        ("diesel_inbox_claims", "frozen")
    );
}

pub async fn a_corrupt_gap_is_listed_as_unreadable_between_its_readable_neighbours<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("projector").unwrap();
    let cursor = inbox.cursor("orders-0").unwrap();
    let gaps = inbox.gaps();
    let apply = async |_: &mut F::Conn| Ok::<_, Error>(());
    for sequence in [1, 3, 5, 7] {
        let outcome = F::advance(&cursor, &mut conn, sequence, apply).await;
        assert!(outcome.unwrap().is_processed());
    }
    let ids: Vec<i64> = F::list_gaps(&gaps, &mut conn, 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|gap| gap.as_ref().unwrap().id)
        .collect();
    assert_eq!(ids.len(), 3, "gaps at 2, 4 and 6");
    check
        .batch_execute(&format!(
            "UPDATE diesel_inbox_gaps SET cause = 'lost' WHERE id = {}",
            ids[1]
        ))
        .unwrap();

    let unknown_cause = || {
        Err((
            "diesel_inbox_gaps".to_owned(),
            "cause".to_owned(),
            "lost".to_owned(),
        ))
    };
    let id = |g: &diesel_inbox::cursor::Gap| g.id.to_string();
    let (first, last) = (Ok(ids[0].to_string()), Ok(ids[2].to_string()));
    let listed = F::list_gaps(&gaps, &mut conn, 0, 100).await.unwrap();
    assert_eq!(
        shape(&listed, id),
        [first.clone(), unknown_cause(), last.clone()]
    );
    let open = F::open_gaps(&gaps, &mut conn).await.unwrap();
    assert_eq!(
        shape(&open, id),
        [first.clone(), unknown_cause(), last.clone()]
    );
    let Err(bad) = &listed[1] else { unreachable!() };
    assert!(
        bad.to_string().contains(&format!(
            "UPDATE diesel_inbox_gaps SET cause = '...' WHERE consumer = 'projector' AND id = '{}'",
            ids[1]
        )),
        "{bad}"
    );
    // Paging goes on past it, by its id.
    let page = F::list_gaps(&gaps, &mut conn, 0, 2).await.unwrap();
    assert_eq!(shape(&page, id), [first, unknown_cause()]);
    let Err(at) = &page[1] else { unreachable!() };
    let after: i64 = key_of(at, "id").parse().unwrap();
    let next = F::list_gaps(&gaps, &mut conn, after, 2).await.unwrap();
    assert_eq!(shape(&next, id), [last]);
    // The stream's next delivery cannot tell where its watermark stands: it is rejected,
    // naming the row, rather than redelivered forever or guessed.
    let delivered = F::advance(&cursor, &mut conn, 9, apply).await;
    assert_eq!(Ack::of(&delivered), Ack::Reject, "{delivered:?}");
    assert_eq!(corrupt(delivered).text(), "lost");
}

pub async fn a_corrupt_outbox_row_is_listed_as_unreadable_between_its_readable_neighbours<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let outbox = Outbox::new("orders-service").unwrap();
    for n in 1..=3 {
        let envelope = Envelope::new("order.placed", "order", &n.to_string())
            .with_id(format!("out-{n}"))
            .unwrap()
            .json(&serde_json::json!({ "order": n }))
            .unwrap();
        F::enqueue(&outbox, &mut conn, "orders.placed", &envelope)
            .await
            .unwrap();
    }
    let positions: Vec<i64> = F::outbox_list(&mut conn, None, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|row| row.as_ref().unwrap().position)
        .collect();
    check
        .batch_execute(&format!(
            "UPDATE diesel_inbox_outbox SET state = 'held' WHERE position = {}",
            positions[1]
        ))
        .unwrap();

    let held = || {
        Err((
            "diesel_inbox_outbox".to_owned(),
            "state".to_owned(),
            "held".to_owned(),
        ))
    };
    let event = |r: &diesel_inbox::outbox::OutboxRecord| r.event_id.clone();
    let listed = F::outbox_list(&mut conn, None, 0, 10).await.unwrap();
    assert_eq!(
        shape(&listed, event),
        [Ok("out-1".to_owned()), held(), Ok("out-3".to_owned())]
    );
    // A listing of one state shows it too: it may be in that state.
    let failed = F::outbox_list(&mut conn, Some(OutboxState::Failed), 0, 10).await;
    assert_eq!(shape(&failed.unwrap(), event), [held()]);
    let Err(bad) = &listed[1] else { unreachable!() };
    assert!(
        bad.to_string()
            .contains(&format!("WHERE position = '{}'", positions[1])),
        "{bad}"
    );
    // Paging goes on past it, by its position.
    let page = F::outbox_list(&mut conn, None, 0, 2).await.unwrap();
    let Err(at) = &page[1] else {
        panic!("{page:?}")
    };
    let after: i64 = key_of(at, "position").parse().unwrap();
    let next = F::outbox_list(&mut conn, None, after, 2).await.unwrap();
    assert_eq!(shape(&next, event), [Ok("out-3".to_owned())]);
    // Its own lookup names it; the stats count it.
    let shown = corrupt(F::outbox_record(&mut conn, positions[1]).await);
    assert_eq!(
        (shown.table(), shown.text()),
        ("diesel_inbox_outbox", "held")
    );
    let stats = F::outbox_stats(&mut conn).await.unwrap();
    assert_eq!((stats.pending, stats.unreadable), (2, 1));
}

pub async fn a_batch_with_a_corrupt_inbox_row_rejects_that_event_and_processes_the_others<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("orders").unwrap();
    let ok = async |_: &mut F::Conn| Ok::<_, Error>(());
    assert!(F::process(&inbox, &mut conn, "evt-2", ok)
        .await
        .unwrap()
        .is_processed());
    check
        .batch_execute("UPDATE diesel_inbox_events SET state = 'paused' WHERE event_id = 'evt-2'")
        .unwrap();

    let each = async |tx: &mut F::Conn, delivery: &Delivery| {
        tx.write_effect(delivery.id().as_str())
            .await
            .map_err(Error::from)
    };
    let ids = vec!["evt-1", "evt-2", "evt-3", "evt-2"];
    let mut results = F::process_batch(&inbox, &mut conn, ids, each)
        .await
        .unwrap();
    assert!(results[0]
        .as_ref()
        .is_ok_and(diesel_inbox::Outcome::is_processed));
    assert!(results[2]
        .as_ref()
        .is_ok_and(diesel_inbox::Outcome::is_processed));
    for rejected in [results.remove(3), results.remove(1)] {
        assert_eq!(Ack::of(&rejected), Ack::Reject, "{rejected:?}");
        let error = corrupt(rejected);
        assert_eq!(
            (error.table(), error.column(), error.text()),
            ("diesel_inbox_events", "state", "paused")
        );
        assert!(error
            .to_string()
            .contains("WHERE consumer = 'orders' AND event_id = 'evt-2'"));
    }
    assert_eq!(check.effect_count(), 2, "evt-1 and evt-3 ran, once each");

    // One call for all the new ones: the corrupt one is not among them.
    let given = std::sync::Mutex::new(Vec::new());
    let all = async |_: &mut F::Conn, new: &[&Delivery]| {
        let ids = new.iter().map(|d| d.id().as_str().to_owned());
        given.lock().unwrap().extend(ids);
        Ok::<_, Error>(())
    };
    let ids = vec!["evt-4", "evt-2", "evt-5"];
    let results = F::process_bulk(&inbox, &mut conn, ids, all).await.unwrap();
    assert_eq!(given.into_inner().unwrap(), ["evt-4", "evt-5"]);
    assert_eq!(Ack::of(&results[1]), Ack::Reject, "{:?}", results[1]);
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
}

pub async fn a_corrupt_history_line_or_counter_is_named_and_hides_nothing<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = Inbox::new("orders").unwrap().max_attempts(1);
    let fail =
        async |_: &mut F::Conn| Err::<(), _>(Error::Database(diesel::result::Error::NotFound));
    for id in ["evt-1", "evt-2"] {
        let outcome = F::process(&inbox, &mut conn, id, fail).await;
        assert!(outcome.unwrap().is_dead_lettered());
    }
    check
        .batch_execute(
            "UPDATE diesel_inbox_failure_log SET entry = 'shrugged' WHERE event_id = 'evt-1'",
        )
        .unwrap();
    check
        .batch_execute(
            "UPDATE diesel_inbox_counters SET counter = 'mystery' WHERE counter = 'failed_attempt'",
        )
        .unwrap();

    let shown = corrupt(F::show(&inbox, &mut conn, "evt-1").await);
    assert_eq!(
        (shown.table(), shown.column(), shown.text()),
        ("diesel_inbox_failure_log", "entry", "shrugged")
    );
    assert!(
        shown
            .to_string()
            .contains("WHERE consumer = 'orders' AND event_id = 'evt-1' AND id = '"),
        "{shown}"
    );
    let neighbour = F::show(&inbox, &mut conn, "evt-2").await.unwrap();
    assert!(!neighbour.history.is_empty());
    // The listing reads no history: both are listed.
    let listed = F::list(&inbox, &mut conn, None, 100).await.unwrap();
    assert_eq!(listed.len(), 2);
    // A counter this version does not know is counted as unreadable, not an error.
    let stats = F::stats(&inbox, &mut conn, Duration::from_secs(3600)).await;
    let stats = stats.unwrap();
    assert_eq!(
        (
            stats.recent.failed_attempts,
            stats.recent.unreadable,
            stats.recent.dead_lettered
        ),
        (0, 2, 2),
        "{stats:?}"
    );
}
