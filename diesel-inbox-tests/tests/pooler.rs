//! PostgreSQL behind PgBouncer in transaction pooling mode (`scripts/pgbouncer`): each
//! transaction may run on another server connection, so no lock of a session holds. The test
//! needs its bed, so it is `#[ignore]`d in a plain `cargo test`; `scripts/test` brings the bed
//! up and runs it with `--ignored`.
//!
//! A fleet: replicas in processes of their own start together on a fresh database, migrate and
//! prune through the pooler, and exit. Then no advisory lock is left on the server, and prunes
//! and migrations run one after another, none told another is running.

mod beds;

use beds::bed;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use diesel::connection::{CacheSize, SimpleConnection};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel_inbox::migrations::MigrationOptions;
use diesel_inbox::{
    migrations::run_pending_migrations_with, retention::Retention, AdminError, Inbox,
};

const TEST: &str = "a_fleet_behind_pgbouncer_migrates_once_and_leaves_no_lock_behind";
/// Set in a replica: the database URL (through the pooler), and the file whose appearance is
/// its signal to start.
const REPLICA_URL: &str = "DIESEL_INBOX_POOLER_REPLICA_URL";
const REPLICA_GO: &str = "DIESEL_INBOX_POOLER_REPLICA_GO";
const REPLICAS: usize = 6;
const ROUNDS: usize = 3;
/// How many inbox migrations there are.
const MIGRATIONS: usize = 11;
/// A bound well above a migration's few hundred milliseconds: a lock that leaked hits it.
const LOCK_BOUND: Duration = Duration::from_secs(10);

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, _) = url.rsplit_once('/').unwrap();
    format!("{base}/{name}")
}

/// A connection through the pooler, with Diesel's statement cache off, as a pooler in
/// transaction mode needs.
fn through_pooler(url: &str) -> PgConnection {
    let mut conn = PgConnection::establish(url).unwrap();
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    conn
}

fn options() -> MigrationOptions {
    MigrationOptions::default().lock_timeout(LOCK_BOUND)
}

fn prune(conn: &mut PgConnection) -> Result<u64, AdminError> {
    let day = Duration::from_secs(24 * 60 * 60);
    Inbox::new("fleet")
        .unwrap()
        .prune(conn, &Retention::older_than(7 * day))
        .map(|pruned| pruned.events)
}

/// The replica: says it is ready (a file beside the signal's), waits for the signal, migrates, prunes, and prints what it
/// did. Another replica's prune may be running: that one is told so.
fn replica(url: &str, go: &Path) {
    let mut conn = through_pooler(url);
    let ready = go.with_extension(format!("ready-{}", std::process::id()));
    std::fs::write(ready, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "no signal to start");
        std::thread::sleep(Duration::from_millis(1));
    }
    match run_pending_migrations_with(&mut conn, options()) {
        Ok(applied) => println!("migrated={applied}"),
        Err(error) => panic!("migration failed: {error}"),
    }
    match prune(&mut conn) {
        Ok(_) | Err(AdminError::PruneRunning) => println!("pruned"),
        Err(error) => panic!("prune failed: {error}"),
    }
}

/// How many replicas of `round` said they are ready.
fn ready_replicas(signals: &Path, round: usize) -> usize {
    let prefix = format!("go-{round}.ready-");
    std::fs::read_dir(signals)
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        })
        .count()
}

/// Advisory locks held on the server in database `name`, by any session.
fn advisory_locks(server: &mut PgConnection, name: &str) -> i64 {
    diesel::sql_query(format!(
        "SELECT COUNT(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE l.locktype = 'advisory' AND d.datname = '{name}'"
    ))
    .get_result::<Count>(server)
    .unwrap()
    .n
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[test]
#[ignore = "needs scripts/pgbouncer; run by scripts/test"]
fn a_fleet_behind_pgbouncer_migrates_once_and_leaves_no_lock_behind() {
    if let Ok(url) = std::env::var(REPLICA_URL) {
        replica(&url, Path::new(&std::env::var(REPLICA_GO).unwrap()));
        return;
    }
    let pooler = bed("pgbouncer", &["urls"])
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let server_url = std::env::var("DIESEL_INBOX_POSTGRES_DIRECT_URL")
        .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".to_owned());
    let mut server = PgConnection::establish(&server_url).unwrap();
    let name = format!("diesel_inbox_fleet_{}", std::process::id());
    for statement in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        server.batch_execute(&statement).unwrap();
    }
    let url = with_database(&pooler, &name);
    let mut direct = PgConnection::establish(&with_database(&server_url, &name)).unwrap();
    let signals = tempfile::tempdir().unwrap();

    for round in 0..ROUNDS {
        direct
            .batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            .unwrap();
        let go = signals.path().join(format!("go-{round}"));
        let replicas: Vec<_> = (0..REPLICAS)
            .map(|_| {
                Command::new(std::env::current_exe().unwrap())
                    .args(["--exact", TEST, "--include-ignored", "--nocapture"])
                    .args(["--test-threads=1"])
                    .env(REPLICA_URL, &url)
                    .env(REPLICA_GO, &go)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        // Each replica says it is connected; then they start together.
        let deadline = Instant::now() + Duration::from_secs(60);
        while ready_replicas(signals.path(), round) < REPLICAS {
            assert!(
                Instant::now() < deadline,
                "round {round}: replicas not ready"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(&go, "").unwrap();
        let mut applied = 0;
        for replica in replicas {
            let output = replica.wait_with_output().unwrap();
            let printed = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(
                output.status.success() && printed.contains("pruned"),
                "round {round}: a replica failed: {printed}{}",
                String::from_utf8_lossy(&output.stderr)
            );
            applied += printed
                .lines()
                .find_map(|line| line.rsplit_once("migrated=").map(|(_, n)| n.trim()))
                .unwrap_or_else(|| panic!("round {round}: no count in {printed}"))
                .parse::<usize>()
                .unwrap();
        }
        assert_eq!(
            applied, MIGRATIONS,
            "round {round}: each migration applied by exactly one replica"
        );

        // Every replica has exited: nothing of theirs may hold a lock on the server.
        let locks = advisory_locks(&mut server, &name);
        assert_eq!(locks, 0, "round {round}: advisory locks left on the server");
        // One after another, through the pooler, each on a connection of its own: none is
        // told another is running.
        for turn in 0..REPLICAS {
            let mut conn = through_pooler(&url);
            let pruned = prune(&mut conn);
            assert!(pruned.is_ok(), "round {round}, turn {turn}: {pruned:?}");
            let migrated = run_pending_migrations_with(&mut conn, options());
            assert!(
                matches!(migrated, Ok(0)),
                "round {round}, turn {turn}: {migrated:?}"
            );
        }
        let locks_after = advisory_locks(&mut server, &name);
        assert_eq!(
            locks_after, 0,
            "round {round}: advisory locks left after the turns"
        );
        println!("round {round}: {REPLICAS} replicas migrated ({applied} migrations once), {locks} advisory locks left, {REPLICAS} prunes and migrations in turn");
    }
    drop(direct);
    server
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .unwrap();
}
