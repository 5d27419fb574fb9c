//! Test databases placed by a team's rules: a prefix of its own, a schema per test, or a
//! database it was given; each removes only what it created.

use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::with_inbox;
use diesel_inbox_test::{Placement, PREFIX_VARIABLE};

use crate::scenarios::effect;
use crate::support::{ChildTest, ServerBackend, TestConn};

/// Whether the inbox's tables can be read at `url`: false once its database or schema is gone.
fn inbox_readable<B: ServerBackend>(url: &str) -> bool {
    B::Conn::establish(url).ok().is_some_and(|mut conn| {
        conn.batch_execute("SELECT 1 FROM diesel_inbox_events")
            .is_ok()
    })
}

/// `url` with its database (the path after the host) replaced by `name`.
fn at_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

pub(crate) fn a_test_database_takes_the_teams_prefix_and_is_dropped_when_its_test_passes<
    B: ServerBackend,
>() {
    let db = B::placed(&B::server_url(), Placement::Database { prefix: "team_ci" });
    let url = db.url().to_owned();
    let name = url.rsplit('/').next().unwrap();
    assert!(name.starts_with("team_ci_"), "{url}");
    let mut conn = db.connect();
    conn.batch_execute(B::EFFECTS_DDL).unwrap();
    assert!(with_inbox(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    drop(conn);
    drop(db);
    assert!(!inbox_readable::<B>(&url), "dropped: {url}");
}

pub(crate) fn a_schema_per_test_keeps_tests_apart_and_is_dropped_when_its_test_passes<
    B: ServerBackend,
>() {
    let placement = Placement::Schema { prefix: "team_ci" };
    if !B::HAS_SCHEMAS {
        let refused = panic::catch_unwind(|| B::placed(&B::server_url(), placement));
        let message = refused.expect_err("MySQL has no schemas apart from databases");
        let message = message.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(message.contains("use Placement::Database"), "{message:?}");
        return;
    }
    if diesel_inbox_test::behind_pooler() {
        println!(
            "skipped: a pooler in transaction mode drops the URL's options, search_path among them"
        );
        return;
    }
    let (one, two) = (
        B::placed(&B::server_url(), placement),
        B::placed(&B::server_url(), placement),
    );
    let (mut first, mut second) = (one.connect(), two.connect());
    for conn in [&mut first, &mut second] {
        conn.batch_execute(B::EFFECTS_DDL).unwrap();
    }
    assert!(with_inbox(&mut first, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    assert!(
        with_inbox(&mut second, "evt-1", effect("evt-1"))
            .unwrap()
            .is_processed(),
        "each schema has its own inbox"
    );
    assert_eq!((first.inbox_rows(), second.inbox_rows()), (1, 1));
    let url = one.url().to_owned();
    drop((first, one));
    assert!(!inbox_readable::<B>(&url), "its schema is dropped: {url}");
    assert!(
        inbox_readable::<B>(two.url()),
        "the other's stays until its test ends"
    );
}

pub(crate) fn a_given_database_keeps_its_own_tables_and_loses_only_the_inbox_tables_it_got<
    B: ServerBackend,
>() {
    let admin_url = B::server_url();
    let name = format!("given_{:08x}", fastrand::u32(..));
    let url = at_database(&admin_url, &name);
    let mut admin = B::connect_to(&admin_url);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let mut team = B::connect_to(&url);
    team.batch_execute(
        "CREATE TABLE team_data (id INTEGER PRIMARY KEY); INSERT INTO team_data VALUES (7)",
    )
    .unwrap();

    let db = B::placed(&url, Placement::Existing);
    assert_eq!(db.url(), url);
    let mut conn = db.connect();
    conn.batch_execute(B::EFFECTS_DDL).unwrap();
    assert!(with_inbox(&mut conn, "evt-1", effect("evt-1"))
        .unwrap()
        .is_processed());
    drop((conn, db));
    assert!(
        !inbox_readable::<B>(&url),
        "the inbox tables it created are dropped"
    );
    team.batch_execute("SELECT id FROM team_data WHERE id = 7")
        .unwrap();

    // With the inbox there already, it is the team's: kept.
    diesel_inbox::run_pending_migrations(&mut team).unwrap();
    drop(B::placed(&url, Placement::Existing));
    assert!(inbox_readable::<B>(&url), "the inbox tables it found stay");

    drop(team);
    // PostgreSQL's is forced: a pooler in front of it keeps idle server connections to it.
    let force = if B::HAS_SCHEMAS { " WITH (FORCE)" } else { "" };
    admin
        .batch_execute(&format!("DROP DATABASE {name}{force}"))
        .unwrap();
}

/// Set in the child of [`the_prefix_variable_names_the_suites_databases`]: make a database
/// the default way and print its name.
const PREFIX_CHILD: &str = "DIESEL_INBOX_PREFIX_CHILD";

pub(crate) fn the_prefix_variable_names_the_suites_databases<B: ServerBackend>() {
    if std::env::var(PREFIX_CHILD).is_ok() {
        let db = B::database();
        println!("database {}", db.url().rsplit('/').next().unwrap());
        return;
    }
    let mut child = ChildTest::spawn(
        "the_prefix_variable_names_the_suites_databases",
        &[(PREFIX_CHILD, "1"), (PREFIX_VARIABLE, "team_env")],
    );
    assert!(child.exit_status(Duration::from_secs(60)).success());
    let printed = child.printed();
    assert!(
        printed
            .iter()
            .any(|line| line.contains("database team_env_")),
        "{printed:?}"
    );

    let refused = panic::catch_unwind(AssertUnwindSafe(|| {
        B::placed(
            &B::server_url(),
            Placement::Database {
                prefix: "team-ci; DROP",
            },
        )
    }));
    let message = refused.expect_err("a prefix that is no identifier is refused");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("is not valid"), "{message:?}");
}
