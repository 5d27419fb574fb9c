//! Failure policy, dead letters, payload identity and stored results, on every backend.

use diesel_inbox::AdminError;
use std::panic::{self, AssertUnwindSafe};

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{Audit, DeadLetterState, Delivery, Error, HistoryKind, Inbox, Outcome, Payload};
use serde::{Deserialize, Serialize};

use super::{effect, HandlerError};
use crate::support::{concurrently, setup, Backend, TestConn};

fn refuse<C>(_: &mut C) -> Result<(), HandlerError> {
    Err(HandlerError::Refused)
}

fn orders() -> Inbox {
    Inbox::new("orders").unwrap()
}

/// An inbox that dead-letters at the first failure, and `event_id` dead-lettered by it.
fn dead_lettered_at_once<C: TestConn>(conn: &mut C, event_id: &str) -> Inbox {
    let inbox = orders().max_attempts(1);
    let outcome = inbox.process(conn, event_id, refuse).unwrap();
    assert!(outcome.is_dead_lettered(), "{outcome:?}");
    inbox
}

/// A transition by "ops" for `reason`.
fn ops(reason: &str) -> Audit {
    Audit::new("ops", reason).unwrap()
}

pub fn failures_are_counted_across_redeliveries<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(5);

    for _ in 0..3 {
        let failed = inbox.process(&mut conn, "evt-1", refuse);
        assert_eq!(failed, Err(HandlerError::Refused));
    }

    let record = inbox.dead_letters().show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.state, DeadLetterState::Retrying);
    assert_eq!(record.attempts, 3);
    assert_eq!(record.last_error, "handler refused");
    let attempts: Vec<_> = record.history.iter().map(|h| (h.kind, h.attempt)).collect();
    assert_eq!(
        attempts,
        [
            (HistoryKind::Failed, Some(1)),
            (HistoryKind::Failed, Some(2)),
            (HistoryKind::Failed, Some(3))
        ]
    );
    assert!(inbox
        .process(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    assert_eq!(conn.effect_count(), 1);
}

pub fn an_event_is_dead_lettered_at_exactly_max_attempts<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(3);

    for _ in 0..2 {
        assert_eq!(
            inbox.process(&mut conn, "evt-1", refuse),
            Err(HandlerError::Refused)
        );
    }
    let third = inbox.process(&mut conn, "evt-1", refuse).unwrap();
    let Outcome::DeadLettered(dead) = third else {
        panic!("third failure: {third:?}")
    };
    assert!(!dead.is_discarded());

    // A healthy handler no longer runs for it.
    let later = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert_eq!(later.clone().processed(), None);
    assert!(later.is_dead_lettered());
    assert_eq!(conn.effect_count(), 0);

    let listed = inbox.dead_letters().list(&mut conn, None, 100).unwrap();
    assert_eq!(listed.len(), 1);
    let listed = listed[0].as_ref().unwrap();
    assert_eq!((listed.event_id.as_str(), listed.attempts), ("evt-1", 3));
    let history = inbox
        .dead_letters()
        .show(&mut conn, "evt-1")
        .unwrap()
        .history;
    assert_eq!(
        history.last().map(|h| h.kind),
        Some(HistoryKind::DeadLettered)
    );
}

pub fn dead_letters_keep_the_payload_byte_for_byte<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(1);
    let large: Vec<u8> = (0..1_000_000u32)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[3])
        .collect();
    let payloads = [
        (
            "bytes",
            Payload::Bytes(vec![0, 0xff, 0xfe, b'a', 0xc3, 0x28, 0x80]),
        ),
        (
            "unicode",
            Payload::Bytes("Zoë ✓ 数据 🚀".as_bytes().to_vec()),
        ),
        (
            "json",
            Payload::Json(serde_json::json!({"name": "Zoë", "emoji": "🚀", "n": [1, 2.5, null]})),
        ),
        ("large", Payload::Bytes(large)),
    ];

    for (id, payload) in &payloads {
        let delivery = Delivery::new(*id).unwrap().with_payload(payload.clone());
        assert!(inbox
            .process(&mut conn, &delivery, refuse)
            .unwrap()
            .is_dead_lettered());
    }
    for (id, payload) in &payloads {
        let stored = inbox.dead_letters().show(&mut conn, *id).unwrap().payload;
        assert!(
            stored.as_ref() == Some(payload),
            "{id}: payload changed in storage"
        );
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order: String,
    cents: i64,
}

pub fn a_redrive_processes_once_and_a_second_redrive_is_refused<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(1);
    let delivery = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"order": "A-1"}));
    assert!(inbox
        .process(&mut conn, &delivery, refuse)
        .unwrap()
        .is_dead_lettered());
    let dead = inbox.dead_letters();

    let redriven = dead
        .redrive(
            &mut conn,
            "evt-1",
            &Audit::new("ops@example.com", "config fixed").unwrap(),
            |tx, payload| {
                assert_eq!(payload, delivery.payload());
                tx.record_effect("evt-1")
            },
        )
        .unwrap();

    assert!(redriven.is_processed());
    assert_eq!(conn.effect_count(), 1);
    let record = dead.show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.state, DeadLetterState::Redriven);
    let last = record.history.last().unwrap();
    assert_eq!(
        (last.kind, last.actor.as_deref(), last.reason.as_deref()),
        (
            HistoryKind::Redriven,
            Some("ops@example.com"),
            Some("config fixed")
        )
    );
    assert!(inbox
        .process(&mut conn, &delivery, effect("evt-1"))
        .unwrap()
        .is_duplicate());

    let again = dead.redrive(&mut conn, "evt-1", &ops("again"), |tx, _| {
        tx.record_effect("evt-1").map_err(AdminError::from)
    });
    assert!(
        matches!(
            again,
            Err(AdminError::InvalidTransition {
                state: DeadLetterState::Redriven,
                ..
            })
        ),
        "{again:?}"
    );
    assert_eq!(conn.effect_count(), 1);
}

pub fn a_failing_redrive_leaves_the_dead_letter_as_it_was<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered_at_once(&mut conn, "evt-1");
    let dead = inbox.dead_letters();
    let before = dead.show(&mut conn, "evt-1").unwrap();
    assert_eq!(before.state, DeadLetterState::DeadLettered);

    let failed = dead.redrive(&mut conn, "evt-1", &ops("try"), |tx, _| {
        tx.record_effect("evt-1").unwrap();
        Err::<(), _>(HandlerError::Refused)
    });

    assert_eq!(failed, Err(HandlerError::Refused));
    assert_eq!(conn.effect_count(), 0);
    assert_eq!(
        dead.show(&mut conn, "evt-1").unwrap(),
        before,
        "state, attempts, errors, times, payload and history as they were"
    );
    assert!(inbox
        .process(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_dead_lettered());
}

pub fn a_discarded_dead_letter_is_kept_and_never_runs<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered_at_once(&mut conn, "evt-1");
    let dead = inbox.dead_letters();

    dead.discard(&mut conn, "evt-1", &ops("obsolete order"))
        .unwrap();

    let later = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert!(
        matches!(later, Outcome::DeadLettered(ref d) if d.is_discarded()),
        "{later:?}"
    );
    let redrive = dead.redrive(&mut conn, "evt-1", &ops("oops"), |tx, _| {
        tx.record_effect("evt-1").map_err(AdminError::from)
    });
    assert!(matches!(
        redrive,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Discarded,
            ..
        })
    ));
    let discard = dead.discard(&mut conn, "evt-1", &ops("twice"));
    assert!(matches!(
        discard,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Discarded,
            ..
        })
    ));
    assert_eq!(conn.effect_count(), 0);
    assert!(dead.list(&mut conn, None, 100).unwrap().is_empty());
    let record = dead.show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.state, DeadLetterState::Discarded);
    assert_eq!(
        record.history.last().and_then(|h| h.actor.as_deref()),
        Some("ops")
    );
}

pub fn transitions_need_an_actor_a_reason_and_a_dead_letter<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(3);
    let dead = inbox.dead_letters();
    assert_eq!(
        inbox.process(&mut conn, "evt-1", refuse),
        Err(HandlerError::Refused)
    );

    assert!(matches!(
        Audit::new(" ", "why"),
        Err(AdminError::MissingAudit("actor"))
    ));
    assert!(matches!(
        Audit::new("ops", ""),
        Err(AdminError::MissingAudit("reason"))
    ));
    assert!(matches!(
        dead.discard(&mut conn, "nope", &ops("why")),
        Err(AdminError::DeadLetterNotFound { .. })
    ));
    assert!(matches!(
        dead.discard(&mut conn, "evt-1", &ops("why")),
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Retrying,
            ..
        })
    ));
    assert!(matches!(
        dead.show(&mut conn, "nope"),
        Err(AdminError::DeadLetterNotFound { .. })
    ));
}

pub fn a_reused_id_with_a_different_payload_is_a_conflict<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders();
    let original = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"a": 1, "b": [true]}));
    let reordered = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::from_str(r#"{ "b":[true], "a":1 }"#).unwrap());
    let different = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"a": 2, "b": [true]}));

    assert!(inbox
        .process(&mut conn, &original, effect("evt-1"))
        .unwrap()
        .is_processed());
    assert!(inbox
        .process(&mut conn, &reordered, effect("evt-1"))
        .unwrap()
        .is_duplicate());
    let conflict = inbox.process(&mut conn, &different, |tx| {
        tx.record_effect("evt-1").map_err(Error::from)
    });
    assert!(
        matches!(conflict, Err(Error::PayloadMismatch { ref event_id }) if event_id.as_str() == "evt-1"),
        "{conflict:?}"
    );
    assert!(
        inbox
            .process(&mut conn, "evt-1", effect("evt-1"))
            .unwrap()
            .is_duplicate(),
        "no payload: nothing to compare"
    );

    assert_eq!(conn.effect_count(), 1);
    assert_eq!(conn.payload_conflicts("evt-1"), 1);
}

pub fn a_stored_result_is_returned_on_duplicate<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders();
    let charge = |tx: &mut B::Conn| {
        tx.record_effect("req-1")?;
        QueryResult::Ok(Receipt {
            order: "A-1".into(),
            cents: 1250,
        })
    };

    let first = inbox
        .process_storing_result(&mut conn, "req-1", charge)
        .unwrap();
    let retried = inbox
        .process_storing_result(&mut conn, "req-1", charge)
        .unwrap();

    let original = first.processed().unwrap();
    let stored: Option<Receipt> = retried.duplicate().unwrap().stored_result().unwrap();
    assert_eq!(stored, Some(original));
    assert_eq!(conn.effect_count(), 1);
    let plain = inbox.process(&mut conn, "req-2", effect("req-2")).unwrap();
    assert!(plain.is_processed());
    let again = inbox.process(&mut conn, "req-2", effect("req-2")).unwrap();
    assert_eq!(
        again
            .duplicate()
            .unwrap()
            .stored_result::<Receipt>()
            .unwrap(),
        None
    );
}

pub fn concurrent_failures_of_one_event_count_correctly<B: Backend>() {
    const THREADS: usize = 4;
    const EACH: usize = 5;
    let (db, mut conn) = setup::<B>();

    concurrently(&db, THREADS, |_, conn| {
        for _ in 0..EACH {
            let failed = orders().process(conn, "evt-1", refuse);
            assert_eq!(failed, Err(HandlerError::Refused));
        }
    });

    let record = orders().dead_letters().show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.attempts, (THREADS * EACH) as u64);
    let mut numbers: Vec<_> = record.history.iter().filter_map(|h| h.attempt).collect();
    numbers.sort_unstable();
    assert_eq!(
        numbers,
        (1..=(THREADS * EACH) as u64).collect::<Vec<_>>(),
        "each failure its own attempt number"
    );
}

pub fn a_panicking_handler_counts_as_a_failed_attempt<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = orders().max_attempts(1);

    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        let _ = inbox.process(&mut conn, "evt-1", |_| -> QueryResult<()> {
            panic!("poison pill")
        });
    }));

    assert!(caught.is_err(), "the panic continues");
    let record = inbox.dead_letters().show(&mut conn, "evt-1").unwrap();
    assert_eq!(record.state, DeadLetterState::DeadLettered);
    assert_eq!(record.last_error, "handler panicked: poison pill");
    assert!(inbox
        .process(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_dead_lettered());
}

pub fn discarding_a_dead_letter_whose_inbox_row_was_deleted_still_holds_it_back<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let inbox = dead_lettered_at_once(&mut conn, "evt-1");
    // Retention, or an operator, removed the row that held deliveries back.
    conn.batch_execute("DELETE FROM diesel_inbox_events")
        .unwrap();

    inbox
        .dead_letters()
        .discard(&mut conn, "evt-1", &ops("obsolete"))
        .unwrap();

    let later = inbox.process(&mut conn, "evt-1", effect("evt-1")).unwrap();
    assert!(
        matches!(later, Outcome::DeadLettered(ref d) if d.is_discarded()),
        "{later:?}"
    );
    assert_eq!(conn.effect_count(), 0);
}
