//! Applying the inbox schema beside an application's own Diesel migrations: embedded (tracked
//! in `diesel_inbox_migrations`) or installed into the application's migrations folder.

use diesel_inbox::AdminError;
use std::fs;
use std::path::Path;

use diesel::connection::SimpleConnection;
use diesel::migration::MigrationVersion;
use diesel::Connection;
use diesel_inbox::migrations::{install, sql, Dialect, MigrationOptions};
use diesel_inbox::{run_pending_migrations, with_inbox, Error};
use diesel_migrations::{FileBasedMigrations, MigrationHarness};

use crate::support::{
    database_without_inbox_schema, drop_inbox_schema, Backend, CheckConn, Flavour, TestConn,
    INBOX_TABLES, MIGRATIONS, TRACKING_TABLE,
};

/// The SQL dialect `install` writes for each backend under test.
pub trait HasDialect {
    const DIALECT: Dialect;
}

#[cfg(feature = "postgres")]
impl HasDialect for crate::support::Postgres {
    const DIALECT: Dialect = Dialect::Postgres;
}

#[cfg(feature = "sqlite")]
impl HasDialect for crate::support::Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;
}

#[cfg(feature = "mysql")]
impl HasDialect for crate::support::Mysql {
    const DIALECT: Dialect = Dialect::Mysql;
}

/// The backend's connection runs Diesel's own harness, as the Diesel CLI does.
type Db<B> = <<B as Backend>::Conn as Connection>::Backend;

fn table_exists<C: Connection>(conn: &mut C, table: &str) -> bool {
    conn.batch_execute(&format!("SELECT 1 FROM {table} WHERE 1 = 0"))
        .is_ok()
}

fn inbox_tables<C: Connection>(conn: &mut C) -> Vec<&'static str> {
    INBOX_TABLES
        .into_iter()
        .filter(|table| table_exists(conn, table))
        .collect()
}

/// An application's migrations folder with one migration of its own.
fn app_migrations_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let app = dir.path().join("2024-01-01-000000_create_app_users");
    fs::create_dir(&app).unwrap();
    fs::write(
        app.join("up.sql"),
        "CREATE TABLE app_users (id INTEGER PRIMARY KEY, name TEXT NOT NULL);",
    )
    .unwrap();
    fs::write(app.join("down.sql"), "DROP TABLE app_users;").unwrap();
    dir
}

fn folders(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn versions(applied: Vec<MigrationVersion<'_>>) -> Vec<String> {
    applied.into_iter().map(|v| v.to_string()).collect()
}

fn deliver<C: diesel_inbox::InboxConnection>(conn: &mut C, event_id: &str) -> bool {
    with_inbox(conn, event_id, |_tx| Ok::<_, Error>(()))
        .unwrap()
        .is_processed()
}

/// [`deliver`] on flavour `F`.
async fn deliver_on<F: Flavour>(conn: &mut F::Conn, event_id: &str) -> bool {
    let nothing = async |_: &mut F::Conn| Ok::<_, Error>(());
    F::with_inbox(conn, event_id, nothing)
        .await
        .unwrap()
        .is_processed()
}

pub async fn migrations_apply_on_a_fresh_database_and_again_idempotently<F: Flavour>() {
    let db = <F::Backend as Backend>::database();
    let mut check = db.connect();
    let mut conn = F::connect(&db).await;
    let options = MigrationOptions::default();
    assert_eq!(
        F::migrate(&mut conn, options).await.unwrap(),
        0,
        "already applied"
    );

    drop_inbox_schema(&mut check);
    assert_eq!(F::migrate(&mut conn, options).await.unwrap(), MIGRATIONS);
    assert_eq!(F::migrate(&mut conn, options).await.unwrap(), 0);
    assert_eq!(F::depth(&mut conn), 0);
    assert!(deliver_on::<F>(&mut conn, "evt-1").await);

    // Schema applied by hand, bookkeeping missing: applying again is not an error.
    check
        .batch_execute(&format!("DROP TABLE {TRACKING_TABLE}"))
        .unwrap();
    assert_eq!(F::migrate(&mut conn, options).await.unwrap(), MIGRATIONS);
    let again = deliver_on::<F>(&mut conn, "evt-1").await;
    assert!(!again, "the event is still recorded");
}

pub fn diesels_harness_runs_and_reverts_all_app_migrations_beside_the_embedded_inbox<B>()
where
    B: Backend,
    B::Conn: MigrationHarness<Db<B>>,
{
    let (_db, mut conn) = database_without_inbox_schema::<B>();
    assert_eq!(run_pending_migrations(&mut conn).unwrap(), MIGRATIONS);
    assert_eq!(run_pending_migrations(&mut conn).unwrap(), 0);
    assert!(deliver(&mut conn, "evt-1"));
    let folder = app_migrations_folder();
    let app = FileBasedMigrations::from_path(folder.path()).unwrap();

    // What `diesel migration run` does with the app's own folder.
    let ran = versions(conn.run_pending_migrations(app.clone()).unwrap());
    assert_eq!(ran, ["20240101000000"]);
    assert!(table_exists(&mut conn, "app_users"));
    assert_eq!(
        versions(conn.applied_migrations().unwrap()),
        ["20240101000000"],
        "the inbox's versions are not in __diesel_schema_migrations"
    );

    // What `diesel migration revert --all` does: every app migration, and nothing else.
    let reverted = versions(conn.revert_all_migrations(app.clone()).unwrap());
    assert_eq!(reverted, ["20240101000000"]);
    assert!(!table_exists(&mut conn, "app_users"));
    assert_eq!(
        inbox_tables(&mut conn),
        INBOX_TABLES,
        "the inbox tables stay"
    );
    assert!(!deliver(&mut conn, "evt-1"), "the inbox still knows evt-1");
    assert_eq!(run_pending_migrations(&mut conn).unwrap(), 0);

    // And `diesel migration run` again.
    assert_eq!(versions(conn.run_pending_migrations(app).unwrap()), ran);
}

pub fn installed_inbox_migrations_run_and_revert_with_the_apps_own<B>()
where
    B: Backend + HasDialect,
    B::Conn: MigrationHarness<Db<B>>,
{
    let (_db, mut conn) = database_without_inbox_schema::<B>();
    let folder = app_migrations_folder();

    let written = install(folder.path(), B::DIALECT).unwrap();
    let names: Vec<String> = written
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), MIGRATIONS);
    assert!(names[0].ends_with("_diesel_inbox_create"), "{names:?}");
    assert!(names[1].ends_with("_diesel_inbox_failures"), "{names:?}");
    assert!(names[0] < names[1], "they sort in order: {names:?}");
    assert!(written
        .iter()
        .all(|path| path.parent() == Some(folder.path())));
    assert!(written
        .iter()
        .all(|path| path.join("up.sql").is_file() && path.join("down.sql").is_file()));

    // `diesel migration run`: the app's migration and the inbox's, as one folder.
    let app = FileBasedMigrations::from_path(folder.path()).unwrap();
    assert_eq!(
        conn.run_pending_migrations(app.clone()).unwrap().len(),
        1 + MIGRATIONS
    );
    assert_eq!(inbox_tables(&mut conn), INBOX_TABLES);
    assert!(
        !table_exists(&mut conn, TRACKING_TABLE),
        "this route leaves the bookkeeping to Diesel"
    );
    assert!(deliver(&mut conn, "evt-1"));
    assert!(!deliver(&mut conn, "evt-1"));

    // `diesel migration revert --all`: the inbox tables go with the rest.
    assert_eq!(
        conn.revert_all_migrations(app).unwrap().len(),
        1 + MIGRATIONS
    );
    assert_eq!(inbox_tables(&mut conn), Vec::<&str>::new());
    assert!(!table_exists(&mut conn, "app_users"));

    // Installing again writes nothing.
    let before = folders(folder.path());
    assert_eq!(
        install(folder.path(), B::DIALECT).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(folders(folder.path()), before);
}

pub fn installing_the_migrations_into_a_file_is_a_typed_error_and_writes_nothing<
    B: Backend + HasDialect,
>() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("migrations");
    fs::write(&file, "not a folder").unwrap();

    let error = install(&file, B::DIALECT).unwrap_err();

    assert!(
        matches!(&error, AdminError::MigrationInstall { path, .. } if *path == file),
        "{error:?}"
    );
    assert!(error.to_string().contains("migrations folder"), "{error}");
    assert_eq!(folders(dir.path()), ["migrations"]);
    assert_eq!(fs::read_to_string(&file).unwrap(), "not a folder");

    let missing = dir.path().join("no-such-folder");
    assert!(matches!(
        install(&missing, B::DIALECT),
        Err(AdminError::MigrationInstall { path, .. }) if path == missing
    ));
    assert_eq!(folders(dir.path()), ["migrations"]);
}

pub async fn a_database_migrated_by_diesel_inbox_0_1_is_taken_over_with_its_events<F>()
where
    F: Flavour<Backend: HasDialect>,
    CheckConn<F>: MigrationHarness<Db<F::Backend>>,
{
    let (db, mut check) = database_without_inbox_schema::<F::Backend>();
    // What 0.1 left: its two migrations, the events table named `diesel_inbox`, and the
    // inbox's versions in Diesel's own record, beside one of the application's.
    for migration in &sql(<F::Backend as HasDialect>::DIALECT)[..2] {
        check
            .batch_execute(&migration.up.replace("diesel_inbox_events", "diesel_inbox"))
            .unwrap();
    }
    check
        .batch_execute(
            "DROP TABLE IF EXISTS __diesel_schema_migrations;
             CREATE TABLE __diesel_schema_migrations (
                 version VARCHAR(50) PRIMARY KEY NOT NULL,
                 run_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP);
             INSERT INTO __diesel_schema_migrations (version)
                 VALUES ('20000101000001'), ('20000101000002'), ('20240101000000');
             INSERT INTO diesel_inbox (consumer, event_id, processed_at, last_seen_at)
                 VALUES ('default', 'evt-old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP);",
        )
        .unwrap();
    let mut conn = F::connect(&db).await;
    let options = MigrationOptions::default();

    assert_eq!(
        F::migrate(&mut conn, options).await.unwrap(),
        MIGRATIONS - 2,
        "0.1 applied the first two; the later ones run now"
    );

    let nothing = async |_: &mut F::Conn| Ok::<_, Error>(());
    let again = F::with_inbox(&mut conn, "evt-old", nothing).await.unwrap();
    assert_eq!(
        again
            .duplicate()
            .and_then(diesel_inbox::Duplicate::deliveries),
        Some(2),
        "{again:?}"
    );
    assert!(!table_exists(&mut check, "diesel_inbox"));
    assert_eq!(
        versions(check.applied_migrations().unwrap()),
        ["20240101000000"],
        "the application's own version stays, the inbox's moved out"
    );
    assert_eq!(
        F::migrate(&mut conn, options).await.unwrap(),
        0,
        "taken over once"
    );
}

/// Set in a child process: the database URL it migrates, and the file whose appearance is its
/// signal to start.
const MIGRATE_CHILD: &str = "DIESEL_INBOX_MIGRATE_CHILD";
const MIGRATE_GO: &str = "DIESEL_INBOX_MIGRATE_GO";
/// Replicas started together per round, and rounds, each on a database without the schema.
const REPLICAS: usize = 8;
const ROUNDS: usize = 10;

/// The child: says it is ready, waits for the signal, migrates, and prints what it applied.
fn migrate_as_a_replica<B: Backend>(url: &str, go: &Path) {
    let mut conn = B::connect_to(url);
    println!("ready");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !go.exists() {
        assert!(std::time::Instant::now() < deadline, "no signal to start");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match run_pending_migrations(&mut conn) {
        Ok(applied) => println!("migrated={applied}"),
        Err(error) => panic!("migration failed: {error}"),
    }
}

pub fn replicas_starting_together_all_migrate_and_the_schema_is_applied_once<B: Backend>() {
    const TEST: &str = "replicas_starting_together_all_migrate_and_the_schema_is_applied_once";
    if let Ok(url) = std::env::var(MIGRATE_CHILD) {
        migrate_as_a_replica::<B>(&url, Path::new(&std::env::var(MIGRATE_GO).unwrap()));
        return;
    }
    let (db, mut conn) = database_without_inbox_schema::<B>();
    let signals = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        drop_inbox_schema(&mut conn);
        let go = signals.path().join(format!("go-{round}"));
        let go_arg = go.to_str().unwrap();
        let mut replicas: Vec<_> = (0..REPLICAS)
            .map(|_| {
                crate::support::ChildTest::spawn(
                    TEST,
                    &[(MIGRATE_CHILD, db.url()), (MIGRATE_GO, go_arg)],
                )
            })
            .collect();
        for replica in &mut replicas {
            replica.wait_for("ready", std::time::Duration::from_secs(60));
        }
        fs::write(&go, "").unwrap();

        let mut applied = Vec::new();
        for replica in &mut replicas {
            let status = replica.exit_status(std::time::Duration::from_secs(120));
            let printed = replica.printed();
            assert!(
                status.success(),
                "round {round}: a replica failed: {printed:?}"
            );
            let count: usize = printed
                .iter()
                .find_map(|line| line.rsplit_once("migrated=").map(|(_, n)| n.trim()))
                .unwrap_or_else(|| panic!("round {round}: no count in {printed:?}"))
                .parse()
                .unwrap();
            applied.push(count);
        }
        assert_eq!(
            applied.iter().sum::<usize>(),
            MIGRATIONS,
            "round {round}: each migration applied by exactly one replica: {applied:?}"
        );
        let versions = conn.migration_versions();
        assert_eq!(versions.len(), MIGRATIONS, "round {round}: {versions:?}");
        assert_eq!(inbox_tables(&mut conn), INBOX_TABLES, "round {round}");
        for check in diesel_inbox::doctor::check(&mut conn).unwrap() {
            if crate::support::SERVER_CHECKS.contains(&check.name) {
                continue;
            }
            assert_eq!(
                check.status,
                diesel_inbox::doctor::CheckStatus::Ok,
                "round {round}: {check:?}"
            );
        }
        assert_eq!(run_pending_migrations(&mut conn).unwrap(), 0);
    }
    println!(
        "{} replicas x {ROUNDS} rounds on {}: every one migrated, each migration once",
        REPLICAS,
        std::any::type_name::<B>().rsplit("::").next().unwrap()
    );
}

pub async fn a_migration_lock_held_past_the_bound_is_a_typed_error_and_applies_nothing<
    F: Flavour,
>() {
    let (db, mut check) = database_without_inbox_schema::<F::Backend>();
    let mut conn = F::connect(&db).await;
    let mut other_process = db.connect();
    <F::Backend as Backend>::hold_migration_lock(&mut other_process);

    let options = MigrationOptions::default().lock_timeout(std::time::Duration::from_millis(200));
    let error = F::migrate(&mut conn, options).await.unwrap_err();

    assert!(
        matches!(error, AdminError::MigrationLocked { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("another process is applying the inbox migrations")
            && message.contains("retry"),
        "{message}"
    );
    assert!(inbox_tables(&mut check).is_empty(), "nothing was applied");

    // Once the other process is gone, the same call applies them all.
    drop(other_process);
    assert_eq!(F::migrate(&mut conn, options).await.unwrap(), MIGRATIONS);
}
