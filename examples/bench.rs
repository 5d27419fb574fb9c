//! What exactly-once processing costs, measured against the bare transaction, side by side in
//! one run on PostgreSQL, MariaDB and SQLite (a WAL file).
//!
//! ```sh
//! cargo run --release --example bench --features postgres,sqlite,mysql,testing
//! cargo run --release --example bench --features postgres,sqlite,mysql,testing -- \
//!     --events 5000 --prefill 1000000 --backends postgres,sqlite
//! ```
//!
//! Every scenario delivers `--events` events, one connection, one at a time, each crediting one
//! of 1,000 accounts (`UPDATE accounts SET balance = balance + 1 WHERE id = ?`):
//!
//! - bare: the update in its own transaction, no inbox;
//! - cursor: the same through `Cursor::process`, one stream's consecutive sequences (the
//!   in-order path: one update of the cursor row beside the credit);
//! - inbox: the same through `with_inbox`, every id new, random (`UUIDv4`) or time-ordered
//!   (`UUIDv7`);
//! - duplicates: every delivery a duplicate of one processed before;
//! - naive: the hand-written check, `SELECT` the id then `INSERT` it, in the same transaction;
//! - batch N: `process_batch` with N new ids per batch;
//! - large inbox: `with_inbox` after `--prefill` rows were put in the inbox table, with random
//!   (`UUIDv4`) and time-ordered (`UUIDv7`) ids.
//!
//! Servers come from `DIESEL_INBOX_POSTGRES_URL` and `DIESEL_INBOX_MYSQL_URL` (defaults as in
//! the test suite); each backend gets a fresh database, dropped at the end.

use std::time::Instant;

use diesel::prelude::*;
use diesel::r2d2::R2D2Connection;
use diesel_inbox::testing::TestDatabase;
use diesel_inbox::{with_inbox, Inbox, InboxConnection, Outcome};
use uuid::Uuid;

const ACCOUNTS: i32 = 1_000;
const BATCH_SIZES: [usize; 3] = [10, 100, 1000];

mod schema {
    //! The bench's own tables.
    #![allow(missing_docs)]

    diesel::table! {
        accounts (id) {
            id -> Integer,
            balance -> BigInt,
        }
    }

    diesel::table! {
        naive_inbox (consumer, event_id) {
            consumer -> Text,
            event_id -> Text,
        }
    }
}

use schema::{accounts, naive_inbox};

/// What the bench needs from each backend.
trait BenchConn: InboxConnection + R2D2Connection + Send + Sized + 'static {
    const NAME: &'static str;
    const SETUP: &'static str;
    /// Fills the inbox with `rows` rows of another consumer (`{rows}` is replaced).
    const PREFILL: &'static str;
    /// Statements, one call each, that let the server finish the maintenance the prefill set
    /// off (vacuum, checkpoint), so it does not run during the timed rounds.
    const SETTLE: &'static [&'static str];

    fn database() -> TestDatabase<Self>;
    fn credit(&mut self, account: i32) -> QueryResult<()>;
    fn naive(&mut self, event_id: &str, account: i32) -> QueryResult<()>;
}

macro_rules! bench_conn {
    ($conn:ty, $name:literal, $database:expr, $setup:literal, $prefill:literal, $settle:expr) => {
        impl BenchConn for $conn {
            const NAME: &'static str = $name;
            const SETUP: &'static str = $setup;
            const PREFILL: &'static str = $prefill;
            const SETTLE: &'static [&'static str] = $settle;

            fn database() -> TestDatabase<Self> {
                $database
            }

            fn credit(&mut self, account: i32) -> QueryResult<()> {
                diesel::update(accounts::table.find(account))
                    .set(accounts::balance.eq(accounts::balance + 1))
                    .execute(self)
                    .map(drop)
            }

            fn naive(&mut self, event_id: &str, account: i32) -> QueryResult<()> {
                self.transaction(|tx| {
                    let key = (
                        naive_inbox::consumer.eq("bench"),
                        naive_inbox::event_id.eq(event_id),
                    );
                    let seen: i64 = naive_inbox::table
                        .filter(key.0.and(key.1))
                        .count()
                        .get_result(tx)?;
                    if seen == 0 {
                        diesel::insert_into(naive_inbox::table)
                            .values(key)
                            .execute(tx)?;
                        tx.credit(account)?;
                    }
                    Ok(())
                })
            }
        }
    };
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

bench_conn!(
    diesel::PgConnection,
    "PostgreSQL",
    TestDatabase::postgres(&env_or("DIESEL_INBOX_POSTGRES_URL", "postgres://root@127.0.0.1:5432/test")),
    "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL);
     INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 1000) g;
     CREATE TABLE naive_inbox (consumer TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (consumer, event_id));",
    "INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at)
     SELECT 'prefill', md5(g::text), now(), now() FROM generate_series(1, {rows}) g;
     ANALYZE diesel_inbox_events;",
    &["VACUUM diesel_inbox_events", "CHECKPOINT"]
);

bench_conn!(
    diesel::MysqlConnection,
    "MariaDB",
    TestDatabase::mysql(&env_or("DIESEL_INBOX_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")),
    "SET SESSION max_recursive_iterations = 100000000;
     CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL) ENGINE = InnoDB;
     INSERT INTO accounts (id, balance) WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 1000) SELECT n, 0 FROM seq;
     CREATE TABLE naive_inbox (consumer VARBINARY(128) NOT NULL, event_id VARBINARY(255) NOT NULL, PRIMARY KEY (consumer, event_id)) ENGINE = InnoDB;",
    "INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at)
     WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows})
     SELECT 'prefill', MD5(n), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq;
     ANALYZE TABLE diesel_inbox_events;",
    &[]
);

bench_conn!(
    diesel::SqliteConnection,
    "SQLite (WAL)",
    TestDatabase::sqlite(),
    "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL);
     INSERT INTO accounts WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 1000) SELECT n, 0 FROM seq;
     CREATE TABLE naive_inbox (consumer TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (consumer, event_id)) WITHOUT ROWID;",
    "INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at)
     WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < {rows})
     SELECT 'prefill', lower(hex(randomblob(16))), strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now') FROM seq;
     ANALYZE;",
    &["PRAGMA wal_checkpoint(TRUNCATE)"]
);

struct Options {
    events: usize,
    rounds: usize,
    prefill: u64,
    backends: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        events: 2_000,
        rounds: 8,
        prefill: 1_000_000,
        backends: vec!["postgres".into(), "mysql".into(), "sqlite".into()],
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |name: &str| value.parse::<u64>().map_err(|e| format!("{name}: {e}"));
        match flag.as_str() {
            "--events" => options.events = usize::try_from(number("--events")?).unwrap_or(usize::MAX),
            "--rounds" => options.rounds = usize::try_from(number("--rounds")?.max(1)).unwrap_or(1),
            "--prefill" => options.prefill = number("--prefill")?,
            "--backends" => options.backends = value.split(',').map(str::to_owned).collect(),
            _ => return Err(format!(
                "unknown flag {flag}; flags: --events N --rounds N --prefill N --backends postgres,mysql,sqlite"
            )),
        }
    }
    Ok(options)
}

/// The scenarios, in the order they run within a round and are printed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Bare,
    /// The bare transaction again, beside the large-inbox runs.
    BareAfterPrefill,
    Cursor,
    Inbox {
        v7: bool,
    },
    Duplicates,
    Naive,
    Batch(usize),
    Large {
        v7: bool,
    },
}

impl Scenario {
    fn label(self) -> String {
        match self {
            Self::Bare => "bare".into(),
            Self::BareAfterPrefill => "bare, after the prefill".into(),
            Self::Cursor => "cursor".into(),
            Self::Inbox { v7: false } => "inbox, UUIDv4 ids".into(),
            Self::Inbox { v7: true } => "inbox, UUIDv7 ids".into(),
            Self::Duplicates => "duplicates".into(),
            Self::Naive => "naive".into(),
            Self::Batch(size) => format!("batch {size}"),
            Self::Large { v7: false } => "large inbox, UUIDv4 ids".into(),
            Self::Large { v7: true } => "large inbox, UUIDv7 ids".into(),
        }
    }
}

fn account(i: usize) -> i32 {
    i32::try_from(i % ACCOUNTS as usize).unwrap() + 1
}

fn ids(events: usize, v7: bool) -> Vec<String> {
    (0..events)
        .map(|_| if v7 { Uuid::now_v7() } else { Uuid::new_v4() }.to_string())
        .collect()
}

/// What one run leaves for the next: the ids the last inbox run processed, for the duplicates
/// to deliver again, and the cursor's last sequence, for the next cursor run to continue from.
#[derive(Default)]
struct Feed {
    processed: Vec<String>,
    sequence: u64,
}

/// Runs one scenario over `ids`; returns the seconds it took.
fn run<C: BenchConn>(conn: &mut C, scenario: Scenario, ids: &[String], feed: &mut Feed) -> f64 {
    let cursor = Inbox::default().cursor("bench").unwrap();
    let start = Instant::now();
    match scenario {
        Scenario::Bare | Scenario::BareAfterPrefill => {
            for i in 0..ids.len() {
                conn.transaction(|tx| tx.credit(account(i))).unwrap();
            }
        }
        Scenario::Cursor => {
            for i in 0..ids.len() {
                feed.sequence += 1;
                let outcome = cursor
                    .process(conn, feed.sequence, |tx| tx.credit(account(i)))
                    .unwrap();
                assert!(matches!(outcome, Outcome::Processed(())));
            }
        }
        Scenario::Inbox { .. } | Scenario::Large { .. } => {
            for (i, id) in ids.iter().enumerate() {
                let outcome = with_inbox(conn, id, |tx| tx.credit(account(i))).unwrap();
                assert!(outcome.is_processed());
            }
            feed.processed = ids.to_vec();
        }
        Scenario::Duplicates => {
            for (i, id) in feed.processed.iter().enumerate() {
                let outcome = with_inbox(conn, id, |tx| tx.credit(account(i))).unwrap();
                assert!(outcome.is_duplicate());
            }
        }
        Scenario::Naive => {
            for (i, id) in ids.iter().enumerate() {
                conn.naive(id, account(i)).unwrap();
            }
        }
        Scenario::Batch(size) => {
            for (b, batch) in ids.chunks(size).enumerate() {
                let results = Inbox::default()
                    .process_batch(conn, batch, |tx, _| tx.credit(account(b)))
                    .unwrap();
                assert!(results
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(Outcome::is_processed)));
            }
        }
    }
    start.elapsed().as_secs_f64()
}

/// Runs `scenarios` interleaved, round after round, so that drift in the machine (other load,
/// a growing WAL, checkpoints) touches them all alike. Returns each scenario's rate per round.
fn rounds<C: BenchConn>(
    conn: &mut C,
    scenarios: &[Scenario],
    options: &Options,
    feed: &mut Feed,
) -> Vec<Rates> {
    let per_round = (options.events / options.rounds).max(1);
    let mut rates: Vec<Rates> = scenarios.iter().map(|&s| (s, Vec::new())).collect();
    for _ in 0..options.rounds {
        for (scenario, per_round_rates) in &mut rates {
            // A batch scenario runs at least one full batch per round.
            let events = match *scenario {
                Scenario::Batch(size) => per_round.max(size),
                Scenario::Duplicates => feed.processed.len(),
                _ => per_round,
            };
            let v7 = matches!(
                scenario,
                Scenario::Inbox { v7: true } | Scenario::Large { v7: true }
            );
            let seconds = run(conn, *scenario, &ids(events, v7), feed);
            per_round_rates.push(rate(events, seconds));
        }
    }
    rates
}

#[allow(clippy::cast_precision_loss)] // event counts stay far below 2^52
fn rate(events: usize, seconds: f64) -> f64 {
    events as f64 / seconds
}

/// A scenario and its rate in each round.
type Rates = (Scenario, Vec<f64>);

/// One backend's rates, per scenario and round. The large-inbox phase has a bare run of its
/// own, under `BareAfterPrefill`.
struct Figures {
    name: &'static str,
    rates: Vec<Rates>,
}

impl Figures {
    fn rounds(&self, scenario: Scenario) -> &[f64] {
        self.rates
            .iter()
            .find(|(s, _)| *s == scenario)
            .map_or(&[], |(_, r)| r.as_slice())
    }

    /// The median over rounds: robust to the bursts a shared machine throws in.
    fn rate(&self, scenario: Scenario) -> f64 {
        median(self.rounds(scenario).to_vec())
    }

    /// The median over rounds of `over`'s rate divided by `under`'s in the same round.
    fn ratio(&self, over: Scenario, under: Scenario) -> f64 {
        let pairs = self.rounds(over).iter().zip(self.rounds(under));
        median(pairs.map(|(o, u)| o / u).collect())
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        f64::midpoint(values[mid - 1], values[mid])
    }
}

fn bench<C: BenchConn>(options: &Options) -> Figures {
    let db = C::database();
    let mut conn = db.connect();
    conn.batch_execute(C::SETUP).unwrap();
    // Warm caches, prepared statements and the servers' buffers before timing anything; the
    // cursor's first sequence creates its row, the timed ones continue from the last.
    let mut feed = Feed::default();
    let warm_up = Scenario::Inbox { v7: false };
    run(&mut conn, warm_up, &ids(200, false), &mut feed);
    run(&mut conn, Scenario::Cursor, &ids(200, false), &mut feed);

    // Duplicates redeliver what the scenario before them processed.
    let mut small = vec![
        Scenario::Bare,
        Scenario::Cursor,
        Scenario::Inbox { v7: true },
        Scenario::Inbox { v7: false },
        Scenario::Duplicates,
        Scenario::Naive,
    ];
    small.extend(BATCH_SIZES.map(Scenario::Batch));
    let mut rates = rounds(&mut conn, &small, options, &mut feed);

    let prefill = Instant::now();
    conn.batch_execute(&C::PREFILL.replace("{rows}", &options.prefill.to_string()))
        .unwrap();
    for statement in C::SETTLE {
        conn.batch_execute(statement).unwrap();
    }
    eprintln!(
        "{}: prefilled {} inbox rows in {:.1?}",
        C::NAME,
        options.prefill,
        prefill.elapsed()
    );
    run(&mut conn, warm_up, &ids(200, false), &mut feed);
    let large = [
        Scenario::BareAfterPrefill,
        Scenario::Large { v7: false },
        Scenario::Large { v7: true },
    ];
    rates.extend(rounds(&mut conn, &large, options, &mut feed));
    Figures {
        name: C::NAME,
        rates,
    }
}

fn main() -> Result<(), String> {
    let options = options()?;
    let mut columns = Vec::new();
    for backend in &options.backends {
        let started = Instant::now();
        let figures = match backend.as_str() {
            "postgres" => bench::<diesel::PgConnection>(&options),
            "mysql" => bench::<diesel::MysqlConnection>(&options),
            "sqlite" => bench::<diesel::SqliteConnection>(&options),
            other => {
                return Err(format!(
                    "unknown backend {other}; use postgres, mysql, sqlite"
                ))
            }
        };
        eprintln!("{}: done in {:.1?}", figures.name, started.elapsed());
        columns.push(figures);
    }

    println!(
        "\n{} events per scenario in {} interleaved rounds, one connection; large runs after {} rows were put in the inbox table\n",
        options.events, options.rounds, options.prefill
    );
    let names: Vec<String> = columns.iter().map(|c| c.name.to_owned()).collect();
    print_row("events/s (median round)", &names);
    print_rule(columns.len());
    for (scenario, _) in &columns[0].rates {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| format!("{:.0}", c.rate(*scenario)))
            .collect();
        print_row(&scenario.label(), &cells);
    }
    println!();
    print_row("ratio (median of rounds)", &names);
    print_rule(columns.len());
    let (v4, v7) = (Scenario::Inbox { v7: false }, Scenario::Inbox { v7: true });
    let ratios = [
        ("cursor / bare", Scenario::Cursor, Scenario::Bare),
        ("inbox / bare, UUIDv4", v4, Scenario::Bare),
        ("inbox / bare, UUIDv7", v7, Scenario::Bare),
        ("duplicates / bare", Scenario::Duplicates, Scenario::Bare),
        ("naive / bare", Scenario::Naive, Scenario::Bare),
        ("inbox / naive, UUIDv4", v4, Scenario::Naive),
        ("batch 10 / inbox, UUIDv4", Scenario::Batch(10), v4),
        ("batch 100 / inbox, UUIDv4", Scenario::Batch(100), v4),
        ("batch 1000 / inbox, UUIDv4", Scenario::Batch(1000), v4),
    ];
    for (name, over, under) in ratios {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| format!("{:.2}", c.ratio(over, under)))
            .collect();
        print_row(name, &cells);
    }
    // Each side over the bare rate of its own phase, so drift between the phases cancels.
    for v7 in [false, true] {
        let label = if v7 {
            "large / empty, UUIDv7"
        } else {
            "large / empty, UUIDv4"
        };
        let cells: Vec<_> = columns
            .iter()
            .map(|c| {
                let large = c.ratio(Scenario::Large { v7 }, Scenario::BareAfterPrefill);
                let empty = c.ratio(Scenario::Inbox { v7 }, Scenario::Bare);
                format!("{:.2}", large / empty)
            })
            .collect();
        print_row(label, &cells);
    }
    Ok(())
}

fn print_row(label: &str, cells: &[String]) {
    print!("| {label:<28} |");
    for cell in cells {
        print!(" {cell:>12} |");
    }
    println!();
}

fn print_rule(columns: usize) {
    print!("|{}|", "-".repeat(30));
    for _ in 0..columns {
        print!("{}:|", "-".repeat(13));
    }
    println!();
}
