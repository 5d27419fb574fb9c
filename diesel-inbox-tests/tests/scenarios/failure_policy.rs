//! Failure policy, dead letters, payload identity and stored results, on every backend.

use diesel_inbox::AdminError;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;

use diesel::prelude::*;
use diesel_inbox::{
    dead_letter::{DeadLetterState, HistoryKind},
    Audit, Delivery, Error, Inbox, Outcome, Payload,
};
use serde::{Deserialize, Serialize};

use super::{writes, HandlerError};
use crate::support::{concurrently, setup, setup_flavour, Backend, Flavour, Handle, TestConn, Tx};

/// A handler that fails with the handler's own error.
pub(crate) fn refuse<F: Flavour>() -> impl Handle<F, (), HandlerError> {
    async |_: &mut F::Conn| Err(HandlerError::Refused)
}

fn orders() -> Inbox {
    Inbox::new("orders").unwrap()
}

/// An inbox that dead-letters at the first failure, and `event_id` dead-lettered by it.
async fn dead_lettered_at_once<F: Flavour>(conn: &mut F::Conn, event_id: &str) -> Inbox {
    let inbox = orders().max_attempts(1);
    let outcome = F::process(&inbox, conn, event_id, refuse::<F>()).await;
    assert!(outcome.as_ref().unwrap().is_dead_lettered(), "{outcome:?}");
    inbox
}

/// A transition by "ops" for `reason`.
fn ops(reason: &str) -> Audit {
    Audit::new("ops", reason).unwrap()
}

pub async fn failures_are_counted_across_redeliveries<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(5);

    for _ in 0..3 {
        let failed = F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await;
        assert_eq!(failed, Err(HandlerError::Refused));
    }

    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
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
    let healthy = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(healthy.unwrap().is_processed());
    assert_eq!(check.effect_count(), 1);
}

pub async fn an_event_is_dead_lettered_at_exactly_max_attempts<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(3);

    for _ in 0..2 {
        let failed = F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await;
        assert_eq!(failed, Err(HandlerError::Refused));
    }
    let third = F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await;
    let Ok(Outcome::DeadLettered(dead)) = third else {
        panic!("third failure: {third:?}")
    };
    assert!(!dead.is_discarded());

    // A healthy handler no longer runs for it.
    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    let later = later.unwrap();
    assert_eq!(later.clone().processed(), None);
    assert!(later.is_dead_lettered());
    assert_eq!(check.effect_count(), 0);

    let listed = F::list(&inbox, &mut conn, None, 100).await.unwrap();
    assert_eq!(listed.len(), 1);
    let listed = listed[0].as_ref().unwrap();
    assert_eq!((listed.event_id.as_str(), listed.attempts), ("evt-1", 3));
    let history = F::show(&inbox, &mut conn, "evt-1").await.unwrap().history;
    assert_eq!(
        history.last().map(|h| h.kind),
        Some(HistoryKind::DeadLettered)
    );
}

pub async fn dead_letters_keep_the_payload_byte_for_byte<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
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
        let outcome = F::process(&inbox, &mut conn, &delivery, refuse::<F>()).await;
        assert!(outcome.unwrap().is_dead_lettered());
    }
    for (id, payload) in &payloads {
        let stored = F::show(&inbox, &mut conn, id).await.unwrap().payload;
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

pub async fn a_redrive_processes_once_and_a_second_redrive_is_refused<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(1);
    let delivery = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"order": "A-1"}));
    let outcome = F::process(&inbox, &mut conn, &delivery, refuse::<F>()).await;
    assert!(outcome.unwrap().is_dead_lettered());
    let fixed = Audit::new("ops@example.com", "config fixed").unwrap();

    let redrive = async |tx: &mut F::Conn, payload: Option<&Payload>| {
        assert_eq!(payload, delivery.payload());
        tx.write_effect("evt-1").await
    };
    let redriven = F::redrive(&inbox, &mut conn, "evt-1", &fixed, redrive).await;

    assert!(redriven.unwrap().is_processed());
    assert_eq!(check.effect_count(), 1);
    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
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
    let redelivered = F::process(&inbox, &mut conn, &delivery, writes("evt-1")).await;
    assert!(redelivered.unwrap().is_duplicate());

    let rerun = async |tx: &mut F::Conn, _: Option<&Payload>| {
        tx.write_effect("evt-1").await.map_err(AdminError::from)
    };
    let again = F::redrive(&inbox, &mut conn, "evt-1", &ops("again"), rerun).await;
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
    assert_eq!(check.effect_count(), 1);
}

pub async fn a_failing_redrive_leaves_the_dead_letter_as_it_was<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered_at_once::<F>(&mut conn, "evt-1").await;
    let before = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
    assert_eq!(before.state, DeadLetterState::DeadLettered);

    let failing = async |tx: &mut F::Conn, _: Option<&Payload>| {
        tx.write_effect("evt-1").await.unwrap();
        Err::<(), _>(HandlerError::Refused)
    };
    let failed = F::redrive(&inbox, &mut conn, "evt-1", &ops("try"), failing).await;

    assert_eq!(failed, Err(HandlerError::Refused));
    assert_eq!(check.effect_count(), 0);
    assert_eq!(
        F::show(&inbox, &mut conn, "evt-1").await.unwrap(),
        before,
        "state, attempts, errors, times, payload and history as they were"
    );
    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(later.unwrap().is_dead_lettered());
}

pub async fn a_discarded_dead_letter_is_kept_and_never_runs<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered_at_once::<F>(&mut conn, "evt-1").await;

    F::discard(&inbox, &mut conn, "evt-1", &ops("obsolete order"))
        .await
        .unwrap();

    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    let later = later.unwrap();
    assert!(
        matches!(later, Outcome::DeadLettered(ref d) if d.is_discarded()),
        "{later:?}"
    );
    let rerun = async |tx: &mut F::Conn, _: Option<&Payload>| {
        tx.write_effect("evt-1").await.map_err(AdminError::from)
    };
    let redrive = F::redrive(&inbox, &mut conn, "evt-1", &ops("oops"), rerun).await;
    assert!(matches!(
        redrive,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Discarded,
            ..
        })
    ));
    let discard = F::discard(&inbox, &mut conn, "evt-1", &ops("twice")).await;
    assert!(matches!(
        discard,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Discarded,
            ..
        })
    ));
    assert_eq!(check.effect_count(), 0);
    assert!(F::list(&inbox, &mut conn, None, 100)
        .await
        .unwrap()
        .is_empty());
    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
    assert_eq!(record.state, DeadLetterState::Discarded);
    assert_eq!(
        record.history.last().and_then(|h| h.actor.as_deref()),
        Some("ops")
    );
}

pub async fn transitions_need_an_actor_a_reason_and_a_dead_letter<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(3);
    let failed = F::process(&inbox, &mut conn, "evt-1", refuse::<F>()).await;
    assert_eq!(failed, Err(HandlerError::Refused));

    assert!(matches!(
        Audit::new(" ", "why"),
        Err(AdminError::MissingAudit("actor"))
    ));
    assert!(matches!(
        Audit::new("ops", ""),
        Err(AdminError::MissingAudit("reason"))
    ));
    assert!(matches!(
        F::discard(&inbox, &mut conn, "nope", &ops("why")).await,
        Err(AdminError::DeadLetterNotFound { .. })
    ));
    assert!(matches!(
        F::discard(&inbox, &mut conn, "evt-1", &ops("why")).await,
        Err(AdminError::InvalidTransition {
            state: DeadLetterState::Retrying,
            ..
        })
    ));
    assert!(matches!(
        F::show(&inbox, &mut conn, "nope").await,
        Err(AdminError::DeadLetterNotFound { .. })
    ));
}

pub async fn a_reused_id_with_a_different_payload_is_a_conflict<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
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

    let first = F::process(&inbox, &mut conn, &original, writes("evt-1")).await;
    assert!(first.unwrap().is_processed());
    let same = F::process(&inbox, &mut conn, &reordered, writes("evt-1")).await;
    assert!(same.unwrap().is_duplicate());
    let typed = async |tx: &mut F::Conn| tx.write_effect("evt-1").await.map_err(Error::from);
    let conflict = F::process(&inbox, &mut conn, &different, typed).await;
    assert!(
        matches!(conflict, Err(Error::PayloadMismatch { ref event_id }) if event_id.as_str() == "evt-1"),
        "{conflict:?}"
    );
    let bare = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(
        bare.unwrap().is_duplicate(),
        "no payload: nothing to compare"
    );

    assert_eq!(check.effect_count(), 1);
    assert_eq!(check.payload_conflicts("evt-1"), 1);
}

pub async fn a_stored_result_is_returned_on_duplicate<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders();
    let charge = async |tx: &mut F::Conn| {
        tx.write_effect("req-1").await?;
        QueryResult::Ok(Receipt {
            order: "A-1".into(),
            cents: 1250,
        })
    };

    let first = F::process_storing_result(&inbox, &mut conn, "req-1", charge).await;
    let retried = F::process_storing_result(&inbox, &mut conn, "req-1", charge).await;

    let original = first.unwrap().processed().unwrap();
    let stored: Option<Receipt> = retried
        .unwrap()
        .duplicate()
        .unwrap()
        .stored_result()
        .unwrap();
    assert_eq!(stored, Some(original));
    assert_eq!(check.effect_count(), 1);
    let plain = F::process(&inbox, &mut conn, "req-2", writes("req-2")).await;
    assert!(plain.unwrap().is_processed());
    let again = F::process(&inbox, &mut conn, "req-2", writes("req-2")).await;
    assert_eq!(
        again
            .unwrap()
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
            let failed = orders().process(conn, "evt-1", |_| Err::<(), _>(HandlerError::Refused));
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

pub async fn a_panicking_handler_counts_as_a_failed_attempt<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let inbox = orders().max_attempts(1);

    let poison = async |_: &mut F::Conn| -> QueryResult<()> { panic!("poison pill") };
    let delivery = F::process(&inbox, &mut conn, "evt-1", poison);
    let caught = AssertUnwindSafe(delivery).catch_unwind().await;

    assert!(caught.is_err(), "the panic continues");
    let record = F::show(&inbox, &mut conn, "evt-1").await.unwrap();
    assert_eq!(record.state, DeadLetterState::DeadLettered);
    assert_eq!(record.last_error, "handler panicked: poison pill");
    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    assert!(later.unwrap().is_dead_lettered());
}

pub async fn discarding_a_dead_letter_whose_inbox_row_was_deleted_still_holds_it_back<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let inbox = dead_lettered_at_once::<F>(&mut conn, "evt-1").await;
    // Retention, or an operator, removed the row that held deliveries back.
    conn.execute("DELETE FROM diesel_inbox_events")
        .await
        .unwrap();

    F::discard(&inbox, &mut conn, "evt-1", &ops("obsolete"))
        .await
        .unwrap();

    let later = F::process(&inbox, &mut conn, "evt-1", writes("evt-1")).await;
    let later = later.unwrap();
    assert!(
        matches!(later, Outcome::DeadLettered(ref d) if d.is_discarded()),
        "{later:?}"
    );
    assert_eq!(check.effect_count(), 0);
}
