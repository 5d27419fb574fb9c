//! Claims on side effects outside the database, against a fake external service that counts
//! calls and honours (or ignores) an idempotency key: stored results, concurrent deliveries,
//! crashes at both kill points, leases under both policies, fencing and ops' resolutions, on
//! every backend.

use diesel_inbox::AdminError;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::thread;
use std::time::Duration;

use chrono::Utc;
use diesel_inbox::{
    claim::{self, Claim, ClaimOutcome, ClaimState, Claimed, Claims, InDoubtPolicy, Resolution},
    Ack, Audit, Delivery, Error, Inbox, Payload,
};

use crate::support::{
    call, concurrently, setup, setup_flavour, Backend, ChildTest, FakeService, Flavour, Keys,
    TestConn, Tx,
};

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

/// [`call_service`] as a flavoured scenario's side effect.
macro_rules! calls {
    ($addr:expr) => {
        async |claim: &Claim| -> Result<String, Unknown> {
            Ok(call($addr, &claim.idempotency_key())?)
        }
    };
}

/// [`acquire`] on flavour `F`.
async fn acquire_on<F: Flavour>(conn: &mut F::Conn, claims: &Claims, id: &str) -> F::Held {
    match F::claim(claims, conn, id).await.unwrap() {
        Claimed::Acquired(claim) => claim,
        other => panic!("expected to acquire {id}, got {other:?}"),
    }
}

fn ops(reason: &str) -> Audit {
    Audit::new("ops@example.com", reason).unwrap()
}

pub async fn a_completed_claim_returns_its_stored_result_and_the_side_effect_runs_once<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let service = FakeService::start(Keys::Ignored);
    let claims = mailer();
    let addr = service.addr();

    let first = F::run_claim(&claims, &mut conn, "user-1:welcome", calls!(addr)).await;
    let ClaimOutcome::Ran(sent) = first.unwrap() else {
        panic!("the first delivery runs the side effect")
    };
    let again = F::run_claim(&claims, &mut conn, "user-1:welcome", calls!(addr)).await;
    let again = again.unwrap();
    let Claimed::Completed(done) = F::claim(&claims, &mut conn, "user-1:welcome")
        .await
        .unwrap()
    else {
        panic!("a completed claim")
    };

    assert_eq!(again, ClaimOutcome::Completed(sent.clone()));
    assert_eq!(Ack::of(&Ok::<_, Error>(again)), Ack::Ack);
    assert_eq!(done.result::<String>().unwrap(), sent);
    let key = key_of(&mut check, &claims, "user-1:welcome");
    assert_eq!(service.calls(&key), 1);
    let record = F::show_claim(&claims, &mut conn, "user-1:welcome").await;
    let record = record.unwrap().unwrap();
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

pub async fn a_holder_outliving_its_lease_is_in_doubt_or_taken_over_and_then_fenced<F: Flavour>() {
    let (db, mut check, mut conn) = setup_flavour::<F>().await;
    let mut other = F::connect(&db).await;
    let service = FakeService::start(Keys::Honoured);
    let addr = service.addr();

    // At most once: a delivery after the lease does not run it; nobody took over, so the slow
    // holder's completion still stands.
    let hold = payments(InDoubtPolicy::Hold);
    let slow = acquire_on::<F>(&mut conn, &hold, "order-3:charge").await;
    let charge = call(addr, &F::idempotency_key(&slow)).unwrap();
    wait_out_the_lease(&mut check, &hold, "order-3:charge");
    let meanwhile = F::run_claim(&hold, &mut other, "order-3:charge", calls!(addr)).await;
    let meanwhile = meanwhile.unwrap();
    assert!(meanwhile.is_in_doubt(), "{meanwhile:?}");
    F::complete(slow, &mut conn, &charge).await.unwrap();
    let after = F::run_claim(&hold, &mut other, "order-3:charge", calls!(addr)).await;
    assert_eq!(after.unwrap(), ClaimOutcome::Completed(charge));

    // Re-run: another worker takes over; the slow holder's late completion is fenced, and its
    // record writes roll back with it.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    let slow = acquire_on::<F>(&mut conn, &rerun, "order-4:charge").await;
    let slow_charge = call(addr, &F::idempotency_key(&slow)).unwrap();
    wait_out_the_lease(&mut check, &rerun, "order-4:charge");
    let taken_over = F::run_claim(&rerun, &mut other, "order-4:charge", calls!(addr)).await;
    assert_eq!(taken_over.unwrap(), ClaimOutcome::Ran(slow_charge.clone()));
    let record = async |tx: &mut F::Conn| {
        tx.write_effect("late completion")
            .await
            .map_err(Error::from)
    };
    let late = F::complete_with(slow, &mut conn, &slow_charge, record).await;
    assert!(
        matches!(
            late,
            Err(Error::Claim(claim::Refused::Fenced {
                attempt: 1,
                current: 2,
                state: ClaimState::Completed,
                ..
            }))
        ),
        "{late:?}"
    );
    assert_eq!(check.effects_of("late completion"), 0);
    let key = key_of(&mut check, &rerun, "order-4:charge");
    assert_eq!(service.applied(&key), 1);
}

pub async fn a_late_completion_stands_over_ops_retry_but_not_over_ops_completion<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let hold = payments(InDoubtPolicy::Hold);

    let slow = acquire_on::<F>(&mut conn, &hold, "order-5:charge").await;
    wait_out_the_lease(&mut check, &hold, "order-5:charge");
    let lost = ops("looked lost");
    F::resolve_claim(&hold, &mut conn, "order-5:charge", Resolution::Retry, &lost)
        .await
        .unwrap();
    F::complete(slow, &mut conn, &"fx-slow").await.unwrap();
    assert_eq!(
        state_of(&mut check, &hold, "order-5:charge"),
        ClaimState::Completed
    );
    let never =
        async |_: &Claim| -> Result<String, Unknown> { panic!("a completed claim does not run") };
    let replayed = F::run_claim(&hold, &mut conn, "order-5:charge", never).await;
    assert_eq!(
        replayed.unwrap(),
        ClaimOutcome::Completed("fx-slow".to_owned())
    );

    let slow = acquire_on::<F>(&mut conn, &hold, "order-6:charge").await;
    wait_out_the_lease(&mut check, &hold, "order-6:charge");
    let found = ops("charge found at the provider");
    let by_ops = Resolution::Completed("fx-ops".into());
    let resolved = F::resolve_claim(&hold, &mut conn, "order-6:charge", by_ops, &found).await;
    assert_eq!(
        resolved.unwrap().resolution.as_ref().unwrap().actor(),
        "ops@example.com"
    );
    let late = F::complete(slow, &mut conn, &"fx-slow").await;
    assert!(
        matches!(late, Err(Error::Claim(claim::Refused::Fenced { .. }))),
        "{late:?}"
    );
    let Claimed::Completed(done) = F::claim(&hold, &mut conn, "order-6:charge").await.unwrap()
    else {
        panic!("completed by ops")
    };
    assert_eq!(done.result::<String>().unwrap(), "fx-ops");
    let record = F::show_claim(&hold, &mut conn, "order-6:charge").await;
    assert_eq!(
        record.unwrap().unwrap().resolution.unwrap().reason(),
        "charge found at the provider"
    );
}

pub async fn only_a_claim_in_doubt_can_be_resolved<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let claims = mailer();
    let _running = acquire_on::<F>(&mut conn, &claims, "user-3:welcome").await;
    let no = ops("no");
    let refused = F::resolve_claim(
        &claims,
        &mut conn,
        "user-3:welcome",
        Resolution::Abandon,
        &no,
    )
    .await;
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
    let missing =
        F::resolve_claim(&claims, &mut conn, "user-4:welcome", Resolution::Retry, &no).await;
    assert!(
        matches!(missing, Err(AdminError::ClaimNotFound { .. })),
        "{missing:?}"
    );
    assert_eq!(
        state_of(&mut check, &claims, "user-3:welcome"),
        ClaimState::InProgress
    );
}

pub async fn a_failed_side_effect_is_released_abandoned_or_in_doubt_as_its_error_says<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let claims = mailer();
    let sent = async |_: &Claim| Ok::<_, Error>("msg-1".to_owned());

    // Did not happen, may pass later: released, and the next delivery runs it.
    let refused_by = async |_: &Claim| Err::<String, _>(Error::transient("connection refused"));
    let refused = F::run_claim(&claims, &mut conn, "user-5:welcome", refused_by).await;
    assert_eq!(Ack::of(&refused), Ack::Redeliver);
    assert_eq!(
        state_of(&mut check, &claims, "user-5:welcome"),
        ClaimState::Released
    );
    let rerun = F::run_claim(&claims, &mut conn, "user-5:welcome", sent).await;
    assert!(rerun.unwrap().has_run());
    let record = F::show_claim(&claims, &mut conn, "user-5:welcome").await;
    assert_eq!(record.unwrap().unwrap().attempt, 2);

    // Did not happen, never will: abandoned, and never run.
    let rejected_by = async |_: &Claim| Err::<String, _>(Error::permanent("address rejected"));
    let rejected = F::run_claim(&claims, &mut conn, "user-6:welcome", rejected_by).await;
    let rejected = rejected.unwrap();
    let ClaimOutcome::Abandoned(abandoned) = &rejected else {
        panic!("{rejected:?}")
    };
    assert!(abandoned.reason().unwrap().contains("address rejected"));
    let again = F::run_claim(&claims, &mut conn, "user-6:welcome", sent).await;
    let again = again.unwrap();
    assert!(matches!(again, ClaimOutcome::Abandoned(_)), "{again:?}");

    // Does not say: in doubt, with the error as its reason, and never run again.
    let timing_out = async |_: &Claim| Err::<String, Unknown>("read timed out".into());
    let timed_out = F::run_claim(&claims, &mut conn, "user-7:welcome", timing_out).await;
    let timed_out = timed_out.unwrap();
    let ClaimOutcome::InDoubt(doubt) = &timed_out else {
        panic!("{timed_out:?}")
    };
    assert_eq!(doubt.reason(), "read timed out");
    assert_eq!(timed_out.ack(), Ack::Ack);
    let later = F::run_claim(&claims, &mut conn, "user-7:welcome", sent).await;
    assert!(later.unwrap().is_in_doubt());

    // A panic does not say either: in doubt, and the panic goes on.
    let crashing = async |_: &Claim| -> Result<String, Error> { panic!("mailer client crashed") };
    let run = F::run_claim(&claims, &mut conn, "user-8:welcome", crashing);
    let panicked = AssertUnwindSafe(run).catch_unwind().await;
    assert!(panicked.is_err());
    let record = F::show_claim(&claims, &mut conn, "user-8:welcome").await;
    let record = record.unwrap().unwrap();
    assert_eq!(record.state, ClaimState::InDoubt);
    assert!(record.reason.unwrap().contains("mailer client crashed"));

    // Where the side effect is deduplicated downstream, not saying means run it again.
    let rerun = payments(InDoubtPolicy::RerunAfterLease);
    let failed = F::run_claim(&rerun, &mut conn, "order-7:charge", timing_out).await;
    assert_eq!(failed.unwrap_err().to_string(), "read timed out");
    assert_eq!(
        state_of(&mut check, &rerun, "order-7:charge"),
        ClaimState::Released
    );
}

pub async fn a_reused_id_with_another_payload_is_refused_and_claims_nothing_more<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let claims = mailer();
    let to = |address: &str| {
        Delivery::new("user-9:welcome")
            .unwrap()
            .json(serde_json::json!({ "to": address }))
    };
    let sent = async |_: &Claim| Ok::<_, Error>("msg-9".to_owned());

    let first = F::run_claim(&claims, &mut conn, to("a@example.com"), sent).await;
    assert!(first.unwrap().has_run());
    let reused = F::run_claim(&claims, &mut conn, to("b@example.com"), sent).await;
    assert!(
        matches!(reused, Err(Error::PayloadMismatch { .. })),
        "{reused:?}"
    );
    assert_eq!(Ack::of(&reused), Ack::Ack);
    let same = F::run_claim(&claims, &mut conn, to("a@example.com"), sent).await;
    assert_eq!(same.unwrap(), ClaimOutcome::Completed("msg-9".to_owned()));
    let record = F::show_claim(&claims, &mut conn, "user-9:welcome").await;
    let record = record.unwrap().unwrap();
    assert_eq!(record.deliveries, 2, "the refused delivery is not counted");
    assert_eq!(
        record.payload,
        Some(Payload::Json(serde_json::json!({ "to": "a@example.com" })))
    );
}

pub async fn a_claim_inside_a_transaction_is_refused_and_claims_nothing<F: Flavour>() {
    let (_db, _check, mut conn) = setup_flavour::<F>().await;
    let claims = mailer();

    F::begin(&mut conn).await;
    let inside = F::claim(&claims, &mut conn, "user-10:welcome").await;
    assert!(
        matches!(
            inside,
            Err(Error::InsideTransaction {
                operation: "Claims::claim or Claims::run"
            })
        ),
        "{inside:?}"
    );
    F::end(&mut conn, true).await;

    let record = F::show_claim(&claims, &mut conn, "user-10:welcome").await;
    assert!(record.unwrap().is_none());
}

pub async fn the_completion_commits_with_its_record_writes_or_leaves_the_claim_in_doubt<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let service = FakeService::start(Keys::Honoured);
    let claims = payments(InDoubtPolicy::Hold);
    let addr = service.addr();

    let record = async |tx: &mut F::Conn, charge: &String| Ok(tx.write_effect(charge).await?);
    let charged = F::run_claimed(&claims, &mut conn, "order-8:charge", calls!(addr), record).await;
    let ClaimOutcome::Ran(charge) = charged.unwrap() else {
        panic!("the charge ran")
    };
    assert_eq!(check.effects_of(&charge), 1);

    // The record fails: nothing of it commits, and the charge that did happen is not lost.
    let gone =
        async |_: &mut F::Conn, _: &String| Err::<(), Unknown>("the order row is gone".into());
    let failed = F::run_claimed(&claims, &mut conn, "order-9:charge", calls!(addr), gone).await;
    assert_eq!(failed.unwrap_err().to_string(), "the order row is gone");
    let record = F::show_claim(&claims, &mut conn, "order-9:charge").await;
    let record = record.unwrap().unwrap();
    assert_eq!(record.state, ClaimState::InDoubt);
    let charge = service.result_of(&record.idempotency_key).unwrap();
    let reason = record.reason.unwrap();
    assert!(
        reason.contains(&charge) && reason.contains("the order row is gone"),
        "{reason}"
    );
    assert_eq!(check.effects_of(&charge), 0);
    assert_eq!(service.calls(&record.idempotency_key), 1);
}

pub async fn a_long_side_effect_extends_its_lease_and_keeps_other_deliveries_out<F: Flavour>() {
    let (db, mut check, mut conn) = setup_flavour::<F>().await;
    let mut other = F::connect(&db).await;
    let claims = mailer().lease(SHORT_LEASE);

    let mut claim = acquire_on::<F>(&mut conn, &claims, "report-1").await;
    F::extend(&mut claim, &mut other, Duration::from_secs(60))
        .await
        .unwrap();
    thread::sleep(SHORT_LEASE + Duration::from_millis(50));
    let meanwhile = F::claim(&claims, &mut other, "report-1").await.unwrap();
    let Claimed::InProgress(held) = meanwhile else {
        panic!("the extended lease still runs")
    };
    assert_eq!(held.lease_until(), F::lease_until(&claim));
    F::complete(claim, &mut conn, &"report sent").await.unwrap();
    assert_eq!(
        state_of(&mut check, &claims, "report-1"),
        ClaimState::Completed
    );

    // Too late: a delivery found the lease run out, and the claim stays in doubt; the
    // holder may still complete it.
    let mut late = acquire_on::<F>(&mut conn, &claims, "report-2").await;
    wait_out_the_lease(&mut check, &claims, "report-2");
    let found = F::claim(&claims, &mut other, "report-2").await.unwrap();
    assert!(
        matches!(found, Claimed::InDoubt(_)),
        "found no claim in doubt"
    );
    let refused = F::extend(&mut late, &mut conn, Duration::from_secs(60)).await;
    assert!(
        matches!(
            refused,
            Err(Error::Claim(claim::Refused::Fenced {
                state: ClaimState::InDoubt,
                ..
            }))
        ),
        "{refused:?}"
    );
    F::complete(late, &mut conn, &"report sent late")
        .await
        .unwrap();
    assert_eq!(
        state_of(&mut check, &claims, "report-2"),
        ClaimState::Completed
    );
}

pub async fn a_held_claim_completes_with_its_records_in_one_transaction<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let charges = Inbox::new("billing").unwrap().claims();

    let claim = acquire_on::<F>(&mut conn, &charges, "order-7").await;
    let meanwhile = F::claim(&charges, &mut conn, "order-7").await.unwrap();
    let charge_id = String::from("ch_1");
    let record = async |tx: &mut F::Conn| Ok::<_, Error>(tx.write_effect("ch_1").await?);
    F::complete_with(claim, &mut conn, &charge_id, record)
        .await
        .unwrap();
    let after = F::claim(&charges, &mut conn, "order-7").await.unwrap();

    assert!(matches!(meanwhile, Claimed::InProgress(_)), "{meanwhile:?}");
    let Claimed::Completed(done) = after else {
        panic!("completed: {after:?}");
    };
    assert_eq!(done.result::<String>().unwrap(), charge_id);
    assert_eq!(check.effects_of("ch_1"), 1);
}
