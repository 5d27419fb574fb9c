//! Claims on side effects outside the database, against a fake external service that counts
//! calls and honours (or ignores) an idempotency key: stored results, concurrent deliveries,
//! crashes at both kill points, leases under both policies, fencing and ops' resolutions, on
//! every backend.

use diesel_inbox::AdminError;
use std::panic::{self, AssertUnwindSafe};
use std::thread;
use std::time::Duration;

use chrono::Utc;
use diesel::prelude::*;
use diesel_inbox::{
    Ack, Audit, Claim, ClaimOutcome, ClaimState, Claimed, Claims, Delivery, Error, InDoubtPolicy,
    Inbox, Payload, Resolution,
};

use crate::support::{call, concurrently, setup, Backend, ChildTest, FakeService, Keys, TestConn};

/// The environment variables that make a crash scenario its own child: the database URL, and
/// where the fake service listens.
const CRASH_CHILD: &str = "DIESEL_INBOX_CLAIM_CRASH_CHILD";
const SERVICE: &str = "DIESEL_INBOX_CLAIM_SERVICE";

/// How long a crash scenario waits for its child to reach the point where it is killed.
const CHILD_STARTS_WITHIN: Duration = Duration::from_secs(60);

/// A lease short enough to wait out in a test.
const SHORT_LEASE: Duration = Duration::from_millis(300);

/// A side effect's error that does not say whether it happened.
type Unknown = Box<dyn std::error::Error + Send + Sync>;

/// Welcome emails: the default, at-most-once policy.
fn mailer() -> Claims {
    Inbox::new("mailer").unwrap().claims()
}

/// Card charges, under `policy`, with a short lease.
fn payments(policy: InDoubtPolicy) -> Claims {
    Inbox::new("payments")
        .unwrap()
        .claims()
        .lease(SHORT_LEASE)
        .policy(policy)
}

/// The side effect: one call of the service at `addr`, with the claim's idempotency key.
fn call_service(addr: &str) -> impl FnOnce(&Claim) -> Result<String, Unknown> + '_ {
    move |claim| Ok(call(addr, &claim.idempotency_key())?)
}

/// The idempotency key of the claim of `id`.
fn key_of<C: TestConn>(conn: &mut C, claims: &Claims, id: &str) -> String {
    claims
        .show(conn, id)
        .unwrap()
        .expect("claimed")
        .idempotency_key
}

/// The claim of `id` as it stands.
fn state_of<C: TestConn>(conn: &mut C, claims: &Claims, id: &str) -> ClaimState {
    claims.show(conn, id).unwrap().expect("claimed").state
}

/// Sleeps until the lease of the claim of `id` has run out.
fn wait_out_the_lease<C: TestConn>(conn: &mut C, claims: &Claims, id: &str) {
    let until = claims.show(conn, id).unwrap().expect("claimed").lease_until;
    let left = (until - Utc::now()).to_std().unwrap_or_default();
    assert!(left < Duration::from_secs(10), "a test lease is short");
    thread::sleep(left + Duration::from_millis(20));
}

/// The acquired claim of `id`; panics on anything else.
fn acquire<C: TestConn>(conn: &mut C, claims: &Claims, id: &str) -> Claim {
    match claims.claim(conn, id).unwrap() {
        Claimed::Acquired(claim) => claim,
        other => panic!("expected to acquire {id}, got {other:?}"),
    }
}

fn ops(reason: &str) -> Audit {
    Audit::new("ops@example.com", reason).unwrap()
}

pub fn a_completed_claim_returns_its_stored_result_and_the_side_effect_runs_once<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let service = FakeService::start(Keys::Ignored);
    let claims = mailer();

    let first = claims
        .run(&mut conn, "user-1:welcome", call_service(service.addr()))
        .unwrap();
    let ClaimOutcome::Ran(sent) = first else {
        panic!("the first delivery runs the side effect: {first:?}")
    };
    let again = claims
        .run(&mut conn, "user-1:welcome", call_service(service.addr()))
        .unwrap();
    let Claimed::Completed(done) = claims.claim(&mut conn, "user-1:welcome").unwrap() else {
        panic!("a completed claim")
    };

    assert_eq!(again, ClaimOutcome::Completed(sent.clone()));
    assert_eq!(Ack::of(&Ok::<_, Error>(again)), Ack::Ack);
    assert_eq!(done.result::<String>().unwrap(), sent);
    let key = key_of(&mut conn, &claims, "user-1:welcome");
    assert_eq!(service.calls(&key), 1);
    let record = claims.show(&mut conn, "user-1:welcome").unwrap().unwrap();
    assert_eq!(record.state, ClaimState::Completed);
    assert_eq!((record.attempt, record.deliveries), (1, 3));
}

pub fn concurrent_deliveries_run_the_side_effect_once_and_the_others_see_it_in_progress<
    B: Backend,
>() {
    let (db, mut conn) = setup::<B>();
    let service = FakeService::start(Keys::Ignored);
    let claims = mailer();
    let addr = service.addr();

    let outcomes = concurrently(&db, 8, |_, conn| {
        claims
            .run(conn, "user-2:welcome", |claim| {
                // Long enough for every other delivery to arrive while it runs.
                thread::sleep(Duration::from_millis(300));
                call_service(addr)(claim)
            })
            .unwrap()
    });

    let ran = outcomes.iter().filter(|o| o.has_run()).count();
    assert_eq!(ran, 1, "{outcomes:?}");
    for outcome in outcomes.iter().filter(|o| !o.has_run()) {
        match outcome {
            ClaimOutcome::InProgress(held) => {
                assert_eq!(held.attempt(), 1);
                assert!(held.lease_until() > Utc::now() - chrono::TimeDelta::seconds(60));
                assert_eq!(outcome.ack(), Ack::Redeliver);
            }
            ClaimOutcome::Completed(_) => {}
            other => panic!("another delivery ran or saw {other:?}"),
        }
    }
    let key = key_of(&mut conn, &claims, "user-2:welcome");
    assert_eq!(service.calls(&key), 1);
}

/// In the child process of a crash scenario: a connection to its parent's database, and the
/// fake service's address.
fn as_crash_child<B: Backend>() -> Option<(B::Conn, String)> {
    let url = std::env::var(CRASH_CHILD).ok()?;
    Some((B::connect_to(&url), std::env::var(SERVICE).unwrap()))
}

/// The child's last words: `marker`, then it waits to be killed.
fn await_the_kill(marker: &str) {
    println!("{marker}");
    thread::sleep(2 * CHILD_STARTS_WITHIN);
}

/// The parent of a crash scenario: runs the scenario `test` in a child process, against its
/// database and the fake service, until the child prints `marker`, and kills it there.
fn crash_a_child(test: &str, url: &str, service: &FakeService, marker: &str) {
    let mut child = ChildTest::spawn(test, &[(CRASH_CHILD, url), (SERVICE, service.addr())]);
    child.wait_for(marker, CHILD_STARTS_WITHIN);
    child.kill();
}

/// The two claims a crash leaves behind: one redelivered under each policy.
const HELD: &str = "order-1:charge";
const RERUN: &str = "order-2:charge";

pub fn a_crash_after_the_claim_before_the_side_effect_is_in_doubt_or_rerun_and_never_doubled<
    B: Backend,
>() {
    const CLAIMED: &str = "claimed, side effect not run";
    if let Some((mut conn, _)) = as_crash_child::<B>() {
        let claims = payments(InDoubtPolicy::Hold);
        let _held = [
            acquire(&mut conn, &claims, HELD),
            acquire(&mut conn, &claims, RERUN),
        ];
        await_the_kill(CLAIMED);
        return;
    }
    let (db, mut conn) = setup::<B>();
    let service = FakeService::start(Keys::Honoured);
    crash_a_child(
        "a_crash_after_the_claim_before_the_side_effect_is_in_doubt_or_rerun_and_never_doubled",
        db.url(),
        &service,
        CLAIMED,
    );

    // At most once: the claim is in doubt, visible, and the side effect does not run.
    let hold = payments(InDoubtPolicy::Hold);
    wait_out_the_lease(&mut conn, &hold, HELD);
    let redelivered = hold
        .run(&mut conn, HELD, call_service(service.addr()))
        .unwrap();
    let ClaimOutcome::InDoubt(doubt) = &redelivered else {
        panic!("a claim whose holder died is in doubt: {redelivered:?}")
    };
    assert_eq!(doubt.attempt(), 1);
    assert!(
        doubt.reason().contains("lease ran out"),
        "{}",
        doubt.reason()
    );
    let held_key = key_of(&mut conn, &hold, HELD);
    assert_eq!(service.calls(&held_key), 0, "never run silently");
    let in_doubt: Vec<_> = hold.in_doubt(&mut conn).unwrap();
    assert!(
        in_doubt.iter().any(|c| c.event_id.as_str() == HELD),
        "{in_doubt:?}"
    );
    // Ops find no charge under its key at the provider, and retry it: it runs once.
    hold.resolve(
        &mut conn,
        HELD,
        Resolution::Retry,
        &ops("no charge at the provider"),
    )
    .unwrap();
    let retried = hold
        .run(&mut conn, HELD, call_service(service.addr()))
        .unwrap();
    assert!(retried.has_run(), "{retried:?}");
    assert_eq!(service.applied(&held_key), 1);

    // Re-run after the lease: the next delivery takes the claim over and charges once.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    wait_out_the_lease(&mut conn, &rerun, RERUN);
    let taken_over = rerun
        .run(&mut conn, RERUN, call_service(service.addr()))
        .unwrap();
    assert!(taken_over.has_run(), "{taken_over:?}");
    let rerun_key = key_of(&mut conn, &rerun, RERUN);
    assert_eq!(
        (service.calls(&rerun_key), service.applied(&rerun_key)),
        (1, 1)
    );
    assert_eq!(rerun.show(&mut conn, RERUN).unwrap().unwrap().attempt, 2);
    report("after the claim", &service, &held_key, &rerun_key);
}

/// The counts a crash scenario saw, for the record (`--nocapture`).
fn report(kill_point: &str, service: &FakeService, held: &str, rerun: &str) {
    println!(
        "killed {kill_point}: Hold (after ops resolved it) calls {} applied {}; RerunAfterLease calls {} applied {}",
        service.calls(held),
        service.applied(held),
        service.calls(rerun),
        service.applied(rerun)
    );
}

pub fn a_crash_after_the_side_effect_before_the_completion_is_in_doubt_or_rerun_once_downstream<
    B: Backend,
>() {
    const CHARGED: &str = "side effect done, claim not completed";
    if let Some((mut conn, addr)) = as_crash_child::<B>() {
        let claims = payments(InDoubtPolicy::Hold);
        let held = [
            acquire(&mut conn, &claims, HELD),
            acquire(&mut conn, &claims, RERUN),
        ];
        for claim in &held {
            call(&addr, &claim.idempotency_key()).unwrap();
        }
        await_the_kill(CHARGED);
        return;
    }
    let (db, mut conn) = setup::<B>();
    let service = FakeService::start(Keys::Honoured);
    crash_a_child(
        "a_crash_after_the_side_effect_before_the_completion_is_in_doubt_or_rerun_once_downstream",
        db.url(),
        &service,
        CHARGED,
    );

    // At most once: in doubt, not charged again; ops find the charge and complete the claim
    // with it, and later deliveries get it back.
    let hold = payments(InDoubtPolicy::Hold);
    wait_out_the_lease(&mut conn, &hold, HELD);
    let redelivered = hold
        .run(&mut conn, HELD, call_service(service.addr()))
        .unwrap();
    assert!(redelivered.is_in_doubt(), "{redelivered:?}");
    let held_key = key_of(&mut conn, &hold, HELD);
    assert_eq!(service.calls(&held_key), 1, "not charged again");
    let charge = service
        .result_of(&held_key)
        .expect("the provider's log has it");
    hold.resolve(
        &mut conn,
        HELD,
        Resolution::Completed(charge.clone().into()),
        &ops("charge found at the provider under the claim's key"),
    )
    .unwrap();
    let after = hold
        .run(&mut conn, HELD, call_service(service.addr()))
        .unwrap();
    assert_eq!(after, ClaimOutcome::Completed(charge));
    assert_eq!(service.calls(&held_key), 1);

    // Re-run after the lease: called again with the same key, applied once downstream, and
    // the first charge comes back.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    wait_out_the_lease(&mut conn, &rerun, RERUN);
    let rerun_key = key_of(&mut conn, &rerun, RERUN);
    let first_charge = service.result_of(&rerun_key).unwrap();
    let rerun_outcome = rerun
        .run(&mut conn, RERUN, call_service(service.addr()))
        .unwrap();
    assert_eq!(rerun_outcome, ClaimOutcome::Ran(first_charge));
    assert_eq!(
        (service.calls(&rerun_key), service.applied(&rerun_key)),
        (2, 1)
    );
    report(
        "after the side effect, before the completion",
        &service,
        &held_key,
        &rerun_key,
    );
}

pub fn a_holder_outliving_its_lease_is_in_doubt_or_taken_over_and_then_fenced<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let mut other = db.connect();
    let service = FakeService::start(Keys::Honoured);

    // At most once: a delivery after the lease does not run it; nobody took over, so the slow
    // holder's completion still stands.
    let hold = payments(InDoubtPolicy::Hold);
    let slow = acquire(&mut conn, &hold, "order-3:charge");
    let charge = call(service.addr(), &slow.idempotency_key()).unwrap();
    wait_out_the_lease(&mut conn, &hold, "order-3:charge");
    let meanwhile = hold
        .run(&mut other, "order-3:charge", call_service(service.addr()))
        .unwrap();
    assert!(meanwhile.is_in_doubt(), "{meanwhile:?}");
    slow.complete(&mut conn, &charge).unwrap();
    let after = hold
        .run(&mut other, "order-3:charge", call_service(service.addr()))
        .unwrap();
    assert_eq!(after, ClaimOutcome::Completed(charge));

    // Re-run: another worker takes over; the slow holder's late completion is fenced, and its
    // record writes roll back with it.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    let slow = acquire(&mut conn, &rerun, "order-4:charge");
    let slow_charge = call(service.addr(), &slow.idempotency_key()).unwrap();
    wait_out_the_lease(&mut conn, &rerun, "order-4:charge");
    let taken_over = rerun
        .run(&mut other, "order-4:charge", call_service(service.addr()))
        .unwrap();
    assert_eq!(taken_over, ClaimOutcome::Ran(slow_charge.clone()));
    let late = slow.complete_with(&mut conn, &slow_charge, |tx| {
        tx.record_effect("late completion").map_err(Error::from)
    });
    assert!(
        matches!(
            late,
            Err(Error::ClaimFenced {
                attempt: 1,
                current: 2,
                state: ClaimState::Completed,
                ..
            })
        ),
        "{late:?}"
    );
    assert_eq!(conn.effects_of("late completion"), 0);
    let key = key_of(&mut conn, &rerun, "order-4:charge");
    assert_eq!(service.applied(&key), 1);
}

pub fn a_late_completion_stands_over_ops_retry_but_not_over_ops_completion<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let hold = payments(InDoubtPolicy::Hold);

    let slow = acquire(&mut conn, &hold, "order-5:charge");
    wait_out_the_lease(&mut conn, &hold, "order-5:charge");
    hold.resolve(
        &mut conn,
        "order-5:charge",
        Resolution::Retry,
        &ops("looked lost"),
    )
    .unwrap();
    slow.complete(&mut conn, &"fx-slow").unwrap();
    assert_eq!(
        state_of(&mut conn, &hold, "order-5:charge"),
        ClaimState::Completed
    );
    let replayed = hold
        .run(
            &mut conn,
            "order-5:charge",
            |_| -> Result<String, Unknown> { panic!("a completed claim does not run") },
        )
        .unwrap();
    assert_eq!(replayed, ClaimOutcome::Completed("fx-slow".to_owned()));

    let slow = acquire(&mut conn, &hold, "order-6:charge");
    wait_out_the_lease(&mut conn, &hold, "order-6:charge");
    let resolved = hold
        .resolve(
            &mut conn,
            "order-6:charge",
            Resolution::Completed("fx-ops".into()),
            &ops("charge found at the provider"),
        )
        .unwrap();
    assert_eq!(
        resolved.resolution.as_ref().unwrap().actor(),
        "ops@example.com"
    );
    let late = slow.complete(&mut conn, &"fx-slow");
    assert!(matches!(late, Err(Error::ClaimFenced { .. })), "{late:?}");
    let Claimed::Completed(done) = hold.claim(&mut conn, "order-6:charge").unwrap() else {
        panic!("completed by ops")
    };
    assert_eq!(done.result::<String>().unwrap(), "fx-ops");
    let record = hold.show(&mut conn, "order-6:charge").unwrap().unwrap();
    assert_eq!(
        record.resolution.unwrap().reason(),
        "charge found at the provider"
    );
}

pub fn only_a_claim_in_doubt_can_be_resolved<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = mailer();
    let _running = acquire(&mut conn, &claims, "user-3:welcome");
    let refused = claims.resolve(&mut conn, "user-3:welcome", Resolution::Abandon, &ops("no"));
    assert!(
        matches!(
            refused,
            Err(AdminError::ClaimNotInDoubt {
                state: ClaimState::InProgress,
                ..
            })
        ),
        "{refused:?}"
    );
    let missing = claims.resolve(&mut conn, "user-4:welcome", Resolution::Retry, &ops("no"));
    assert!(
        matches!(missing, Err(AdminError::ClaimNotFound { .. })),
        "{missing:?}"
    );
    assert_eq!(
        state_of(&mut conn, &claims, "user-3:welcome"),
        ClaimState::InProgress
    );
}

pub fn a_failed_side_effect_is_released_abandoned_or_in_doubt_as_its_error_says<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = mailer();
    let sent = |_: &Claim| Ok::<_, Error>("msg-1".to_owned());

    // Did not happen, may pass later: released, and the next delivery runs it.
    let refused = claims.run(&mut conn, "user-5:welcome", |_| {
        Err::<String, _>(Error::transient("connection refused"))
    });
    assert_eq!(Ack::of(&refused), Ack::Redeliver);
    assert_eq!(
        state_of(&mut conn, &claims, "user-5:welcome"),
        ClaimState::Released
    );
    let rerun = claims.run(&mut conn, "user-5:welcome", sent).unwrap();
    assert!(rerun.has_run());
    assert_eq!(
        claims
            .show(&mut conn, "user-5:welcome")
            .unwrap()
            .unwrap()
            .attempt,
        2
    );

    // Did not happen, never will: abandoned, and never run.
    let rejected = claims
        .run(&mut conn, "user-6:welcome", |_| {
            Err::<String, _>(Error::permanent("address rejected"))
        })
        .unwrap();
    let ClaimOutcome::Abandoned(abandoned) = &rejected else {
        panic!("{rejected:?}")
    };
    assert!(abandoned.reason().unwrap().contains("address rejected"));
    let again = claims.run(&mut conn, "user-6:welcome", sent).unwrap();
    assert!(matches!(again, ClaimOutcome::Abandoned(_)), "{again:?}");

    // Does not say: in doubt, with the error as its reason, and never run again.
    let timed_out = claims
        .run(&mut conn, "user-7:welcome", |_| {
            Err::<String, Unknown>("read timed out".into())
        })
        .unwrap();
    let ClaimOutcome::InDoubt(doubt) = &timed_out else {
        panic!("{timed_out:?}")
    };
    assert_eq!(doubt.reason(), "read timed out");
    assert_eq!(timed_out.ack(), Ack::Ack);
    assert!(claims
        .run(&mut conn, "user-7:welcome", sent)
        .unwrap()
        .is_in_doubt());

    // A panic does not say either: in doubt, and the panic goes on.
    let panicked = panic::catch_unwind(AssertUnwindSafe(|| {
        claims.run(&mut conn, "user-8:welcome", |_| -> Result<String, Error> {
            panic!("mailer client crashed")
        })
    }));
    assert!(panicked.is_err());
    let record = claims.show(&mut conn, "user-8:welcome").unwrap().unwrap();
    assert_eq!(record.state, ClaimState::InDoubt);
    assert!(record.reason.unwrap().contains("mailer client crashed"));

    // Where the side effect is deduplicated downstream, not saying means run it again.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    let failed = rerun.run(&mut conn, "order-7:charge", |_| {
        Err::<String, Unknown>("read timed out".into())
    });
    assert_eq!(failed.unwrap_err().to_string(), "read timed out");
    assert_eq!(
        state_of(&mut conn, &rerun, "order-7:charge"),
        ClaimState::Released
    );
}

pub fn a_reused_id_with_another_payload_is_refused_and_claims_nothing_more<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = mailer();
    let to = |address: &str| {
        Delivery::new("user-9:welcome")
            .unwrap()
            .json(serde_json::json!({ "to": address }))
    };
    let sent = |_: &Claim| Ok::<_, Error>("msg-9".to_owned());

    assert!(claims
        .run(&mut conn, to("a@example.com"), sent)
        .unwrap()
        .has_run());
    let reused = claims.run(&mut conn, to("b@example.com"), sent);
    assert!(
        matches!(reused, Err(Error::PayloadMismatch { .. })),
        "{reused:?}"
    );
    assert_eq!(Ack::of(&reused), Ack::Ack);
    let same = claims.run(&mut conn, to("a@example.com"), sent).unwrap();
    assert_eq!(same, ClaimOutcome::Completed("msg-9".to_owned()));
    let record = claims.show(&mut conn, "user-9:welcome").unwrap().unwrap();
    assert_eq!(record.deliveries, 2, "the refused delivery is not counted");
    assert_eq!(
        record.payload,
        Some(Payload::Json(serde_json::json!({ "to": "a@example.com" })))
    );
}

pub fn a_claim_inside_a_transaction_is_refused_and_claims_nothing<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let claims = mailer();
    conn.transaction(|tx| {
        let inside = claims.claim(tx, "user-10:welcome");
        assert!(
            matches!(inside, Err(Error::ClaimInsideTransaction)),
            "{inside:?}"
        );
        Ok::<_, diesel::result::Error>(())
    })
    .unwrap();
    assert!(claims.show(&mut conn, "user-10:welcome").unwrap().is_none());
}

pub fn the_completion_commits_with_its_record_writes_or_leaves_the_claim_in_doubt<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let service = FakeService::start(Keys::Honoured);
    let claims = payments(InDoubtPolicy::Hold);

    let charged = claims
        .run_and_record(
            &mut conn,
            "order-8:charge",
            call_service(service.addr()),
            |tx, charge| Ok(tx.record_effect(charge)?),
        )
        .unwrap();
    let ClaimOutcome::Ran(charge) = charged else {
        panic!("{charged:?}")
    };
    assert_eq!(conn.effects_of(&charge), 1);

    // The record fails: nothing of it commits, and the charge that did happen is not lost.
    let failed = claims.run_and_record(
        &mut conn,
        "order-9:charge",
        call_service(service.addr()),
        |_tx, _charge| Err::<(), Unknown>("the order row is gone".into()),
    );
    assert_eq!(failed.unwrap_err().to_string(), "the order row is gone");
    let record = claims.show(&mut conn, "order-9:charge").unwrap().unwrap();
    assert_eq!(record.state, ClaimState::InDoubt);
    let charge = service.result_of(&record.idempotency_key).unwrap();
    let reason = record.reason.unwrap();
    assert!(
        reason.contains(&charge) && reason.contains("the order row is gone"),
        "{reason}"
    );
    assert_eq!(conn.effects_of(&charge), 0);
    assert_eq!(service.calls(&record.idempotency_key), 1);
}

pub fn a_long_side_effect_extends_its_lease_and_keeps_other_deliveries_out<B: Backend>() {
    let (db, mut conn) = setup::<B>();
    let mut other = db.connect();
    let claims = mailer().lease(SHORT_LEASE);

    let mut claim = acquire(&mut conn, &claims, "report-1");
    claim.extend(&mut other, Duration::from_secs(60)).unwrap();
    thread::sleep(SHORT_LEASE + Duration::from_millis(50));
    let meanwhile = claims.claim(&mut other, "report-1").unwrap();
    let Claimed::InProgress(held) = meanwhile else {
        panic!("the extended lease still runs: {meanwhile:?}")
    };
    assert_eq!(held.lease_until(), claim.lease_until());
    claim.complete(&mut conn, &"report sent").unwrap();
    assert_eq!(
        state_of(&mut conn, &claims, "report-1"),
        ClaimState::Completed
    );

    // Too late: a delivery found the lease run out, and the claim stays in doubt; the
    // holder may still complete it.
    let mut late = acquire(&mut conn, &claims, "report-2");
    wait_out_the_lease(&mut conn, &claims, "report-2");
    let found = claims.claim(&mut other, "report-2").unwrap();
    assert!(matches!(found, Claimed::InDoubt(_)), "{found:?}");
    let refused = late.extend(&mut conn, Duration::from_secs(60));
    assert!(
        matches!(
            refused,
            Err(Error::ClaimFenced {
                state: ClaimState::InDoubt,
                ..
            })
        ),
        "{refused:?}"
    );
    late.complete(&mut conn, &"report sent late").unwrap();
    assert_eq!(
        state_of(&mut conn, &claims, "report-2"),
        ClaimState::Completed
    );
}
