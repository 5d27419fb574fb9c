//! Rows this version cannot read (a state edited by hand, or written by a newer version): named
//! with their table, key and text, never hidden, and never redelivered in a loop, on every
//! backend. The CLI's side (dead letters listed as unreadable, stats, export) is in tests/cli.rs.

use diesel::connection::SimpleConnection;
use diesel_inbox::{Ack, Claimed, CorruptRow, Delivery, Envelope, Error, Inbox, Outbox};

use crate::support::{setup, Backend};

/// The corrupt row's error, or a panic saying what came instead.
#[track_caller]
fn corrupt<T: std::fmt::Debug>(result: Result<T, Error>) -> CorruptRow {
    match result {
        Err(Error::CorruptRow(corrupt)) => corrupt,
        other => panic!("expected Error::CorruptRow, got {other:?}"),
    }
}

pub fn a_delivery_of_an_event_whose_inbox_row_is_corrupt_is_rejected_naming_the_row<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = Inbox::new("orders").unwrap();
    let ok = |_: &mut B::Conn| Ok::<_, Error>(());
    for id in ["evt-1", "evt-2"] {
        assert!(inbox.process(&mut conn, id, ok).unwrap().is_processed());
    }
    conn.batch_execute("UPDATE diesel_inbox_events SET state = 'paused' WHERE event_id = 'evt-1'")
        .unwrap();

    let delivered = inbox.process(&mut conn, "evt-1", ok);
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
    assert!(inbox
        .process(&mut conn, "evt-2", ok)
        .unwrap()
        .is_duplicate());
    let stats = inbox
        .stats(&mut conn, std::time::Duration::from_secs(60))
        .unwrap();
    assert_eq!((stats.totals.processed, stats.totals.unreadable), (1, 1));
}

pub fn a_corrupt_claim_or_outbox_row_is_named_with_its_table_key_and_text<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = Inbox::new("payments").unwrap().claims();
    for id in ["pay-1", "pay-2"] {
        let Claimed::Acquired(claim) = claims.claim(&mut conn, Delivery::new(id).unwrap()).unwrap()
        else {
            panic!("a new claim is acquired")
        };
        claim.release(&mut conn, "not now").unwrap();
    }
    conn.batch_execute("UPDATE diesel_inbox_claims SET state = 'frozen' WHERE event_id = 'pay-2'")
        .unwrap();
    let shown = corrupt(claims.show(&mut conn, "pay-2"));
    assert_eq!(
        (shown.table(), shown.text()),
        ("diesel_inbox_claims", "frozen")
    );
    assert!(shown
        .to_string()
        .contains("consumer = 'payments' AND event_id = 'pay-2'"));
    assert!(
        claims.show(&mut conn, "pay-1").unwrap().is_some(),
        "the neighbour reads"
    );
    // a listing that meets it names the rows that hold the text, and the UPDATE to repair them
    let listed = corrupt(claims.list(&mut conn, None, 100)).to_string();
    assert!(
        listed.contains("UPDATE diesel_inbox_claims SET state = '...' WHERE consumer = 'payments' AND state = 'frozen'"),
        "{listed}"
    );

    let outbox = Outbox::new("orders-service").unwrap();
    let envelope = Envelope::new("order.placed", "order", "1")
        .with_id("out-1")
        .unwrap()
        .json(&serde_json::json!({"order": 1}))
        .unwrap();
    outbox
        .enqueue(&mut conn, "orders.placed", &envelope)
        .unwrap();
    let position = Outbox::list(&mut conn, None, 0, 10).unwrap()[0].position;
    conn.batch_execute("UPDATE diesel_inbox_outbox SET state = 'held'")
        .unwrap();
    let shown = corrupt(Outbox::record(&mut conn, position));
    assert_eq!(
        (shown.table(), shown.text()),
        ("diesel_inbox_outbox", "held")
    );
    assert!(shown
        .to_string()
        .contains(&format!("position = '{position}'")));
    let listed = corrupt(Outbox::list(&mut conn, None, 0, 10));
    assert_eq!(listed.table(), "diesel_inbox_outbox");
}
