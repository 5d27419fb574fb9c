//! The `diesel-inbox` binary end to end, on each backend: dead letters made through the
//! library, then listed, shown, exported, discarded and released through the CLI; a cursor's gaps
//! listed and resolved; the doctor; the migrations.

use std::path::Path;
use std::process::{Command, Output};

use diesel::r2d2::R2D2Connection;
use diesel_inbox::testing::TestDatabase;
use diesel_inbox::{
    Audit, Cursor, Delivery, Error, GapState, Inbox, InboxConnection, Payload, Resume, Sequenced,
};
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
    Err(Error::MissingAudit("the handler refuses"))
}

/// The scenario, once for every backend: `drop_index` drops `diesel_inbox_events_settled`.
fn the_cli_operates_dead_letters_gaps_doctor_and_migrations<C>(
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
    assert_eq!(inbox.dead_letters().list(conn).unwrap().len(), 2);
    let no_actor = cli(
        url,
        &with(&["dead-letters", "discard", "evt-2", "--reason", "x", "--yes"]),
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
    assert!(inbox.dead_letters().list(conn).unwrap().is_empty());
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
    let id = skipping.gaps().open(conn).unwrap()[0].id();

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
    let closed = &cursor.gaps().list(conn).unwrap()[0];
    assert_eq!(closed.state(), GapState::Resolved);
    assert_eq!(closed.resolution().map(Audit::actor), Some("ops"));

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

fn doctor_passes_then_fails<C: InboxConnection>(url: &str, conn: &mut C, drop_index: &str) {
    // doctor: healthy (SQLite warns of the tool's own connection's busy timeout), then not
    let checks = json(&cli(url, &["doctor", "--format", "json"]));
    for check in checks.as_array().unwrap() {
        let expected = if check["name"] == "busy_timeout" {
            "warn"
        } else {
            "ok"
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
    assert_eq!(written.as_array().unwrap().len(), 5, "{written}");
    for path in written.as_array().unwrap() {
        assert!(Path::new(path.as_str().unwrap()).join("up.sql").is_file());
    }
}

#[test]
fn the_cli_on_sqlite() {
    let db = TestDatabase::sqlite();
    the_cli_operates_dead_letters_gaps_doctor_and_migrations(
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
    the_cli_operates_dead_letters_gaps_doctor_and_migrations(
        &db,
        "DROP INDEX diesel_inbox_events_settled",
    );
}

#[test]
fn the_cli_on_mysql() {
    let url = std::env::var("DIESEL_INBOX_MYSQL_URL");
    let db = TestDatabase::mysql(url.as_deref().unwrap_or("mysql://root@127.0.0.1:3306/test"));
    the_cli_operates_dead_letters_gaps_doctor_and_migrations(
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
    let help = expect(&run(&["--help"]), 0);
    assert!(help.contains("Exit codes"), "{help}");
}
