//! The `diesel-inbox` binary end to end, on each backend: dead letters made through the
//! library, then listed, shown, exported, discarded and released through the CLI; a cursor's gaps
//! listed and resolved; a chain's reorgs listed with the side effects they orphaned; claims in
//! doubt listed, shown and resolved; the outbox's rows listed, shown, retried and pruned;
//! replays of the outbox planned, listed, shown, probed, reconciled, decided and pruned; the
//! doctor; the migrations.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use diesel::r2d2::R2D2Connection;
use diesel_inbox::chain::{Block, BlockId, ChainHandler};
use diesel_inbox::{
    claim::{ClaimState, Claimed, Claims},
    cursor::{Cursor, GapState, Resume, Sequenced},
    envelope::Envelope,
    outbox::{Outbox, OutboxMessage, OutboxState, PublishError, Publisher, Relay},
    AdminError, Audit, Delivery, Error, EventId, Inbox, InboxConnection, Payload,
};
use diesel_inbox_test::TestDatabase;
use serde_json::Value;

/// Runs the binary on `url` with `args`; `DATABASE_URL` and `USER` cleared, so only what the test
/// passes counts.
fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_diesel-inbox"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("USER")
        .output()
        .expect("the binary runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited, not killed")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Asserts the exit code, showing what the binary said when it differs.
#[track_caller]
fn expect(output: &Output, expected: i32) -> String {
    assert_eq!(
        code(output),
        expected,
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(output)
}

/// Asserts the exit code and that stderr says `says`.
#[track_caller]
fn fails(output: &Output, expected: i32, says: &str) {
    expect(output, expected);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(says), "{says:?} not in stderr:\n{stderr}");
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&expect(output, 0)).expect("valid JSON")
}

/// `args` for the consumer `orders`.
fn with<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["--consumer", "orders"][..], args].concat()
}

fn refuse<C>(_: &mut C) -> Result<(), Error> {
    Err(Error::Database(diesel::result::Error::NotFound))
}

/// The scenario, once for every backend: `drop_index` drops `diesel_inbox_events_settled`.
fn the_cli_operates_dead_letters_gaps_claims_the_outbox_doctor_and_migrations<C>(
    db: &TestDatabase<C>,
    drop_index: &str,
) where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    let url = db.url();
    let mut conn = db.connect();
    let inbox = Inbox::new("orders").unwrap().max_attempts(1);
    let order = Delivery::new("evt-1")
        .unwrap()
        .json(serde_json::json!({"order": "A-1", "qty": 2}));
    let bytes = Delivery::new("evt-2")
        .unwrap()
        .with_payload(Payload::Bytes(vec![0, 0xff, 1]));
    for delivery in [&order, &bytes] {
        let outcome = inbox.process(&mut conn, delivery, refuse).unwrap();
        assert!(outcome.is_dead_lettered(), "{outcome:?}");
    }

    lists_shows_and_exports(url);
    discards_and_releases(url, &mut conn, &inbox, &order);
    counts_then_prunes(url, &mut conn);
    lists_and_resolves_gaps(url, &mut conn);
    lists_reorgs_and_the_side_effects_they_orphaned(url, &mut conn);
    lists_shows_and_resolves_claims(url, &mut conn);
    pages_through_gaps_and_claims_once_in_key_order(url);
    says_which_consumers_have_gaps_and_claims_and_lists_them_all(url, &mut conn);
    lists_shows_retries_and_prunes_the_outbox(url, &mut conn);
    doctor_passes_then_fails(url, &mut conn, drop_index);
    prints_and_installs_migrations(url);
}

fn lists_shows_and_exports(url: &str) {
    let listed = json(&cli(
        url,
        &with(&["dead-letters", "list", "--format", "json"]),
    ));
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["evt-1", "evt-2"]);
    assert_eq!(listed[0]["attempts"], 1);
    assert_eq!(listed[0]["consumer"], "orders");
    let table = expect(&cli(url, &with(&["dead-letters", "list"])), 0);
    assert!(table.starts_with("EVENT ID"), "{table}");
    assert!(table.contains("evt-2"), "{table}");
    let other = json(&cli(url, &["dead-letters", "list", "--format", "json"]));
    assert_eq!(
        other,
        serde_json::json!([]),
        "the default consumer has none"
    );

    // show
    let shown = json(&cli(
        url,
        &with(&["dead-letters", "show", "evt-1", "--format", "json"]),
    ));
    assert_eq!(shown["state"], "dead-lettered");
    assert_eq!(
        shown["payload"],
        serde_json::json!({"order": "A-1", "qty": 2})
    );
    assert_eq!(shown["history"].as_array().unwrap().len(), 2, "{shown}");
    expect(&cli(url, &with(&["dead-letters", "show", "nope"])), 1);

    // export
    let exported = expect(&cli(url, &with(&["dead-letters", "export"])), 0);
    let lines: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["payload_kind"], "json");
    assert_eq!(
        lines[0]["payload"],
        serde_json::json!({"order": "A-1", "qty": 2})
    );
    assert_eq!(
        (&lines[1]["payload_kind"], &lines[1]["payload"]),
        (&Value::from("bytes"), &Value::from("AP8B"))
    );
    assert!(lines[0]["first_failed_at"]
        .as_str()
        .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dead.jsonl");
    let file_arg = file.to_str().unwrap();
    expect(
        &cli(
            url,
            &with(&["dead-letters", "export", "--output", file_arg]),
        ),
        0,
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), exported);
}

fn discards_and_releases<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    inbox: &Inbox,
    order: &Delivery,
) {
    // discard: refused without --yes, changing nothing; done with it
    let discard = with(&[
        "dead-letters",
        "discard",
        "evt-2",
        "--actor",
        "ops",
        "--reason",
        "obsolete",
    ]);
    let refused = cli(url, &discard);
    expect(&refused, 2);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--yes"));
    assert_eq!(inbox.dead_letters().list(conn, None, 100).unwrap().len(), 2);
    let no_actor = cli(
        url,
        &with(&[
            "dead-letters",
            "discard",
            "evt-2",
            "--actor",
            " ",
            "--reason",
            "x",
            "--yes",
        ]),
    );
    expect(&no_actor, 2);
    let discarded = json(&cli(
        url,
        &[&discard[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(discarded["state"], "discarded");
    let record = inbox.dead_letters().show(conn, "evt-2").unwrap();
    assert_eq!(
        record.history.last().and_then(|h| h.actor.as_deref()),
        Some("ops")
    );

    // release: then a delivery runs the effect once
    let release = with(&[
        "dead-letters",
        "release",
        "evt-1",
        "--actor",
        "ops",
        "--reason",
        "fixed",
        "--yes",
    ]);
    expect(&cli(url, &release), 0);
    let mut runs = 0;
    let mut deliver = |conn: &mut C| {
        inbox
            .process(conn, order, |_tx| {
                runs += 1;
                Ok::<_, Error>(())
            })
            .unwrap()
    };
    assert!(deliver(conn).is_processed());
    assert!(deliver(conn).is_duplicate());
    assert_eq!(runs, 1);
    let again = cli(url, &release);
    expect(&again, 1);
    assert!(String::from_utf8_lossy(&again.stderr).contains("released"));
    assert!(inbox
        .dead_letters()
        .list(conn, None, 100)
        .unwrap()
        .is_empty());
}

/// After the releases: evt-1 processed once and delivered twice, evt-2 discarded.
fn counts_then_prunes<C: InboxConnection>(url: &str, conn: &mut C) {
    let stats = json(&cli(url, &with(&["stats", "--format", "json"])));
    assert_eq!(stats["consumer"], "orders");
    assert_eq!(stats["totals"]["processed"], 1, "{stats}");
    assert_eq!(stats["totals"]["duplicates"], 1, "{stats}");
    assert_eq!(stats["totals"]["discarded"], 1, "{stats}");
    assert_eq!(stats["recent"]["dead_lettered"], 2, "{stats}");
    let all = json(&cli(url, &["stats", "--all", "--format", "json"]));
    assert_eq!(all[0]["consumer"], "orders", "{all}");
    let table = expect(&cli(url, &with(&["stats"])), 0);
    assert!(table.contains("orders"), "{table}");

    conn.batch_execute(
        "UPDATE diesel_inbox_events SET processed_at = '2000-01-01 00:00:00', \
         last_seen_at = '2000-01-01 00:00:00' WHERE consumer = 'orders'",
    )
    .unwrap();
    let prune = with(&["prune", "--older-than", "30d", "--redelivery-window", "7d"]);
    let refused = cli(url, &prune);
    expect(&refused, 2);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("would prune 1 events"),
        "{refused:?}"
    );
    let below = cli(
        url,
        &with(&[
            "prune",
            "--older-than",
            "1d",
            "--redelivery-window",
            "7d",
            "--yes",
        ]),
    );
    expect(&below, 1);
    assert!(String::from_utf8_lossy(&below.stderr).contains("redelivery window"));
    let pruned = json(&cli(
        url,
        &[&prune[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(pruned["events"], 1, "{pruned}");
    let stats = json(&cli(url, &with(&["stats", "--format", "json"])));
    assert_eq!(stats["totals"]["processed"], 0, "{stats}");
    assert_eq!(
        stats["totals"]["discarded"], 1,
        "a discarded event is never pruned"
    );
}

/// A skipped gap (2..4 of `orders-0`) and an evicted one (2..9 of `orders-1`), made by cursors.
fn lists_and_resolves_gaps<C: InboxConnection>(url: &str, conn: &mut C) {
    let inbox = Inbox::new("orders").unwrap();
    let (skipping, evicted) = (
        inbox.cursor("orders-0").unwrap(),
        inbox.cursor("orders-1").unwrap(),
    );
    let apply = |_tx: &mut C| Ok::<_, Error>(());
    let found: Vec<usize> = [
        (&skipping, Sequenced::new(1)),
        (&skipping, Sequenced::new(5)),
        (&evicted, Sequenced::new(1)),
        (&evicted, Sequenced::new(10).first_available(10)),
    ]
    .into_iter()
    .map(|(cursor, delivery)| cursor.process(conn, delivery, apply).unwrap().gaps().len())
    .collect();
    assert_eq!(found, [0, 1, 0, 1]);
    let id = skipping.gaps().open(conn).unwrap()[0].as_ref().unwrap().id;

    lists_gaps(url, id);
    resolves_a_gap(url, conn, &skipping, id);
}

/// The listing: the cursors, then the open gaps.
fn lists_gaps(url: &str, id: i64) {
    let listed = json(&cli(url, &with(&["gaps", "--format", "json"])));
    assert_eq!(listed["consumer"], "orders");
    let cursor = &listed["cursors"][0];
    assert_eq!(
        (
            &cursor["stream"],
            &cursor["watermark"],
            &cursor["high"],
            &cursor["resume_at"]
        ),
        (
            &Value::from("orders-0"),
            &Value::from(1),
            &Value::from(5),
            &Value::from(2)
        ),
        "{listed}"
    );
    assert_eq!(listed["cursors"][1]["resume_at"], 11, "{listed}");
    let gap = &listed["gaps"][0];
    assert_eq!(gap["id"], id, "{listed}");
    assert_eq!(
        (&gap["first"], &gap["last"], &gap["missing"]),
        (&Value::from(2), &Value::from(4), &Value::from(3)),
        "{listed}"
    );
    assert_eq!(
        (&gap["cause"], &gap["state"]),
        (&Value::from("skipped"), &Value::from("open"))
    );
    assert_eq!(listed["gaps"][1]["cause"], "evicted", "{listed}");
    let table = expect(&cli(url, &with(&["gaps"])), 0);
    assert!(table.starts_with("STREAM"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&format!("{id} ")) && l.contains("2..4")),
        "{table}"
    );
    let one = json(&cli(
        url,
        &with(&["gaps", "--stream", "orders-1", "--format", "json"]),
    ));
    assert_eq!(one["cursors"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["gaps"][0]["first"], 2, "{one}");
    assert_eq!(one["gaps"][0]["last"], 9, "{one}");
    let other = json(&cli(url, &["gaps", "--format", "json"]));
    assert_eq!(
        other["gaps"],
        serde_json::json!([]),
        "the default consumer has none"
    );
}

/// Resolving: refused without --yes or a reason, changing nothing; done with both, once.
fn resolves_a_gap<C: InboxConnection>(url: &str, conn: &mut C, cursor: &Cursor, id: i64) {
    let id_arg = id.to_string();
    let resolve = with(&[
        "gaps",
        "resolve",
        &id_arg,
        "--actor",
        "ops",
        "--reason",
        "deleted upstream",
    ]);
    fails(&cli(url, &resolve), 2, "--yes");
    let blank = [
        "gaps", "resolve", &id_arg, "--actor", "ops", "--reason", " ", "--yes",
    ];
    fails(&cli(url, &with(&blank)), 2, "non-empty reason");
    assert_eq!(cursor.resume(conn).unwrap(), Resume::At(2));
    let resolved = json(&cli(
        url,
        &[&resolve[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(resolved["gap"]["state"], "resolved", "{resolved}");
    assert_eq!(resolved["gap"]["resolved_by"], "ops");
    assert_eq!(resolved["gap"]["resolution"], "deleted upstream");
    assert_eq!(resolved["cursor"]["resume_at"], 6, "{resolved}");
    assert_eq!(cursor.resume(conn).unwrap(), Resume::At(6));
    let listed = cursor.gaps().list(conn, 0, 100).unwrap();
    let closed = listed[0].as_ref().unwrap();
    assert_eq!(closed.state, GapState::Resolved);
    assert_eq!(closed.resolution.as_ref().map(Audit::actor), Some("ops"));

    // a closed or unknown gap is an error; the listing keeps the resolved one under --all
    let again = cli(url, &[&resolve[..], &["--yes"]].concat());
    fails(&again, 1, &format!("gap {id} is resolved"));
    let unknown = (id + 1000).to_string();
    let missing = [
        "gaps", "resolve", &unknown, "--actor", "ops", "--reason", "x", "--yes",
    ];
    fails(&cli(url, &with(&missing)), 1, &format!("no gap {unknown}"));
    let open = json(&cli(
        url,
        &with(&["gaps", "--stream", "orders-0", "--format", "json"]),
    ));
    assert_eq!(open["gaps"], serde_json::json!([]), "{open}");
    let all = json(&cli(url, &with(&["gaps", "--all", "--format", "json"])));
    assert_eq!(all["gaps"][0]["state"], "resolved", "{all}");
    assert!(all["gaps"][0]["closed_at"].is_string(), "{all}");
    let table = expect(&cli(url, &with(&["gaps", "--all"])), 0);
    assert!(
        table.contains("RESOLVED BY") && table.contains("deleted upstream"),
        "{table}"
    );
}

/// `reorgs` with `args` for the consumer `indexer`.
fn by<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["--consumer", "indexer", "reorgs"][..], args].concat()
}

/// Takes chain events in, and lets reorgs take them back: effects kept nowhere.
struct Indexer;

impl<C> ChainHandler<C> for Indexer {
    type Event = ();
    type Error = Error;
    fn apply(&mut self, _: &mut C, _: &BlockId, _: &EventId, (): &()) -> Result<(), Error> {
        Ok(())
    }
    fn revert(&mut self, _: &mut C, _: &BlockId, _: &EventId) -> Result<(), Error> {
        Ok(())
    }
}

/// Consumer `indexer`'s chain `eth:main`: 1a carries `payout`, whose claimed side effect
/// completes; 1b replaces 1a, a reorg that orphans the side effect.
fn lists_reorgs_and_the_side_effects_they_orphaned<C: InboxConnection>(url: &str, conn: &mut C) {
    let inbox = Inbox::new("indexer").unwrap();
    let chain = inbox.chain("eth:main", 64).unwrap();
    let block = |height, hash: &str, parent: &str, events: &[&str]| {
        let ids = events.iter().map(|e| (EventId::new(*e).unwrap(), ()));
        Block::new(height, hash, parent).unwrap().events_from(ids)
    };
    for b in [block(0, "0a", "g", &[]), block(1, "1a", "0a", &["payout"])] {
        assert!(chain
            .process(conn, &b, &mut Indexer)
            .unwrap()
            .is_processed());
    }
    let paid = inbox.claims().run(conn, "payout", |_| Ok::<_, Error>(()));
    assert!(paid.is_ok(), "{paid:?}");
    let outcome = chain.process(conn, &block(1, "1b", "0a", &[]), &mut Indexer);
    assert!(outcome.unwrap().reorg().is_some());

    let listed = json(&cli(url, &by(&["--format", "json"])));
    let reorg = &listed["reorgs"][0];
    assert_eq!(reorg["stream"], "eth:main", "{listed}");
    assert_eq!(reorg["ancestor"], 0, "{listed}");
    assert_eq!(reorg["old_head"]["hash"], "1a", "{listed}");
    assert_eq!(reorg["new_head"]["hash"], "1b", "{listed}");
    assert_eq!(reorg["depth"], 1, "{listed}");
    assert_eq!(reorg["events_reverted"], 1, "{listed}");
    assert_eq!(reorg["events_reapplied"], 0, "{listed}");
    assert_eq!(listed["more_after"], Value::Null, "{listed}");
    let orphaned = &listed["orphaned_effects"][0];
    assert_eq!(orphaned["event_id"], "payout", "{listed}");
    assert_eq!(orphaned["reorg"], reorg["id"], "{listed}");
    assert_eq!(orphaned["block"]["hash"], "1a", "{listed}");
    assert_eq!(orphaned["claim_state"], "completed", "{listed}");

    let table = expect(&cli(url, &by(&[])), 0);
    assert!(table.contains("1 1a") && table.contains("1 1b"), "{table}");
    assert!(table.contains("1 reorg shown"), "{table}");
    assert!(table.contains("side effects orphaned"), "{table}");
    assert!(table.contains("\"payout\""), "{table}");
    let page = expect(&cli(url, &by(&["--limit", "1"])), 0);
    assert!(page.contains("rerun with --after"), "{page}");
    let other = expect(&cli(url, &by(&["--stream", "eth:other"])), 0);
    assert!(other.contains("0 reorgs shown"), "{other}");
    assert!(!other.contains("payout"), "{other}");
    fails(&cli(url, &by(&["--stream", ""])), 2, "--stream");
}

/// Takes the claim of `delivery` and lets its holder vanish: with a 1 ms lease, it is soon in
/// doubt. Returns the idempotency key its side effect was given.
fn claim_then_vanish<C: InboxConnection>(conn: &mut C, delivery: &Delivery) -> String {
    let claims = Inbox::new("orders")
        .unwrap()
        .claims()
        .lease(Duration::from_millis(1));
    let Claimed::Acquired(claim) = claims.claim(conn, delivery).unwrap() else {
        panic!("a new claim is acquired")
    };
    let key = claim.idempotency_key();
    std::mem::forget(claim);
    key
}

/// Two claims in doubt (`pay-1` with a JSON payload, `pay-3` with bytes) and one in progress
/// (`pay-2`, its 60 s lease running), made by the library; then the CLI.
fn lists_shows_and_resolves_claims<C: InboxConnection>(url: &str, conn: &mut C) {
    let charge = Delivery::new("pay-1")
        .unwrap()
        .json(serde_json::json!({"order": "A-1", "amount": 990}));
    let refund = Delivery::new("pay-3")
        .unwrap()
        .with_payload(Payload::Bytes(vec![0, 0xff, 1]));
    let key = claim_then_vanish(conn, &charge);
    claim_then_vanish(conn, &refund);
    let claims = Inbox::new("orders").unwrap().claims();
    let Claimed::Acquired(held) = claims.claim(conn, "pay-2").unwrap() else {
        panic!("a new claim is acquired")
    };
    std::mem::forget(held);
    std::thread::sleep(Duration::from_millis(20));

    lists_claims_in_doubt(url, &key);
    shows_a_claim_with_its_payload(url);
    refuses_a_resolution_without_yes_or_with_a_bad_result(url, conn, &claims);
    refuses_to_resolve_a_claim_not_in_doubt(url);
    resolves_a_claim_completed_with_its_result(url, conn, &claims);
    resolves_a_claim_abandoned(url, conn, &claims, &refund);
    lists_every_claim_with_all(url);
}

fn lists_claims_in_doubt(url: &str, key: &str) {
    let listed = json(&cli(url, &with(&["claims", "--format", "json"])));
    assert_eq!(listed["consumer"], "orders");
    assert_eq!(listed["in_doubt"], 2, "{listed}");
    let ids: Vec<&str> = listed["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["pay-1", "pay-3"], "oldest first, none in progress");
    let doubt = &listed["claims"][0];
    assert_eq!(
        (&doubt["state"], &doubt["attempt"], &doubt["deliveries"]),
        (&Value::from("in doubt"), &Value::from(1), &Value::from(1)),
        "{doubt}"
    );
    assert_eq!(
        doubt["since"], doubt["lease_until"],
        "a lapsed lease: {doubt}"
    );
    assert_eq!(doubt["idempotency_key"], key);
    assert!(
        doubt["reason"]
            .as_str()
            .is_some_and(|r| r.contains("lease ran out")),
        "{doubt}"
    );
    let table = expect(&cli(url, &with(&["claims"])), 0);
    assert!(table.starts_with("EVENT ID"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("pay-1 ") && l.contains("in doubt") && l.contains(key)),
        "{table}"
    );
    assert_eq!(table.lines().last(), Some("2 claims in doubt"), "{table}");
    let other = json(&cli(url, &["claims", "--format", "json"]));
    assert_eq!(
        other["claims"],
        serde_json::json!([]),
        "the default consumer has none"
    );
}

fn shows_a_claim_with_its_payload(url: &str) {
    let shown = json(&cli(
        url,
        &with(&["claims", "show", "pay-1", "--format", "json"]),
    ));
    assert_eq!(shown["consumer"], "orders");
    assert_eq!(shown["state"], "in doubt");
    assert_eq!(
        shown["payload"],
        serde_json::json!({"order": "A-1", "amount": 990})
    );
    assert_eq!(shown["payload_kind"], "json");
    assert_eq!(shown["result"], Value::Null);
    let bytes = json(&cli(
        url,
        &with(&["claims", "show", "pay-3", "--format", "json"]),
    ));
    assert_eq!(
        (&bytes["payload_kind"], &bytes["payload"]),
        (&Value::from("bytes"), &Value::from("AP8B"))
    );
    let table = expect(&cli(url, &with(&["claims", "show", "pay-1"])), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("payload:") && l.contains(r#""order":"A-1""#)),
        "{table}"
    );
    fails(
        &cli(url, &with(&["claims", "show", "nope"])),
        1,
        r#"no claim "nope" for this consumer"#,
    );
}

/// Without --yes, with a result that is not JSON, or without saying what happened: refused,
/// changing nothing.
fn refuses_a_resolution_without_yes_or_with_a_bad_result<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    claims: &Claims,
) {
    let completed = with(&[
        "claims",
        "resolve",
        "pay-1",
        "--completed",
        r#"{"charge": "ch_81"}"#,
        "--actor",
        "ops",
        "--reason",
        "found at the provider",
    ]);
    fails(&cli(url, &completed), 2, "--yes");
    let bad = [
        "claims",
        "resolve",
        "pay-1",
        "--completed",
        "ch_81",
        "--actor",
        "ops",
        "--reason",
        "x",
        "--yes",
    ];
    fails(&cli(url, &with(&bad)), 2, "the result is not JSON");
    let none = [
        "claims", "resolve", "pay-1", "--actor", "ops", "--reason", "x", "--yes",
    ];
    fails(&cli(url, &with(&none)), 2, "--completed");
    let both = [
        "claims",
        "resolve",
        "pay-1",
        "--retry",
        "--abandon",
        "--actor",
        "ops",
        "--reason",
        "x",
        "--yes",
    ];
    fails(&cli(url, &with(&both)), 2, "cannot be used with");
    let ids: Vec<String> = claims
        .in_doubt(conn)
        .unwrap()
        .iter()
        .map(|c| c.event_id.as_str().to_owned())
        .collect();
    assert_eq!(ids, ["pay-1", "pay-3"], "nothing changed");
}

fn refuses_to_resolve_a_claim_not_in_doubt(url: &str) {
    let held = [
        "claims", "resolve", "pay-2", "--retry", "--actor", "ops", "--reason", "x", "--yes",
    ];
    fails(
        &cli(url, &with(&held)),
        1,
        r#"claim "pay-2" is in progress"#,
    );
    let unknown = [
        "claims", "resolve", "pay-9", "--retry", "--actor", "ops", "--reason", "x", "--yes",
    ];
    fails(&cli(url, &with(&unknown)), 1, r#"no claim "pay-9""#);
}

fn resolves_a_claim_completed_with_its_result<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    claims: &Claims,
) {
    let resolve = with(&[
        "claims",
        "resolve",
        "pay-1",
        "--completed",
        r#"{"charge": "ch_81"}"#,
        "--actor",
        "ops",
        "--reason",
        "found at the provider",
        "--yes",
    ]);
    let resolved = json(&cli(url, &[&resolve[..], &["--format", "json"]].concat()));
    assert_eq!(resolved["state"], "completed", "{resolved}");
    assert_eq!(resolved["result"], serde_json::json!({"charge": "ch_81"}));
    assert_eq!(resolved["resolved_by"], "ops");
    assert_eq!(resolved["resolution"], "found at the provider");
    assert!(resolved["completed_at"].is_string(), "{resolved}");
    assert_eq!(resolved["since"], Value::Null, "no longer in doubt");
    let Claimed::Completed(done) = claims.claim(conn, "pay-1").unwrap() else {
        panic!("a delivery after the resolution finds the claim completed")
    };
    assert_eq!(
        done.result::<Value>().unwrap(),
        serde_json::json!({"charge": "ch_81"})
    );
    let record = claims.show(conn, "pay-1").unwrap().unwrap();
    assert_eq!(record.resolution.as_ref().map(Audit::actor), Some("ops"));
    fails(&cli(url, &resolve), 1, r#"claim "pay-1" is completed"#);
}

fn resolves_a_claim_abandoned<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    claims: &Claims,
    refund: &Delivery,
) {
    let abandon = with(&[
        "claims",
        "resolve",
        "pay-3",
        "--abandon",
        "--actor",
        "ops",
        "--reason",
        "refunded by hand",
        "--yes",
    ]);
    let table = expect(&cli(url, &abandon), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("state:") && l.ends_with("abandoned")),
        "{table}"
    );
    assert!(table.contains("refunded by hand"), "{table}");
    let record = claims.show(conn, "pay-3").unwrap().unwrap();
    assert_eq!(record.state, ClaimState::Abandoned);
    assert!(
        matches!(claims.claim(conn, refund).unwrap(), Claimed::Abandoned(_)),
        "a delivery after the resolution is told it was abandoned"
    );
}

/// After the resolutions: none in doubt; --all lists all three.
fn lists_every_claim_with_all(url: &str) {
    let table = expect(&cli(url, &with(&["claims"])), 0);
    assert_eq!(table.lines().last(), Some("0 claims in doubt"), "{table}");
    let all = json(&cli(url, &with(&["claims", "--all", "--format", "json"])));
    assert_eq!(all["in_doubt"], 0, "{all}");
    let states: Vec<(&str, &str)> = all["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["event_id"].as_str().unwrap(),
                c["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        // in event id order
        [
            ("pay-1", "completed"),
            ("pay-2", "in progress"),
            ("pay-3", "abandoned")
        ],
        "{all}"
    );
    let table = expect(&cli(url, &with(&["claims", "--all"])), 0);
    assert!(
        table.contains("COMPLETED") && table.contains("ch_81"),
        "{table}"
    );
    assert_eq!(
        table.lines().last(),
        Some("3 claims, 0 in doubt"),
        "{table}"
    );
}

/// Refuses `out-2` for good and `out-3` for now; publishes the rest.
struct Broker;

impl Publisher for Broker {
    fn publish(&mut self, message: &OutboxMessage) -> Result<(), PublishError> {
        match message.envelope.id().as_str() {
            "out-2" => Err(PublishError::permanent(
                "the broker refused it: message too large",
            )),
            "out-3" => Err(PublishError::transient("the broker is unreachable")),
            _ => Ok(()),
        }
    }
}

/// Four events enqueued and one relay pass: `out-1` published, `out-2` failed for good, `out-3`
/// pending after a failed attempt, `out-4` pending behind it (same aggregate). Returns their
/// positions.
fn outbox_rows<C: InboxConnection>(conn: &mut C) -> [i64; 4] {
    let outbox = Outbox::new("orders-service").unwrap();
    let events = [
        ("out-1", "orders.placed", "1", "order.placed"),
        ("out-2", "orders.paid", "1", "order.paid"),
        ("out-3", "orders.placed", "2", "order.placed"),
        ("out-4", "orders.paid", "2", "order.paid"),
    ];
    for (id, topic, order, event_type) in events {
        let envelope = Envelope::new(event_type, "order", order)
            .with_id(id)
            .unwrap()
            .json(&serde_json::json!({"order": order}))
            .unwrap();
        outbox.enqueue(conn, topic, &envelope).unwrap();
    }
    // Passes until idle: MySQL takes one row per aggregate a pass. out-3 waits a minute.
    let relay = Relay::new().backoff(Duration::from_secs(60), Duration::from_secs(60));
    let (mut published, mut failed, mut retried) = (0, 0, 0);
    for _ in 0..10 {
        let pass = relay.run_once(conn, &mut Broker).unwrap();
        if pass.is_idle() {
            break;
        }
        (published, failed, retried) = (
            published + pass.published,
            failed + pass.failed,
            retried + pass.retried,
        );
    }
    assert_eq!((published, failed, retried), (1, 1, 1));
    let rows = Outbox::list(conn, None, 0, 10).unwrap();
    let states: Vec<(&str, OutboxState)> = rows
        .iter()
        .flatten()
        .map(|r| (r.event_id.as_str(), r.state))
        .collect();
    assert_eq!(
        states,
        [
            ("out-1", OutboxState::Published),
            ("out-2", OutboxState::Failed),
            ("out-3", OutboxState::Pending),
            ("out-4", OutboxState::Pending),
        ]
    );
    [0, 1, 2, 3].map(|i| rows[i].as_ref().unwrap().position)
}

fn state_at<C: InboxConnection>(conn: &mut C, position: i64) -> OutboxState {
    Outbox::record(conn, position).unwrap().state
}

fn lists_shows_retries_and_prunes_the_outbox<C: InboxConnection>(url: &str, conn: &mut C) {
    let positions = outbox_rows(conn);
    lists_the_outbox(url, positions);
    shows_an_outbox_row(url, positions[1]);
    retries_a_failed_outbox_row(url, conn, positions);
    prunes_published_outbox_rows_only(url, conn, positions);
}

/// The totals, then the failed row with its reason; the pending ones with --pending; every
/// row, a page at a time, with --all.
fn lists_the_outbox(url: &str, [published, failed, retrying, pending]: [i64; 4]) {
    let listed = json(&cli(url, &["outbox", "--format", "json"]));
    let totals = &listed["totals"];
    assert_eq!(
        (&totals["pending"], &totals["published"], &totals["failed"]),
        (&Value::from(2), &Value::from(1), &Value::from(1)),
        "{listed}"
    );
    assert!(
        totals["oldest_pending"]
            .as_str()
            .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
        "{listed}"
    );
    assert!(
        totals["oldest_pending_age_seconds"]
            .as_f64()
            .is_some_and(|age| (0.0..600.0).contains(&age)),
        "{listed}"
    );
    let row = &listed["rows"][0];
    assert_eq!(listed["rows"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        (&row["position"], &row["event_id"], &row["state"]),
        (
            &Value::from(failed),
            &Value::from("out-2"),
            &Value::from("failed")
        ),
    );
    assert_eq!(
        row["last_error"],
        "permanent publish failure: the broker refused it: message too large"
    );
    assert_eq!(row["attempts"], 1);
    let table = expect(&cli(url, &["outbox"]), 0);
    assert!(table.starts_with("pending:"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with(&format!("{failed} "))
            && l.contains("out-2")
            && l.contains("order/1")
            && l.contains("message too large")),
        "{table}"
    );
    assert!(!table.contains("out-3"), "{table}");
    assert!(table.contains("1 failed row shown"), "{table}");

    let with_pending = json(&cli(url, &["outbox", "--pending", "--format", "json"]));
    let positions: Vec<i64> = with_pending["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, [failed, retrying, pending], "{with_pending}");
    assert!(
        with_pending["rows"][1]["last_error"]
            .as_str()
            .is_some_and(|e| e.ends_with("the broker is unreachable")),
        "{with_pending}"
    );
    assert_eq!(with_pending["rows"][2]["last_error"], Value::Null);
    let table = expect(&cli(url, &["outbox", "--pending"]), 0);
    assert!(
        table.contains("NEXT ATTEMPT") && table.contains("2 pending rows shown"),
        "{table}"
    );

    let first = json(&cli(
        url,
        &["outbox", "--all", "--limit", "1", "--format", "json"],
    ));
    assert_eq!(first["rows"][0]["state"], "published", "{first}");
    assert_eq!(first["more_after"]["all"], published, "{first}");
    let after = published.to_string();
    let next = json(&cli(
        url,
        &[
            "outbox", "--all", "--limit", "1", "--after", &after, "--format", "json",
        ],
    ));
    assert_eq!(next["rows"][0]["event_id"], "out-2", "{next}");
    let table = expect(&cli(url, &["outbox", "--all", "--limit", "1"]), 0);
    assert!(
        table.contains(&format!("rerun with --after {published}")),
        "{table}"
    );
    expect(&cli(url, &["outbox", "--all", "--pending"]), 2);
    expect(&cli(url, &["outbox", "--limit", "0"]), 2);
}

fn shows_an_outbox_row(url: &str, failed: i64) {
    let position = failed.to_string();
    let shown = json(&cli(
        url,
        &["outbox", "show", &position, "--format", "json"],
    ));
    assert_eq!(
        (
            &shown["topic"],
            &shown["aggregate_type"],
            &shown["aggregate_id"],
            &shown["event_type"]
        ),
        (
            &Value::from("orders.paid"),
            &Value::from("order"),
            &Value::from("1"),
            &Value::from("order.paid")
        ),
        "{shown}"
    );
    assert_eq!(shown["published_at"], Value::Null);
    let table = expect(&cli(url, &["outbox", "show", &position]), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("last error:") && l.ends_with("message too large")),
        "{table}"
    );
    let unknown = (failed + 1000).to_string();
    fails(
        &cli(url, &["outbox", "show", &unknown]),
        1,
        &format!("no outbox row at position {unknown}"),
    );
}

/// Without --yes: refused, nothing changed. With it: pending again, its attempts from 0. A row
/// not failed is refused with the typed error.
fn retries_a_failed_outbox_row<C: InboxConnection>(url: &str, conn: &mut C, positions: [i64; 4]) {
    let [_, failed, retrying, _] = positions;
    let position = failed.to_string();
    let retry = [
        "outbox",
        "retry",
        &position,
        "--actor",
        "ops",
        "--reason",
        "limit raised",
    ];
    fails(&cli(url, &retry), 2, "--yes");
    assert_eq!(
        state_at(conn, failed),
        OutboxState::Failed,
        "nothing changed"
    );
    let blank = [
        "outbox", "retry", &position, "--actor", "ops", "--reason", " ", "--yes",
    ];
    fails(&cli(url, &blank), 2, "non-empty reason");
    let retried = json(&cli(
        url,
        &[&retry[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(
        (&retried["state"], &retried["attempts"]),
        (&Value::from("pending"), &Value::from(0)),
        "{retried}"
    );
    assert_eq!(state_at(conn, failed), OutboxState::Pending);
    fails(
        &cli(url, &[&retry[..], &["--yes"]].concat()),
        1,
        &format!("outbox row {failed} is pending; only a failed row can be retried"),
    );
    let pending = retrying.to_string();
    fails(
        &cli(
            url,
            &[
                "outbox", "retry", &pending, "--actor", "ops", "--reason", "x",
            ],
        ),
        1,
        &format!("outbox row {retrying} is pending"),
    );
    let unknown = (failed + 1000).to_string();
    let missing = [
        "outbox", "retry", &unknown, "--actor", "ops", "--reason", "x", "--yes",
    ];
    fails(
        &cli(url, &missing),
        1,
        &format!("no outbox row at position {unknown}"),
    );
}

/// Without --yes: refused, nothing deleted. With it: the published row goes, the others stay.
fn prunes_published_outbox_rows_only<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    [published, ..]: [i64; 4],
) {
    let prune = ["outbox", "prune", "--older-than", "0s"];
    fails(&cli(url, &prune), 2, "of 1 published rows");
    assert_eq!(state_at(conn, published), OutboxState::Published);
    let pruned = json(&cli(
        url,
        &[&prune[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(pruned["deleted"], 1, "{pruned}");
    let left: Vec<(String, OutboxState)> = Outbox::list(conn, None, 0, 10)
        .unwrap()
        .into_iter()
        .flatten()
        .map(|r| (r.event_id, r.state))
        .collect();
    assert_eq!(
        left,
        [
            ("out-2".to_owned(), OutboxState::Pending),
            ("out-3".to_owned(), OutboxState::Pending),
            ("out-4".to_owned(), OutboxState::Pending),
        ]
    );
    let again = expect(
        &cli(url, &[&prune[..], &["--yes", "--batch-size", "1"]].concat()),
        0,
    );
    assert!(
        again
            .lines()
            .any(|l| l.starts_with("deleted:") && l.ends_with(" 0")),
        "{again}"
    );
    fails(
        &cli(url, &[&prune[..], &["--yes", "--batch-size", "0"]].concat()),
        2,
        "--batch-size must be at least 1",
    );
}

fn doctor_passes_then_fails<C: InboxConnection>(url: &str, conn: &mut C, drop_index: &str) {
    // doctor: healthy (SQLite warns of the tool's own connection's busy timeout), then not.
    // The checks of the server itself (a cluster, standbys, a server-wide timeout) are the
    // server's, not the test's: only reported.
    let checks = json(&cli(url, &["doctor", "--format", "json"]));
    for check in checks.as_array().unwrap() {
        let expected = match check["name"].as_str().unwrap() {
            "busy_timeout" => "warn",
            "cluster" | "replication" | "idle_transaction_timeout" | "wait_timeout" => continue,
            _ => "ok",
        };
        assert_eq!(check["status"], expected, "{check}");
    }
    conn.batch_execute(drop_index).unwrap();
    let report = expect(&cli(url, &["doctor"]), 3);
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("fail") && l.contains("diesel_inbox_events_settled")),
        "{report}"
    );
}

fn prints_and_installs_migrations(url: &str) {
    let sql = expect(&cli(url, &["migration", "print", "--dialect", "sqlite"]), 0);
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS diesel_inbox_events"),
        "{sql}"
    );
    let folder = tempfile::tempdir().unwrap();
    let folder_arg = folder.path().to_str().unwrap();
    let written = json(&cli(
        url,
        &["migration", "install", folder_arg, "--format", "json"],
    ));
    assert_eq!(
        written.as_array().unwrap().len(),
        11,
        "since the reverted events (000011): {written}"
    );
    for path in written.as_array().unwrap() {
        assert!(Path::new(path.as_str().unwrap()).join("up.sql").is_file());
    }
}

#[test]
fn the_cli_on_sqlite() {
    let db = TestDatabase::sqlite();
    the_cli_operates_dead_letters_gaps_claims_the_outbox_doctor_and_migrations(
        &db,
        "DROP INDEX diesel_inbox_events_settled",
    );
}

#[test]
fn the_cli_on_postgres() {
    let url = std::env::var("DIESEL_INBOX_POSTGRES_URL");
    let db = TestDatabase::postgres(
        url.as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test"),
    );
    the_cli_operates_dead_letters_gaps_claims_the_outbox_doctor_and_migrations(
        &db,
        "DROP INDEX diesel_inbox_events_settled",
    );
}

#[test]
fn the_cli_on_mysql() {
    let url = std::env::var("DIESEL_INBOX_MYSQL_URL");
    let db = TestDatabase::mysql(url.as_deref().unwrap_or("mysql://root@127.0.0.1:3306/test"));
    the_cli_operates_dead_letters_gaps_claims_the_outbox_doctor_and_migrations(
        &db,
        "DROP INDEX diesel_inbox_events_settled ON diesel_inbox_events",
    );
}

#[test]
fn usage_errors_exit_with_2_and_print_needs_no_database() {
    let bin = env!("CARGO_BIN_EXE_diesel-inbox");
    let run = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    expect(&run(&["no-such-command"]), 2);
    expect(&run(&["doctor"]), 2);
    expect(&run(&["migration", "print"]), 2);
    expect(&run(&["migration", "print", "--dialect", "oracle"]), 2);
    let sql = expect(&run(&["migration", "print", "--dialect", "PostgreSQL"]), 0);
    assert!(sql.contains("diesel_inbox_events"));
    expect(&run(&["--database-url", "redis://x", "doctor"]), 2);
    // a result that is not JSON is refused before any connection (there is no URL here)
    let bad_result = run(&[
        "claims",
        "resolve",
        "pay-1",
        "--completed",
        "{",
        "--actor",
        "ops",
        "--reason",
        "x",
        "--yes",
    ]);
    expect(&bad_result, 2);
    let stderr = String::from_utf8_lossy(&bad_result.stderr);
    assert!(stderr.contains("the result is not JSON"), "{stderr}");
    let help = expect(&run(&["--help"]), 0);
    assert!(help.contains("Exit codes"), "{help}");
}

const SECRET: &str = "S3cret";

/// URLs with the password `S3cret`: malformed, miscased, unreachable, refused, file-ish.
fn urls_with_a_password() -> Vec<String> {
    let sqlite = TestDatabase::sqlite();
    let mut urls: Vec<String> = [
        "postgres:/app:S3cret@127.0.0.1:5432/db",
        "postgres:app:S3cret@127.0.0.1:5432/db",
        "app:S3cret@127.0.0.1:5432/db",
        "//app:S3cret@127.0.0.1:5432/db",
        "postgres://app:S3cret@127.0.0.1:1/db",
        "POSTGRES://app:S3cret@127.0.0.1:1/db",
        "Postgresql://app:S3cret@127.0.0.1:1/db",
        "postgres://app:S3cret@[127.0.0.1:5432/db",
        "postgres://root:S3cret@127.0.0.1:5432/no_such_database",
        "postgres://127.0.0.1:1/db?password=S3cret",
        "postgres://app:S3%63ret@127.0.0.1:1/db",
        "mysql://root:S3cret@127.0.0.1:1/db",
        "MySQL://root:S3cret@127.0.0.1:3306/test",
        "mariadb://root:S3cret@127.0.0.1:3306/test",
        "mariadb://root:S3cret@[127.0.0.1:3306/test",
        "redis://app:S3cret@127.0.0.1/0",
        "sqlite://app:S3cret@127.0.0.1/db",
        "file:app:S3cret@127.0.0.1/db",
        "host=127.0.0.1 password=S3cret",
    ]
    .iter()
    .map(|u| (*u).to_owned())
    .collect();
    // reachable, and accepted: the trust server takes any password
    urls.push(format!(
        "{}?password=S3cret",
        std::env::var("DIESEL_INBOX_POSTGRES_URL")
            .as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test")
    ));
    urls.push(format!("sqlite://{}?password=S3cret", sqlite.url()));
    urls
}

#[test]
fn no_command_prints_a_password_from_any_url_flag_or_environment() {
    let bin = env!("CARGO_BIN_EXE_diesel-inbox");
    let commands: [&[&str]; 6] = [
        &["stats"],
        &["doctor"],
        &["dead-letters", "list"],
        &["migration", "print"],
        &[
            "prune",
            "--older-than",
            "30d",
            "--redelivery-window",
            "7d",
            "--yes",
        ],
        &["outbox", "--format", "json"],
    ];
    let mut runs = 0;
    for url in urls_with_a_password() {
        for command in commands {
            for from_env in [false, true] {
                let mut run = Command::new(bin);
                run.env("RUST_LOG", "trace").env_remove("DATABASE_URL");
                if from_env {
                    run.env("DATABASE_URL", &url);
                } else {
                    run.arg("--database-url").arg(&url);
                }
                let output = run.args(command).output().unwrap();
                let said = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                assert!(
                    !said.contains(SECRET) && !said.contains("S3%63ret"),
                    "{url} {command:?} (from env: {from_env}):\n{said}"
                );
                assert!(output.status.code().is_some(), "{url}: killed: {said}");
                runs += 1;
            }
        }
    }
    assert_eq!(runs, 21 * 6 * 2);
}

#[test]
fn the_cli_logs_at_rust_log_with_the_password_redacted() {
    let url = format!(
        "{}?password=S3cret",
        std::env::var("DIESEL_INBOX_POSTGRES_URL")
            .as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test")
    );
    let db = TestDatabase::postgres(&url);
    let output = Command::new(env!("CARGO_BIN_EXE_diesel-inbox"))
        .args(["--database-url", db.url(), "prune", "--older-than", "30d"])
        .args(["--redelivery-window", "7d", "--yes"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    expect(&output, 0);
    assert!(stderr.contains("inbox_prune"), "a log line: {stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");
}

#[test]
fn a_misspelled_scheme_is_bad_usage_naming_the_schemes() {
    for url in [
        "postgres:/app:S3cret@127.0.0.1/db",
        "redis://x",
        "app:S3cret@h/db",
    ] {
        let output = cli(url, &["stats"]);
        fails(
            &output,
            2,
            "write postgres://, postgresql://, mysql://, mariadb://",
        );
    }
}

#[test]
fn a_miscased_scheme_reaches_its_backend() {
    let url = std::env::var("DIESEL_INBOX_POSTGRES_URL");
    let url = url
        .as_deref()
        .unwrap_or("postgres://root@127.0.0.1:5432/test");
    let db = TestDatabase::postgres(url);
    let upper = db.url().replacen("postgres://", "POSTGRES://", 1);
    let stats = json(&cli(&upper, &["stats", "--format", "json"]));
    assert_eq!(stats["consumer"], "default", "{stats}");
}

#[test]
fn the_doctor_and_every_command_never_create_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing.db");
    let path = path.to_str().unwrap();
    for url in [
        path.to_owned(),
        format!("sqlite://{path}"),
        format!("file:{path}"),
        format!("file:{path}?mode=rwc"),
    ] {
        for command in [&["doctor"][..], &["stats"], &["dead-letters", "list"]] {
            fails(&cli(&url, command), 1, "no SQLite database at");
            assert!(!Path::new(path).exists(), "{url} {command:?} created it");
        }
    }
}

#[test]
fn a_closed_stdout_ends_the_command_quietly_with_exit_0() {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    let inbox = Inbox::new("orders").unwrap().max_attempts(1);
    for i in 0..3 {
        let delivery = Delivery::new(format!("evt-{i}"))
            .unwrap()
            .with_payload(Payload::Bytes(vec![7; 100_000]));
        let _ = inbox.process(&mut conn, &delivery, refuse).unwrap();
    }
    let export = [
        &["--database-url", db.url()][..],
        &with(&["dead-letters", "export"]),
    ]
    .concat();
    for args in [
        &["migration", "print", "--dialect", "postgres"][..],
        &[
            "migration",
            "print",
            "--dialect",
            "mysql",
            "--format",
            "json",
        ],
        &export,
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = Command::new(env!("CARGO_BIN_EXE_diesel-inbox"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert_eq!(String::from_utf8_lossy(&output.stderr), "", "quietly");
    }
}

/// A dead letter of `orders` to discard, on a fresh SQLite database.
fn one_dead_letter() -> TestDatabase<diesel::SqliteConnection> {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    let inbox = Inbox::new("orders").unwrap().max_attempts(1);
    let _ = inbox
        .process(&mut conn, Delivery::new("evt-1").unwrap(), refuse)
        .unwrap();
    db
}

#[test]
fn the_actor_falls_back_to_user_then_logname_then_the_os_user_name_and_says_so() {
    let os_user = Command::new("id").arg("-un").output().unwrap();
    let os_user = String::from_utf8(os_user.stdout).unwrap().trim().to_owned();
    for (env, actor, source) in [
        (
            &[("USER", "alice"), ("LOGNAME", "bob")][..],
            "alice",
            "$USER",
        ),
        (&[("LOGNAME", "bob")], "bob", "$LOGNAME"),
        (&[], os_user.as_str(), "the OS user name"),
    ] {
        let db = one_dead_letter();
        let output = Command::new(env!("CARGO_BIN_EXE_diesel-inbox"))
            .args(["--database-url", db.url()])
            .args(with(&[
                "dead-letters",
                "discard",
                "evt-1",
                "--reason",
                "x",
                "--yes",
            ]))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        fails(&output, 0, &format!("actor: {actor} (from {source})"));
        let mut conn = db.connect();
        let record = Inbox::new("orders")
            .unwrap()
            .dead_letters()
            .show(&mut conn, "evt-1")
            .unwrap();
        assert_eq!(
            record.history.last().and_then(|h| h.actor.as_deref()),
            Some(actor)
        );
    }
}

#[test]
fn prune_refuses_a_window_below_an_hour_without_force_and_says_what_it_deletes_first() {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    let inbox = Inbox::new("orders").unwrap();
    let _ = inbox
        .process(&mut conn, Delivery::new("evt-1").unwrap(), |_tx| {
            Ok::<_, Error>(())
        })
        .unwrap();
    let zero = with(&[
        "prune",
        "--older-than",
        "0s",
        "--redelivery-window",
        "0s",
        "--yes",
    ]);
    fails(&cli(db.url(), &zero), 2, "below the floor of 1h");
    let stats = json(&cli(db.url(), &with(&["stats", "--format", "json"])));
    assert_eq!(stats["totals"]["processed"], 1, "nothing pruned: {stats}");
    let forced = cli(
        db.url(),
        &[&zero[..], &["--force", "--format", "json"]].concat(),
    );
    fails(&forced, 0, "about to prune from consumer orders: 1 events");
    let pruned: Value = serde_json::from_slice(&forced.stdout).unwrap();
    assert_eq!(pruned["events"], 1, "{pruned}");
}

#[test]
fn cli_errors_name_cli_commands_and_the_schema_remedy_only_for_a_missing_table() {
    let db = one_dead_letter();
    let missing = cli(db.url(), &with(&["dead-letters", "show", "nope"]));
    fails(&missing, 1, "`diesel-inbox dead-letters list`");
    assert!(!String::from_utf8_lossy(&missing.stderr).contains("::"));
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::File::create(&empty).unwrap();
    let no_schema = cli(empty.to_str().unwrap(), &["stats"]);
    fails(
        &no_schema,
        1,
        "a table is missing: apply the inbox schema; `diesel-inbox migration print`",
    );
    let lost = cli("postgres://root@127.0.0.1:1/test", &["stats"]);
    expect(&lost, 1);
    assert!(
        !String::from_utf8_lossy(&lost.stderr).contains("schema"),
        "{lost:?}"
    );
}

/// Pages of `--limit 1` through `args` (a listing with `--all`, as JSON), following
/// `more_after`: the keys of every row, in the order the pages gave them.
fn pages_of_one(url: &str, args: &[&str], rows: &str, key: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..100 {
        let mut page_args = with(args);
        page_args.extend(["--all", "--limit", "1", "--format", "json"]);
        if let Some(after) = &after {
            page_args.extend(["--after", after.as_str()]);
        }
        let page = json(&cli(url, &page_args));
        let keys: Vec<String> = page[rows]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[key].to_string().trim_matches('"').to_owned())
            .collect();
        assert!(keys.len() <= 1, "{page}");
        seen.extend(keys);
        match &page["more_after"] {
            Value::Null => break,
            next => after = Some(next.to_string().trim_matches('"').to_owned()),
        }
    }
    seen
}

fn pages_through_gaps_and_claims_once_in_key_order(url: &str) {
    for (args, rows, key) in [
        (&["gaps"][..], "gaps", "id"),
        (&["claims"][..], "claims", "event_id"),
    ] {
        let mut all_args = with(args);
        all_args.extend(["--all", "--format", "json"]);
        let everything = json(&cli(url, &all_args));
        let mut expected: Vec<String> = everything[rows]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[key].to_string().trim_matches('"').to_owned())
            .collect();
        assert!(expected.len() >= 2, "{everything}");
        if key == "id" {
            expected.sort_by_key(|id| id.parse::<i64>().unwrap());
        } else {
            expected.sort();
        }
        assert_eq!(pages_of_one(url, args, rows, key), expected, "{args:?}");
    }
}

/// With no `--consumer`, an empty gaps or claims listing names the consumers that have rows
/// (a chain stream, `indexer`'s, is no sequence cursor); `--all-consumers` lists each of them with a consumer column (as JSON, one object each).
fn says_which_consumers_have_gaps_and_claims_and_lists_them_all<C: InboxConnection>(
    url: &str,
    conn: &mut C,
) {
    let cursor = Inbox::new("ledger").unwrap().cursor("ledger-0").unwrap();
    let apply = |_tx: &mut C| Ok::<_, Error>(());
    let found: Vec<usize> = [1, 3]
        .map(|n| {
            cursor
                .process(conn, Sequenced::new(n), apply)
                .unwrap()
                .gaps()
                .len()
        })
        .into();
    assert_eq!(found, [0, 1]);

    let gaps = expect(&cli(url, &["gaps"]), 0);
    assert!(
        gaps.contains("no cursors or gaps for consumer default; consumers with some: ledger, orders (pass --consumer NAME, or --all-consumers)"),
        "{gaps}"
    );
    let claims = expect(&cli(url, &["claims", "--all"]), 0);
    assert!(
        claims.contains("no claims for consumer default; consumers with some: indexer, orders (pass --consumer NAME, or --all-consumers)"),
        "{claims}"
    );

    let every = json(&cli(
        url,
        &["gaps", "--all", "--all-consumers", "--format", "json"],
    ));
    let consumers: Vec<&str> = every
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["consumer"].as_str().unwrap())
        .collect();
    assert_eq!(consumers, ["ledger", "orders"], "{every}");
    assert!(every
        .as_array()
        .unwrap()
        .iter()
        .all(|l| !l["gaps"].as_array().unwrap().is_empty()));
    let table = expect(&cli(url, &["gaps", "--all-consumers"]), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("ledger") && l.contains("ledger-0")),
        "{table}"
    );

    let every = json(&cli(
        url,
        &["claims", "--all", "--all-consumers", "--format", "json"],
    ));
    assert_eq!(every.as_array().unwrap().len(), 2, "{every}");
    assert_eq!(every[1]["consumer"], "orders");
    assert!(
        !every[1]["claims"].as_array().unwrap().is_empty(),
        "{every}"
    );
    let table = expect(&cli(url, &["claims", "--all", "--all-consumers"]), 0);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("orders") && l.contains("pay-1")),
        "{table}"
    );
    let refused = cli(url, &["claims", "--all-consumers", "--after", "pay-1"]);
    fails(&refused, 2, "--after");
}

/// Dead letters a view is measured with: `BIG_COUNT` of `BIG_BYTES` each, 80 MB in all.
const BIG_COUNT: usize = 40;
const BIG_BYTES: usize = 2 * 1024 * 1024;
/// The CLI's peak memory while it lists or exports them: well below what they weigh.
const PEAK_BOUND_KB: u64 = 64 * 1024;

/// `args` for the consumer `views`.
fn views<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["--consumer", "views"][..], args].concat()
}

/// Runs the binary under `/usr/bin/time -v`; its output, and its peak resident set in KiB.
fn cli_measured(url: &str, args: &[&str]) -> (Output, u64) {
    let output = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_diesel-inbox"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("USER")
        .output()
        .expect("/usr/bin/time runs the binary");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let peak = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|kb| kb.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in:\n{stderr}"));
    (output, peak)
}

/// The dead-letter views on one backend: large payloads listed and exported in bounded
/// memory, every row once across pages in key order, and corrupt rows named where they sit.
fn the_dead_letter_views_are_bounded_paged_and_name_corrupt_rows<C>(db: &TestDatabase<C>)
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    let url = db.url();
    let mut conn = db.connect();
    let inbox = Inbox::new("views").unwrap().max_attempts(1);
    let ids: Vec<String> = (0..BIG_COUNT).map(|i| format!("big-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let fill = u8::try_from(i).unwrap();
        let delivery = Delivery::new(id.as_str())
            .unwrap()
            .with_payload(Payload::Bytes(vec![fill; BIG_BYTES]));
        assert!(inbox
            .process(&mut conn, &delivery, refuse)
            .unwrap()
            .is_dead_lettered());
    }

    lists_and_exports_large_payloads_in_bounded_memory(url, &ids);
    pages_through_every_dead_letter_once_in_key_order(url, &ids);
    names_corrupt_rows_and_never_hides_their_neighbours(url, &mut conn, &inbox);
    says_which_consumers_have_dead_letters(url);
}

fn lists_and_exports_large_payloads_in_bounded_memory(url: &str, ids: &[String]) {
    let limit = BIG_COUNT.to_string();
    let (listed, list_peak) = cli_measured(
        url,
        &views(&[
            "dead-letters",
            "list",
            "--limit",
            &limit,
            "--format",
            "json",
        ]),
    );
    let listed: Value = serde_json::from_str(&expect(&listed, 0)).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), BIG_COUNT);
    assert_eq!(listed[0]["payload_kind"], "bytes");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("export.jsonl");
    let file_arg = file.to_str().unwrap();
    let (exported, export_peak) = cli_measured(
        url,
        &views(&["dead-letters", "export", "--output", file_arg]),
    );
    expect(&exported, 0);
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let exported_ids: Vec<&str> = lines
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(exported_ids, ids, "every dead letter once, in key order");
    let base64_len = BIG_BYTES.div_ceil(3) * 4;
    assert!(lines
        .iter()
        .all(|l| l["payload"].as_str().map(str::len) == Some(base64_len)));
    eprintln!(
        "peak memory with {BIG_COUNT} dead letters of {} MiB on {}: list {list_peak} KiB, export {export_peak} KiB",
        BIG_BYTES >> 20,
        url.split_once("://").map_or("sqlite", |(scheme, _)| scheme),
    );
    assert!(list_peak < PEAK_BOUND_KB, "list peaked at {list_peak} KiB");
    assert!(
        export_peak < PEAK_BOUND_KB,
        "export peaked at {export_peak} KiB"
    );
}

fn pages_through_every_dead_letter_once_in_key_order(url: &str, ids: &[String]) {
    let mut seen: Vec<String> = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..=BIG_COUNT {
        let mut args = vec!["dead-letters", "list", "--limit", "7"];
        if let Some(after) = &after {
            args.extend(["--after", after.as_str()]);
        }
        let table = expect(&cli(url, &views(&args)), 0);
        let page: Vec<String> = table
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|id| id.starts_with("big-"))
            .map(str::to_owned)
            .collect();
        seen.extend(page.iter().cloned());
        let Some(next) = table
            .lines()
            .find_map(|l| l.strip_prefix("more dead letters may follow: rerun with --after "))
        else {
            break;
        };
        assert_eq!(next.trim_matches('"'), page.last().unwrap());
        after = Some(next.trim_matches('"').to_owned());
    }
    assert_eq!(seen, ids, "every dead letter exactly once, in key order");
    // the library pages the same way
    let json_page = json(&cli(
        url,
        &views(&[
            "dead-letters",
            "list",
            "--limit",
            "3",
            "--after",
            "big-10",
            "--format",
            "json",
        ]),
    ));
    let page: Vec<&str> = json_page
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(page, ["big-11", "big-12", "big-13"]);
}

fn names_corrupt_rows_and_never_hides_their_neighbours<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    inbox: &Inbox,
) {
    conn.batch_execute(
        "UPDATE diesel_inbox_failures SET state = 'bogus' WHERE consumer = 'views' AND event_id = 'big-05'",
    )
    .unwrap();
    conn.batch_execute(
        "UPDATE diesel_inbox_failures SET event_id = '' WHERE consumer = 'views' AND event_id = 'big-06'",
    )
    .unwrap();
    conn.batch_execute(
        "UPDATE diesel_inbox_events SET state = 'bogus' WHERE consumer = 'views' AND event_id = 'big-07'",
    )
    .unwrap();

    // list: every row, the corrupt ones in place and marked
    let listed = json(&cli(
        url,
        &views(&["dead-letters", "list", "--limit", "100", "--format", "json"]),
    ));
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), BIG_COUNT, "{listed}");
    let unreadable: Vec<&Value> = rows.iter().filter(|r| r["state"] == "unreadable").collect();
    assert_eq!(unreadable.len(), 2, "{listed}");
    assert_eq!(rows[0]["event_id"], "", "the empty id sorts first");
    let bogus = rows.iter().find(|r| r["event_id"] == "big-05").unwrap();
    let error = bogus["error"].as_str().unwrap();
    for names in [
        "diesel_inbox_failures",
        "consumer = 'views' AND event_id = 'big-05'",
        "\"bogus\"",
        "UPDATE diesel_inbox_failures SET state",
    ] {
        assert!(error.contains(names), "{names:?} not in {error}");
    }
    assert!(rows[0]["error"].as_str().unwrap().contains("event_id"));
    assert!(rows
        .iter()
        .any(|r| r["event_id"] == "big-04" && r["state"] == "dead-lettered"));
    let table = expect(&cli(url, &views(&["dead-letters", "list"])), 0);
    assert!(table.contains("unreadable: "), "{table}");

    // export: every readable row with its payload, the corrupt ones as error lines; exit 1
    let exported = cli(url, &views(&["dead-letters", "export"]));
    fails(&exported, 1, "could not be read");
    let lines: Vec<Value> = stdout(&exported)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), BIG_COUNT);
    assert_eq!(lines.iter().filter(|l| l.get("error").is_some()).count(), 2);

    // show names the table, the key and the text
    fails(
        &cli(url, &views(&["dead-letters", "show", "big-05"])),
        1,
        "diesel_inbox_failures (consumer = 'views' AND event_id = 'big-05'): state holds \"bogus\"",
    );
    assert!(matches!(
        inbox.dead_letters().show(conn, "big-05"),
        Err(AdminError::Inbox(Error::CorruptRow(corrupt))) if corrupt.table() == "diesel_inbox_failures" && corrupt.text() == "bogus"
    ));

    // stats count the unreadable rows (one failure row, one inbox row) instead of failing
    let stats = json(&cli(url, &views(&["stats", "--format", "json"])));
    assert_eq!(stats["totals"]["unreadable"], 2, "{stats}");
    assert_eq!(stats["totals"]["dead_lettered"], BIG_COUNT - 1, "{stats}");

    // a delivery of the corrupt inbox row is rejected with the error; its neighbour is not
    let delivered = inbox.process(conn, "big-07", |_: &mut C| Ok::<_, Error>(()));
    assert_eq!(
        diesel_inbox::Ack::of(&delivered),
        diesel_inbox::Ack::Reject,
        "{delivered:?}"
    );
    let message = delivered.unwrap_err().to_string();
    for names in ["diesel_inbox_events", "event_id = 'big-07'", "\"bogus\""] {
        assert!(message.contains(names), "{names:?} not in {message}");
    }
    let neighbour = inbox.process(conn, "big-08", |_: &mut C| Ok::<_, Error>(()));
    assert!(neighbour.unwrap().is_dead_lettered());
}

fn says_which_consumers_have_dead_letters(url: &str) {
    let table = expect(&cli(url, &["dead-letters", "list"]), 0);
    assert!(
        table.contains("no dead letters for consumer default; consumers with some: views (pass --consumer NAME, or --all-consumers)"),
        "{table}"
    );
    let all = json(&cli(
        url,
        &[
            "dead-letters",
            "list",
            "--all-consumers",
            "--format",
            "json",
        ],
    ));
    assert_eq!(all.as_array().unwrap().len(), BIG_COUNT);
    assert!(all
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["consumer"] == "views"));
}

#[test]
fn the_dead_letter_views_on_sqlite() {
    the_dead_letter_views_are_bounded_paged_and_name_corrupt_rows(&TestDatabase::sqlite());
}

#[test]
fn the_dead_letter_views_on_postgres() {
    let url = std::env::var("DIESEL_INBOX_POSTGRES_URL");
    the_dead_letter_views_are_bounded_paged_and_name_corrupt_rows(&TestDatabase::postgres(
        url.as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test"),
    ));
}

#[test]
fn the_dead_letter_views_on_mysql() {
    let url = std::env::var("DIESEL_INBOX_MYSQL_URL");
    the_dead_letter_views_are_bounded_paged_and_name_corrupt_rows(&TestDatabase::mysql(
        url.as_deref().unwrap_or("mysql://root@127.0.0.1:3306/test"),
    ));
}

/// `args` for the consumer `name`.
fn of<'a>(name: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    [&["--consumer", name][..], args].concat()
}

/// The listed rows' keys under `key`, an unreadable row's as `!key`, in the listing's order.
fn keys_of(rows: &Value, key: &str) -> Vec<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("{rows} is no array"))
        .iter()
        .map(|row| {
            let value = match &row[key] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            if row["state"] == "unreadable" {
                assert!(
                    row["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("unreadable row in")),
                    "{row}"
                );
                format!("!{value}")
            } else {
                value
            }
        })
        .collect()
}

/// A claim, a gap and an outbox row this version cannot read, each between two readable ones:
/// listed in place as unreadable, in JSON and in the table, and paged past.
fn the_ops_listings_name_corrupt_claims_gaps_and_outbox_rows_in_place<C>(db: &TestDatabase<C>)
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    let url = db.url();
    let mut conn = db.connect();
    lists_a_corrupt_claim_in_place(url, &mut conn);
    lists_a_corrupt_gap_in_place(url, &mut conn);
    lists_a_corrupt_outbox_row_in_place(url, &mut conn);
}

fn lists_a_corrupt_claim_in_place<C: InboxConnection>(url: &str, conn: &mut C) {
    let claims = Inbox::new("pay").unwrap().claims();
    for id in ["c-1", "c-2", "c-3"] {
        let Claimed::Acquired(claim) = claims.claim(conn, id).unwrap() else {
            panic!("a new claim is acquired")
        };
        claim.release(conn, "not now").unwrap();
    }
    conn.batch_execute("UPDATE diesel_inbox_claims SET state = 'frozen' WHERE event_id = 'c-2'")
        .unwrap();
    let listed = json(&cli(
        url,
        &of("pay", &["claims", "--all", "--format", "json"]),
    ));
    assert_eq!(
        keys_of(&listed["claims"], "event_id"),
        ["c-1", "!c-2", "c-3"]
    );
    let page = json(&cli(
        url,
        &of(
            "pay",
            &["claims", "--all", "--limit", "2", "--format", "json"],
        ),
    ));
    assert_eq!(page["more_after"], "c-2", "{page}");
    let next = json(&cli(
        url,
        &of(
            "pay",
            &["claims", "--all", "--after", "c-2", "--format", "json"],
        ),
    ));
    assert_eq!(keys_of(&next["claims"], "event_id"), ["c-3"]);
    let table = expect(&cli(url, &of("pay", &["claims", "--all"])), 0);
    let unreadable = table.find("unreadable: ").expect(&table);
    assert!(table[unreadable..].contains("c-3"), "{table}");
    assert!(table.contains("\"c-2\""), "{table}");
}

fn lists_a_corrupt_gap_in_place<C: InboxConnection>(url: &str, conn: &mut C) {
    let inbox = Inbox::new("proj").unwrap();
    let cursor = inbox.cursor("orders-0").unwrap();
    for sequence in [1, 3, 5, 7] {
        let outcome = cursor.process(conn, sequence, |_: &mut C| Ok::<_, Error>(()));
        assert!(outcome.unwrap().is_processed());
    }
    let ids: Vec<i64> = inbox
        .gaps()
        .list(conn, 0, 10)
        .unwrap()
        .iter()
        .map(|gap| gap.as_ref().unwrap().id)
        .collect();
    conn.batch_execute(&format!(
        "UPDATE diesel_inbox_gaps SET cause = 'lost' WHERE id = {}",
        ids[1]
    ))
    .unwrap();
    let expected = [
        ids[0].to_string(),
        format!("!{}", ids[1]),
        ids[2].to_string(),
    ];
    for view in [&["gaps"][..], &["gaps", "--all"]] {
        let listed = json(&cli(
            url,
            &of("proj", &[view, &["--format", "json"]].concat()),
        ));
        assert_eq!(keys_of(&listed["gaps"], "id"), expected, "{view:?}");
    }
    let page = json(&cli(
        url,
        &of(
            "proj",
            &["gaps", "--all", "--limit", "2", "--format", "json"],
        ),
    ));
    assert_eq!(page["more_after"], ids[1], "{page}");
    let after = ids[1].to_string();
    let next = json(&cli(
        url,
        &of(
            "proj",
            &["gaps", "--all", "--after", &after, "--format", "json"],
        ),
    ));
    assert_eq!(keys_of(&next["gaps"], "id"), [ids[2].to_string()]);
    let table = expect(&cli(url, &of("proj", &["gaps"])), 0);
    assert!(table.contains("unreadable: "), "{table}");
}

fn lists_a_corrupt_outbox_row_in_place<C: InboxConnection>(url: &str, conn: &mut C) {
    let outbox = Outbox::new("orders-service").unwrap();
    for n in ["1", "2", "3"] {
        let envelope = Envelope::new("order.placed", "order", n)
            .with_id(format!("out-{n}"))
            .unwrap()
            .json(&serde_json::json!({ "order": n }))
            .unwrap();
        outbox.enqueue(conn, "orders.placed", &envelope).unwrap();
    }
    let positions: Vec<i64> = Outbox::list(conn, None, 0, 10)
        .unwrap()
        .iter()
        .map(|row| row.as_ref().unwrap().position)
        .collect();
    conn.batch_execute(&format!(
        "UPDATE diesel_inbox_outbox SET state = 'held' WHERE position = {}",
        positions[1]
    ))
    .unwrap();
    let listed = json(&cli(url, &["outbox", "--all", "--format", "json"]));
    let expected = [
        positions[0].to_string(),
        format!("!{}", positions[1]),
        positions[2].to_string(),
    ];
    assert_eq!(keys_of(&listed["rows"], "position"), expected);
    assert_eq!(listed["totals"]["unreadable"], 1, "{listed}");
    assert_eq!(listed["totals"]["pending"], 2, "{listed}");
    // Listed once, with the failed rows, even with the pending ones listed after them.
    let both = json(&cli(url, &["outbox", "--pending", "--format", "json"]));
    assert_eq!(keys_of(&both["rows"], "position"), expected);
    let page = json(&cli(
        url,
        &["outbox", "--all", "--limit", "2", "--format", "json"],
    ));
    assert_eq!(page["more_after"]["all"], positions[1], "{page}");
    let table = expect(&cli(url, &["outbox"]), 0);
    assert!(table.contains("unreadable: "), "{table}");
}

#[test]
fn the_ops_listings_name_corrupt_rows_in_place_on_sqlite() {
    the_ops_listings_name_corrupt_claims_gaps_and_outbox_rows_in_place(&TestDatabase::sqlite());
}

#[test]
fn the_ops_listings_name_corrupt_rows_in_place_on_postgres() {
    let url = std::env::var("DIESEL_INBOX_POSTGRES_URL");
    the_ops_listings_name_corrupt_claims_gaps_and_outbox_rows_in_place(&TestDatabase::postgres(
        url.as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test"),
    ));
}

#[test]
fn the_ops_listings_name_corrupt_rows_in_place_on_mysql() {
    let url = std::env::var("DIESEL_INBOX_MYSQL_URL");
    the_ops_listings_name_corrupt_claims_gaps_and_outbox_rows_in_place(&TestDatabase::mysql(
        url.as_deref().unwrap_or("mysql://root@127.0.0.1:3306/test"),
    ));
}

/// Four events in the outbox, `r-1` to `r-4` (`order.placed`, schema version 1), of which the
/// live consumer `points` processed the first three; returns their positions.
fn replayable_events<C: InboxConnection>(conn: &mut C) -> Vec<i64> {
    let outbox = Outbox::new("orders-service").unwrap();
    let points = Inbox::new("points").unwrap();
    for n in 1..=4 {
        let envelope = Envelope::new("order.placed", "order", &n.to_string())
            .with_id(format!("r-{n}"))
            .unwrap()
            .json(&serde_json::json!({ "order": n }))
            .unwrap();
        outbox.enqueue(conn, "orders.placed", &envelope).unwrap();
        if n < 4 {
            let delivery = Delivery::new(envelope.id().clone())
                .unwrap()
                .with_payload(envelope.payload().clone());
            let outcome = points
                .process(conn, delivery, |_tx| Ok::<_, Error>(()))
                .unwrap();
            assert!(outcome.is_processed(), "{outcome:?}");
        }
    }
    let rows = Outbox::list(conn, None, 0, 10).unwrap();
    rows.iter()
        .map(|row| row.as_ref().unwrap().position)
        .collect()
}

/// `replays` and `args`.
fn replays<'a>(args: &[&'a str]) -> Vec<&'a str> {
    [&["replays"][..], args].concat()
}

/// Plans a replay into the live consumer `points` with `range` (the range's flags), and
/// returns its id.
fn plan_live(url: &str, range: &[&str], reason: &str) -> String {
    let args = [
        &["--consumer", "points", "replays", "plan", "--live"][..],
        range,
        &["--actor", "ops", "--reason", reason, "--format", "json"],
    ]
    .concat();
    let planned = json(&cli(url, &args));
    assert_eq!(planned["state"], "planned", "{planned}");
    planned["id"].as_i64().unwrap().to_string()
}

/// The progress lines of a run of replay `id`.
fn progress_lines(run: &str, id: &str) -> Vec<String> {
    let prefix = format!("replay {id}: ");
    run.lines()
        .filter(|line| line.starts_with(&prefix))
        .map(|line| line[prefix.len()..].to_owned())
        .collect()
}

/// The scenario, once for every backend: replays planned, listed, shown, probed, reconciled,
/// accepted, aborted and pruned through the CLI.
fn the_replay_commands_plan_probe_reconcile_decide_and_prune<C>(db: &TestDatabase<C>)
where
    C: InboxConnection + R2D2Connection + Send + 'static,
{
    let url = db.url();
    let mut conn = db.connect();
    let positions = replayable_events(&mut conn);
    a_dry_run_reports_what_the_range_holds_and_records_nothing(url, &positions);
    let isolated = an_isolated_replay_is_planned_listed_and_shown(url, &positions);
    let aborted = an_isolated_replay_is_refused_a_run_and_aborted_once(url, &isolated);
    let accepted =
        a_probe_of_processed_events_finds_only_duplicates_and_is_accepted(url, &positions);
    let overridden = a_probe_that_finds_an_unprocessed_event_differs_until_overridden(url);
    let decided = [aborted, accepted, overridden];
    prunes_decided_replays_only_and_lists_an_unreadable_one_in_place(url, &mut conn, &decided);
}

fn a_dry_run_reports_what_the_range_holds_and_records_nothing(url: &str, positions: &[i64]) {
    let (first, last) = (positions[0].to_string(), positions[3].to_string());
    let dry_run = [
        "--consumer",
        "points",
        "replays",
        "plan",
        "--live",
        "--first",
        &first,
        "--last",
        &last,
        "--reason",
        "how much would run twice",
        "--dry-run",
    ];
    let preview = json(&cli(url, &[&dry_run[..], &["--format", "json"]].concat()));
    let counts = [
        &preview["events"],
        &preview["skipped"],
        &preview["in_target"],
    ];
    assert_eq!(counts, [4, 0, 3], "{preview}");
    assert_eq!(preview["first"], positions[0], "{preview}");
    assert_eq!(preview["last"], positions[3], "{preview}");
    assert_eq!(
        preview["plan"]["expectation"], "all-duplicates",
        "{preview}"
    );
    // Only version 2 read: every event skipped, none in the target.
    let v2 = [
        &dry_run[..],
        &["--accept", "order.placed:2", "--format", "json"],
    ]
    .concat();
    let skipping = json(&cli(url, &v2));
    let counts = [
        &skipping["events"],
        &skipping["skipped"],
        &skipping["in_target"],
    ];
    assert_eq!(counts, [4, 4, 0], "{skipping}");
    let table = expect(&cli(url, &dry_run), 0);
    assert!(table.contains("dry run: nothing recorded"), "{table}");
    assert!(table.contains("positions"), "{table}");
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(listed["replays"], serde_json::json!([]), "{listed}");
    // The target must be named, and the range must end after it starts.
    let unnamed = [
        "replays", "plan", "--live", "--first", "1", "--last", "2", "--reason", "r",
    ];
    fails(&cli(url, &unnamed), 2, "pass --consumer NAME");
    let inverted = [
        &["--consumer", "points"][..],
        &unnamed[..4],
        &["3", "--last", "2"],
    ]
    .concat();
    fails(
        &cli(url, &[&inverted[..], &["--reason", "r"]].concat()),
        2,
        "--first/--last",
    );
    let both = [
        &unnamed[..],
        &["--consumer", "points", "--isolated", "shadow"],
    ]
    .concat();
    expect(&cli(url, &both), 2);
    let mixed = [
        "replays", "plan", "--live", "--ids", "r-1", "--last", "2", "--reason", "r",
    ];
    expect(
        &cli(url, &[&mixed[..], &["--consumer", "points"]].concat()),
        2,
    );
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(listed["replays"], serde_json::json!([]), "{listed}");
}

/// Returns the replay's id, planned.
fn an_isolated_replay_is_planned_listed_and_shown(url: &str, positions: &[i64]) -> String {
    let (first, last) = (positions[0].to_string(), positions[3].to_string());
    let planned = json(&cli(
        url,
        &[
            "--consumer",
            "points-rebuild",
            "replays",
            "plan",
            "--isolated",
            "points_shadow",
            "--first",
            &first,
            "--last",
            &last,
            "--accept",
            "order.placed:1",
            "--actor",
            "ops",
            "--reason",
            "rebuild points after fix #42",
            "--format",
            "json",
        ],
    ));
    let id = planned["id"].as_i64().unwrap().to_string();
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(keys_of(&listed["replays"], "id"), std::slice::from_ref(&id));
    let row = &listed["replays"][0];
    assert_eq!(
        [&row["state"], &row["consumer"], &row["plan"]["destination"]],
        ["planned", "points-rebuild", "points_shadow"],
        "{row}"
    );
    assert_eq!(row["live"], false, "{row}");
    assert_eq!(
        (&row["evidence_matches"], &listed["more_after"]),
        (&Value::Null, &Value::Null)
    );
    let table = expect(&cli(url, &replays(&["list"])), 0);
    assert!(
        table.contains("isolated: points_shadow") && table.contains("1 replay shown"),
        "{table}"
    );

    let shown = json(&cli(url, &replays(&["show", &id, "--format", "json"])));
    let range =
        serde_json::json!({"kind": "positions", "first": positions[0], "last": positions[3]});
    assert_eq!(shown["plan"]["range"], range, "{shown}");
    assert_eq!(
        shown["plan"]["schema"]["accepted"],
        serde_json::json!({"order.placed": [1]})
    );
    assert_eq!(shown["plan"]["expectation"], "all-processed", "{shown}");
    assert_eq!(shown["notes"], serde_json::json!([]), "{shown}");
    let history = shown["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{shown}");
    assert_eq!(
        [
            &history[0]["from"],
            &history[0]["to"],
            &history[0]["actor"],
            &history[0]["reason"]
        ],
        [
            &Value::Null,
            &Value::from("planned"),
            &Value::from("ops"),
            &Value::from("rebuild points after fix #42")
        ],
    );
    let shown_table = expect(&cli(url, &replays(&["show", &id])), 0);
    assert!(
        shown_table.contains("history:") && shown_table.contains("order.placed:1"),
        "{shown_table}"
    );
    id
}

/// Returns the replay's id, aborted.
fn an_isolated_replay_is_refused_a_run_and_aborted_once(url: &str, id: &str) -> String {
    fails(
        &cli(url, &replays(&["run", id])),
        1,
        "an isolated replay runs the app's handler",
    );
    let abort = replays(&[
        "abort",
        id,
        "--actor",
        "ops",
        "--reason",
        "planned by mistake",
    ]);
    fails(&cli(url, &abort), 2, "--yes");
    let still = json(&cli(url, &replays(&["show", id, "--format", "json"])));
    assert_eq!(still["state"], "planned", "nothing changed without --yes");
    let aborted = json(&cli(
        url,
        &[&abort[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(aborted["state"], "aborted", "{aborted}");
    let again = cli(url, &[&abort[..], &["--yes"]].concat());
    fails(
        &again,
        1,
        "is aborted; only a replay that is planned or running can be aborted",
    );
    fails(
        &cli(url, &replays(&["show", "999999"])),
        1,
        "no replay 999999",
    );
    id.to_owned()
}

/// Returns the replay's id, accepted.
fn a_probe_of_processed_events_finds_only_duplicates_and_is_accepted(
    url: &str,
    positions: &[i64],
) -> String {
    let (first, last) = (positions[0].to_string(), positions[2].to_string());
    let id = plan_live(
        url,
        &["--first", &first, "--last", &last],
        "prove nothing runs twice",
    );
    let run = expect(&cli(url, &replays(&["run", &id, "--batch-size", "2"])), 0);
    let progress = progress_lines(&run, &id);
    assert!(progress.len() >= 2, "a line per batch: {run}");
    assert_eq!(
        progress[0],
        "read 2, processed 0, duplicates 2, failed 0, dead-lettered 0, skipped 0, suppressed 0"
    );
    assert_eq!(
        progress.last().map(String::as_str),
        Some(
            "read 3, processed 0, duplicates 3, failed 0, dead-lettered 0, skipped 0, suppressed 0"
        ),
        "{run}"
    );
    assert!(
        run.contains(&format!("replay {id} finished: 3 events read by this run")),
        "{run}"
    );
    fails(&cli(url, &replays(&["run", &id])), 1, "is finished");
    fails(
        &cli(
            url,
            &replays(&["accept", &id, "--actor", "ops", "--reason", "r", "--yes"]),
        ),
        1,
        "reconcile it first",
    );

    let evidence = json(&cli(url, &replays(&["reconcile", &id, "--format", "json"])));
    assert_eq!(evidence["matches"], true, "{evidence}");
    assert_eq!(evidence["counts"]["duplicates"], 3, "{evidence}");
    let table = expect(&cli(url, &replays(&["reconcile", &id])), 0);
    assert!(table.contains("matches its plan's expectation"), "{table}");
    let accept = replays(&[
        "accept",
        &id,
        "--actor",
        "ops",
        "--reason",
        "counts and digest match",
    ]);
    fails(&cli(url, &accept), 2, "would accept replay");
    expect(&cli(url, &[&accept[..], &["--yes"]].concat()), 0);

    let shown = json(&cli(url, &replays(&["show", &id, "--format", "json"])));
    assert_eq!(
        (&shown["state"], &shown["evidence_matches"]),
        (&Value::from("accepted"), &Value::from(true))
    );
    let states: Vec<&str> = shown["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["planned", "running", "finished", "accepted"],
        "{shown}"
    );
    assert_eq!(shown["history"][3]["actor"], "ops", "{shown}");
    id
}

/// Returns the replay's id, accepted by override.
fn a_probe_that_finds_an_unprocessed_event_differs_until_overridden(url: &str) -> String {
    let id = plan_live(url, &["--ids", "r-3,r-4"], "does r-4 run again?");
    let run = cli(url, &replays(&["run", &id, "--format", "json"]));
    let report: Value = serde_json::from_str(&expect(&run, 0)).unwrap();
    assert_eq!(
        (&report["finished"], &report["read_now"]),
        (&Value::from(true), &Value::from(2))
    );
    let counts = [
        &report["counts"]["read"],
        &report["counts"]["duplicates"],
        &report["counts"]["failed"],
    ];
    assert_eq!(counts, [2, 1, 1], "the probe rolled r-4 back: {report}");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!("replay {id}: read 2")),
        "progress on stderr: {stderr}"
    );

    let reconciled = cli(url, &replays(&["reconcile", &id]));
    let table = expect(&reconciled, 3);
    assert!(
        table.contains("differs: ") && table.contains("r-4"),
        "{table}"
    );
    assert!(String::from_utf8_lossy(&reconciled.stderr).contains("--override"));
    let evidence = cli(url, &replays(&["reconcile", &id, "--format", "json"]));
    let evidence: Value = serde_json::from_str(&expect(&evidence, 3)).unwrap();
    assert_eq!(evidence["matches"], false, "{evidence}");
    assert_eq!(
        evidence["without_inbox_row_ids"],
        serde_json::json!(["r-4"]),
        "{evidence}"
    );

    let accept = replays(&[
        "accept",
        &id,
        "--actor",
        "ops",
        "--reason",
        "r-4 is new: expected",
        "--yes",
    ]);
    fails(
        &cli(url, &accept),
        1,
        "does not match its plan's expectation",
    );
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    let row = listed["replays"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.parse::<i64>().unwrap())
        .unwrap();
    assert_eq!(
        (&row["state"], &row["evidence_matches"]),
        (&Value::from("finished"), &Value::from(false))
    );
    expect(&cli(url, &[&accept[..], &["--override"]].concat()), 0);

    let shown = json(&cli(url, &replays(&["show", &id, "--format", "json"])));
    assert_eq!(shown["state"], "accepted", "{shown}");
    let last = shown["history"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["reason"].as_str().unwrap().contains("override of"),
        "{last}"
    );
    let notes = shown["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n["kind"] == "ran" && n["event_id"] == "r-4" && n["position"] == 2),
        "{shown}"
    );
    id
}

fn prunes_decided_replays_only_and_lists_an_unreadable_one_in_place<C: InboxConnection>(
    url: &str,
    conn: &mut C,
    decided: &[String],
) {
    let open = plan_live(url, &["--ids", "r-1"], "kept open");
    let prune = replays(&["prune", "--older-than", "0s"]);
    fails(
        &cli(url, &prune),
        2,
        &format!("would delete {} decided replays", decided.len()),
    );
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(
        keys_of(&listed["replays"], "id").len(),
        decided.len() + 1,
        "nothing pruned without --yes"
    );
    let pruned = json(&cli(
        url,
        &[&prune[..], &["--yes", "--format", "json"]].concat(),
    ));
    assert_eq!(pruned["deleted"], decided.len(), "{pruned}");
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(
        keys_of(&listed["replays"], "id"),
        std::slice::from_ref(&open),
        "open replays stay"
    );

    let page = json(&cli(
        url,
        &replays(&["list", "--limit", "1", "--format", "json"]),
    ));
    assert_eq!(page["more_after"].to_string(), open, "{page}");
    conn.batch_execute(&format!(
        "UPDATE diesel_inbox_replays SET state = 'paused' WHERE id = {open}"
    ))
    .unwrap();
    let listed = json(&cli(url, &replays(&["list", "--format", "json"])));
    assert_eq!(
        keys_of(&listed["replays"], "id"),
        [format!("!{open}")],
        "{listed}"
    );
    let table = expect(&cli(url, &replays(&["list"])), 0);
    assert!(table.contains("unreadable: "), "{table}");
    fails(
        &cli(url, &replays(&["show", &open])),
        1,
        "unreadable row in",
    );
}

#[test]
fn replays_are_planned_probed_reconciled_decided_and_pruned_through_the_cli_on_sqlite() {
    the_replay_commands_plan_probe_reconcile_decide_and_prune(&TestDatabase::sqlite());
}

#[test]
fn replays_are_planned_probed_reconciled_decided_and_pruned_through_the_cli_on_postgres() {
    let url = std::env::var("DIESEL_INBOX_POSTGRES_URL");
    the_replay_commands_plan_probe_reconcile_decide_and_prune(&TestDatabase::postgres(
        url.as_deref()
            .unwrap_or("postgres://root@127.0.0.1:5432/test"),
    ));
}

#[test]
fn replays_are_planned_probed_reconciled_decided_and_pruned_through_the_cli_on_mysql() {
    let url = std::env::var("DIESEL_INBOX_MYSQL_URL");
    the_replay_commands_plan_probe_reconcile_decide_and_prune(&TestDatabase::mysql(
        url.as_deref().unwrap_or("mysql://root@127.0.0.1:3306/test"),
    ));
}
