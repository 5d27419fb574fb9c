//! What exactly-once processing costs, measured against the bare transaction, side by side in
//! one run on PostgreSQL, MariaDB and SQLite (a WAL file).
//!
//! ```sh
//! cargo run --release -p diesel-inbox-bench
//! cargo run --release -p diesel-inbox-bench -- \
//!     --events 5000 --concurrency-events 20000 --prefill 1000000 --backends postgres,sqlite
//! ```
//!
//! Flags: `--events N` per single-connection scenario (4,000), `--concurrency-events N` per
//! concurrent scenario (as `--events`), `--rounds N` (16), `--prefill N` inbox rows for the
//! large runs (1,000,000), `--backends` (postgres,mysql,sqlite), `--markdown FILE` to write the
//! run as a page too (`docs/performance.md`: a fixed text on what a delivery sends and what is
//! measured, then the machine, the command and the tables; its notes on the figures, under
//! "Reading the figures", are kept from the page it replaces). Each scenario's events are split
//! over the rounds.
//!
//! Every single-connection scenario delivers `--events` events, one at a time, each crediting
//! one of 1,000 accounts (`UPDATE accounts SET balance = balance + 1 WHERE id = ?`):
//!
//! - bare: the update in its own transaction, no inbox;
//! - cursor: the same through `Cursor::process`, one stream's consecutive sequences (the
//!   in-order path: one update of the cursor row beside the credit);
//! - chain cursor, blocks of N: the same through `Chain::process` (finality depth 64), in
//!   blocks of 1 and of 100 events, each block the child of the one before and its events'
//!   credits run by the handler's `apply`: per block one transaction with the events' inbox
//!   rows, the block's record and the head's advance. Its ratios are over bare, one event per
//!   transaction (what each event costs against committing it alone), and, for blocks of 100,
//!   over bare, 100 per transaction (what the chain adds to the same transactions);
//! - bare, 100 per transaction: the 100 credits of a block, one statement each as the chain's
//!   handler runs them, in one bare transaction;
//! - inbox: the same through `with_inbox`, every id new, random (`UUIDv4`) or time-ordered
//!   (`UUIDv7`);
//! - inbox, statement cache off: the inbox with Diesel's prepared statement cache disabled,
//!   as it must be behind a pooler in transaction mode: each statement prepared anew;
//! - duplicates: every delivery a duplicate of one processed before;
//! - naive: the hand-written check, `SELECT` the id then `INSERT` it, in the same transaction;
//! - minimal: the smallest correct hand-written inbox: in one transaction, an insert of the id
//!   that skips a duplicate (`ON CONFLICT DO NOTHING`; `INSERT IGNORE` on MariaDB), and the
//!   credit if it inserted a row; nothing else (no attempts, payloads, failures or retries);
//! - batch N: `process_batch` with N new ids per batch, each crediting the batch's account;
//! - bulk N: `process_bulk` with N new ids per batch, the effect crediting every new event's
//!   account by 1 in one `UPDATE .. WHERE id IN (..)` (the accounts of a batch are distinct);
//! - enqueue: the credit and an `Outbox::enqueue` of one event in its transaction, for one of
//!   the 1,000 accounts' aggregates in turn (with the order lock that keeps concurrent
//!   producers of one aggregate in enqueue order);
//! - enqueue, no order lock: the same without that lock (`Outbox::without_order_lock`, a
//!   testing knob), to show what the lock costs;
//! - large inbox: `with_inbox` after `--prefill` rows were put in the inbox table, with random
//!   (`UUIDv4`) and time-ordered (`UUIDv7`) ids;
//! - floor: bare, minimal and inbox, PostgreSQL and MariaDB only: the same transactions looped
//!   inside the server by a procedure (PL/pgSQL; a MariaDB stored procedure), one `CALL` per
//!   round, so no round trip and no client: the credit alone, the minimal inbox's insert and
//!   the credit, the inbox's own upsert and the credit, each committed. `inbox / bare` for the
//!   floor is the most the client can reach; the client's `inbox / bare` "of the floor's" is
//!   its ratio over the floor's, round by round: 1 when the client adds no more to an inbox
//!   delivery than to a bare transaction;
//! - async bare, async inbox: the credit on diesel-async's connection (`AsyncPgConnection`,
//!   `AsyncMysqlConnection`, `SyncConnectionWrapper<SqliteConnection>`), in its own
//!   transaction or through `asynch::with_inbox`, on a current-thread tokio runtime; the two
//!   interleaved round after round, in a phase of their own after the sync rounds.
//!
//! Between the single-connection rounds and the prefill comes the concurrency phase, so that
//! many connections meet the inbox table at the size the single one did: an r2d2 pool, and 1,
//! 4 and 16 threads, each on a pooled connection of its own, taking deliveries from a shared
//! counter. Delivery `i` credits the accounts in turn (`i mod 1000`), so threads rarely meet
//! on an account. Bare (the credit in a transaction) and inbox (`with_inbox`) alternate over
//! three mixes of `UUIDv4` ids:
//!
//! - new: every id new;
//! - half duplicates: every other delivery repeats an id delivered before it in the run;
//! - hot set: ids drawn in turn from 10, so nearly every delivery is a duplicate of a hot row.
//!
//! Bare has no idempotency and credits every delivery, duplicates too, so its three mixes do
//! the same work and contend on nothing; the inbox's duplicates contend on their inbox rows,
//! which is the point of the hot set. Each run reports events/s, the p50 and p99 of every
//! delivery's latency over all threads, and the contention retries the inbox made (counted off
//! its debug event). An error is reported, not raised: under contention it is a finding. On
//! SQLite the pool's connections are set up with `SqliteSetup` (WAL, a busy timeout), and the
//! one writer at a time makes more connections wait rather than help.
//!
//! The hand-written peers (bare, naive, minimal) open and commit their transactions as a user
//! would with Diesel's `transaction`, except on MariaDB: there that sends `BEGIN` and `COMMIT`
//! as text, three round trips each, while the inbox prepares them, one each; the peers prepare
//! them too, so that the ratios measure the inbox and not the transport.
//!
//! After the sync concurrency phase, the async one: 16 deliveries at once as 16 futures on one
//! current-thread runtime, each on a connection of diesel-async's deadpool pool, bare and
//! inbox, every id new; against the sync phase's 16 threads on an r2d2 pool.
//!
//! Rates are the interquartile mean over rounds (the mean of the middle half: as robust to a
//! burst of other load as the median, and steadier between runs), and so is each ratio, of
//! the per-round ratios; latencies are medians over rounds. Every other round runs the scenarios in reverse order, so that none always follows
//! the same one. Servers come from `DIESEL_INBOX_POSTGRES_URL` and `DIESEL_INBOX_MYSQL_URL`
//! (defaults as in the test suite); each backend gets a fresh database, dropped at the end.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use diesel::connection::CacheSize;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel_inbox::chain::{Block, BlockId, ChainHandler};
use diesel_inbox_test::TestDatabase;

mod asynch;
mod markdown;
use diesel_inbox::{
    envelope::Envelope, outbox::Outbox, with_inbox, Delivery, EventId, Inbox, InboxConnection,
    Outcome,
};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;
use uuid::Uuid;

const ACCOUNTS: i32 = 1_000;
const BATCH_SIZES: [usize; 3] = [10, 100, 1000];
/// The chain scenarios' events per block.
const BLOCK_SIZES: [usize; 2] = [1, 100];
/// The chain cursor's finality depth, Ethereum's 64 blocks.
const FINALITY_DEPTH: u64 = 64;
/// The connection counts of the concurrency phase, one worker thread each.
const CONNS: [usize; 3] = [1, 4, 16];
/// How many ids the hot-set mix draws from.
const HOT_IDS: usize = 10;

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
    /// The backend's diesel-async connection.
    type Async: asynch::AsyncBench;

    const NAME: &'static str;
    const SETUP: &'static str;
    /// Fills the inbox with `rows` rows of another consumer (`{rows}` is replaced).
    const PREFILL: &'static str;
    /// Statements, one call each, that let the server finish the maintenance the prefill set
    /// off (vacuum, checkpoint), so it does not run during the timed rounds.
    const SETTLE: &'static [&'static str];

    /// Creates the procedure `bench_floor(events, kind)`: `events` transactions looped inside
    /// the server, no round trips, each the credit alone (kind 0), the minimal inbox's insert
    /// and the credit (1), or the inbox's own insert and the credit (2). `None` where the
    /// database runs in process (SQLite): there is no round trip to take away.
    const FLOOR: Option<&'static str>;

    fn database() -> TestDatabase<Self>;
    fn credit(&mut self, account: i32) -> QueryResult<()>;
    /// Credits each of `accounts` by 1 in one statement; they are distinct.
    fn credit_all(&mut self, accounts: &[i32]) -> QueryResult<()>;
    fn naive(&mut self, event_id: &str, account: i32) -> QueryResult<()>;
    /// The smallest correct hand-written inbox; returns whether it credited.
    fn minimal(&mut self, event_id: &str, account: i32) -> QueryResult<bool>;

    /// Whether the hand-written scenarios send `BEGIN` and `COMMIT` as prepared statements.
    /// MySQL/MariaDB: Diesel's `transaction` sends them as text, which costs three round trips
    /// each there (it switches multi-statement mode on and off around them), and the inbox
    /// sends them prepared, one each; the peers do the same, so that the ratios measure the
    /// inbox, not the transport. Elsewhere text and prepared cost the same.
    const PREPARED_BEGIN_COMMIT: bool;

    /// Runs `events` floor transactions of `kind` inside the server, in one `CALL`.
    fn floor(&mut self, events: usize, kind: Floor) -> QueryResult<()> {
        self.batch_execute(&format!("CALL bench_floor({events}, {})", kind as i32))
    }

    /// Runs `body` in a transaction, as the hand-written scenarios do.
    fn in_transaction<T>(
        &mut self,
        body: impl FnOnce(&mut Self) -> QueryResult<T>,
    ) -> QueryResult<T> {
        if !Self::PREPARED_BEGIN_COMMIT {
            return self.transaction(body);
        }
        Fixed("BEGIN").execute(self)?;
        match body(self) {
            Ok(value) => Fixed("COMMIT").execute(self).map(|_| value),
            Err(error) => {
                Fixed("ROLLBACK").execute(self)?;
                Err(error)
            }
        }
    }
}

/// A statement of fixed text that Diesel prepares once per connection and caches by its text.
struct Fixed(&'static str);

impl<DB: diesel::backend::Backend> QueryFragment<DB> for Fixed {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(self.0);
        Ok(())
    }
}

/// Cached by the text: every `Fixed` has the same type.
impl QueryId for Fixed {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Conn> RunQueryDsl<Conn> for Fixed {}

/// `$key => $insert`: the minimal inbox's insert of `$key` (the row's columns) that skips a
/// duplicate and reports 1 affected row only for a new one.
macro_rules! bench_conn {
    (
        $conn:ty,
        $name:literal,
        $database:expr,
        $setup:literal,
        $prefill:literal,
        $settle:expr,
        floor = $floor:expr,
        $key:ident => $insert:expr,
        prepared_begin_commit = $prepared:literal,
        async = $async:ty
    ) => {
        impl BenchConn for $conn {
            type Async = $async;

            const NAME: &'static str = $name;
            const PREPARED_BEGIN_COMMIT: bool = $prepared;
            const SETUP: &'static str = $setup;
            const PREFILL: &'static str = $prefill;
            const SETTLE: &'static [&'static str] = $settle;
            const FLOOR: Option<&'static str> = $floor;

            fn database() -> TestDatabase<Self> {
                $database
            }

            fn credit(&mut self, account: i32) -> QueryResult<()> {
                diesel::update(accounts::table.find(account))
                    .set(accounts::balance.eq(accounts::balance + 1))
                    .execute(self)
                    .map(drop)
            }

            fn credit_all(&mut self, accounts: &[i32]) -> QueryResult<()> {
                diesel::update(accounts::table.filter(accounts::id.eq_any(accounts)))
                    .set(accounts::balance.eq(accounts::balance + 1))
                    .execute(self)
                    .map(drop)
            }

            fn naive(&mut self, event_id: &str, account: i32) -> QueryResult<()> {
                self.in_transaction(|tx| {
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

            fn minimal(&mut self, event_id: &str, account: i32) -> QueryResult<bool> {
                self.in_transaction(|tx| {
                    let $key = (
                        naive_inbox::consumer.eq("bench"),
                        naive_inbox::event_id.eq(event_id),
                    );
                    let new = $insert.execute(tx)? == 1;
                    if new {
                        tx.credit(account)?;
                    }
                    Ok(new)
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
    &["VACUUM diesel_inbox_events", "CHECKPOINT"],
    // The inbox's insert as `with_inbox` sends it for a new event (a plain insert, which the
    // unique key refuses for a duplicate), with a random (v4) id.
    floor = Some("CREATE PROCEDURE bench_floor(events INTEGER, kind INTEGER) LANGUAGE plpgsql AS $$
     BEGIN
       FOR i IN 0 .. events - 1 LOOP
         IF kind = 1 THEN
           INSERT INTO naive_inbox (consumer, event_id) VALUES ('bench', gen_random_uuid()::text)
             ON CONFLICT DO NOTHING;
         ELSIF kind = 2 THEN
           INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash)
             VALUES ('floor', gen_random_uuid()::text, now(), now(), 1, NULL);
         END IF;
         UPDATE accounts SET balance = balance + 1 WHERE id = i % 1000 + 1;
         COMMIT;
       END LOOP;
     END $$"),
    key => diesel::insert_into(naive_inbox::table)
        .values(key)
        .on_conflict_do_nothing(),
    prepared_begin_commit = false,
    async = diesel_async::AsyncPgConnection
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
    &[],
    // The inbox's insert as `with_inbox` sends it, with a random id.
    floor = Some("CREATE PROCEDURE bench_floor(events INTEGER, kind INTEGER)
     BEGIN
       DECLARE i INTEGER DEFAULT 0;
       WHILE i < events DO
         START TRANSACTION;
         IF kind = 1 THEN
           INSERT IGNORE INTO naive_inbox (consumer, event_id) VALUES ('bench', MD5(RAND()));
         ELSEIF kind = 2 THEN
           INSERT INTO diesel_inbox_events (consumer, event_id, processed_at, last_seen_at, deliveries, payload_hash)
             VALUES ('floor', MD5(RAND()), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1, NULL)
             ON DUPLICATE KEY UPDATE deliveries = deliveries + 1, last_seen_at = UTC_TIMESTAMP(6);
         END IF;
         UPDATE accounts SET balance = balance + 1 WHERE id = i MOD 1000 + 1;
         COMMIT;
         SET i = i + 1;
       END WHILE;
     END"),
    // `INSERT IGNORE`, what a MySQL user writes to skip a duplicate key. Not Diesel's
    // `on_conflict_do_nothing()`: on MySQL that is `ON DUPLICATE KEY UPDATE pk = pk`, and as
    // Diesel's MySQL connections count found rows (CLIENT_FOUND_ROWS), a duplicate reports 1
    // affected row too, so the check below it would credit every duplicate again.
    key => diesel::insert_or_ignore_into(naive_inbox::table).values(key),
    prepared_begin_commit = true,
    async = diesel_async::AsyncMysqlConnection
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
    &["PRAGMA wal_checkpoint(TRUNCATE)"],
    floor = None,
    key => diesel::insert_into(naive_inbox::table)
        .values(key)
        .on_conflict_do_nothing(),
    prepared_begin_commit = false,
    async = diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>
);

struct Options {
    events: usize,
    /// Deliveries per concurrent scenario, over all rounds; `--events` unless given.
    concurrency_events: Option<usize>,
    rounds: usize,
    prefill: u64,
    backends: Vec<String>,
    /// Where `--markdown` writes the report as a page (`docs/performance.md`), if anywhere.
    markdown: Option<std::path::PathBuf>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        events: 4_000,
        concurrency_events: None,
        rounds: 16,
        prefill: 1_000_000,
        backends: vec!["postgres".into(), "mysql".into(), "sqlite".into()],
        markdown: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = |name: &str| value.parse::<u64>().map_err(|e| format!("{name}: {e}"));
        match flag.as_str() {
            "--events" => options.events = usize::try_from(number("--events")?).unwrap_or(usize::MAX),
            "--concurrency-events" => {
                options.concurrency_events =
                    Some(usize::try_from(number("--concurrency-events")?).unwrap_or(usize::MAX));
            }
            "--rounds" => options.rounds = usize::try_from(number("--rounds")?.max(1)).unwrap_or(1),
            "--prefill" => options.prefill = number("--prefill")?,
            "--backends" => options.backends = value.split(',').map(str::to_owned).collect(),
            "--markdown" => options.markdown = Some(value.into()),
            _ => return Err(format!(
                "unknown flag {flag}; flags: --events N --concurrency-events N --rounds N --prefill N --backends postgres,mysql,sqlite --markdown FILE"
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
    /// `Chain::process` of blocks of this many events.
    Chain(usize),
    /// A block's credits in one bare transaction, a chain block's peer.
    BareBlock(usize),
    Inbox {
        v7: bool,
    },
    /// The inbox scenario, `UUIDv4` ids, with Diesel's prepared statement cache off, as behind
    /// a pooler in transaction mode (`CacheSize::Disabled`).
    InboxUncached,
    /// Redeliveries of the ids the inbox scenario before processed, by an inbox that
    /// expects duplicates or not (`Inbox::expect_duplicates`).
    Duplicates {
        expected: bool,
    },
    /// The credit and an enqueue, with or without the aggregate's order lock.
    Enqueue {
        order_lock: bool,
    },
    Naive,
    Minimal,
    Batch(usize),
    Bulk(usize),
    Large {
        v7: bool,
    },
    /// `conns` threads, each on its own pooled connection, delivering `mix`: the bare
    /// transaction, or `with_inbox`.
    Concurrent {
        inbox: bool,
        conns: usize,
        mix: Mix,
    },
    /// The credit on diesel-async's connection: in its own transaction, or through
    /// `asynch::with_inbox`; `tasks` at once (1: one connection; more: a pool).
    Async {
        inbox: bool,
        tasks: usize,
    },
    /// The same transactions looped inside the server (`BenchConn::FLOOR`): what they cost
    /// with no round trip and no client.
    Floor(Floor),
}

/// What a floor transaction holds besides the credit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Floor {
    Bare = 0,
    Minimal = 1,
    Inbox = 2,
}

/// The ids a concurrent scenario delivers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    /// Every id new.
    New,
    /// Every other delivery repeats an id delivered before it in the run.
    HalfDuplicates,
    /// Ids drawn from `HOT_IDS` ids, in turn: nearly every delivery a duplicate of a hot row.
    HotSet,
}

impl Mix {
    const ALL: [Self; 3] = [Self::New, Self::HalfDuplicates, Self::HotSet];

    fn label(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::HalfDuplicates => "half duplicates",
            Self::HotSet => "hot set",
        }
    }

    /// `events` fresh `UUIDv4` ids laid out as the mix has them, and how many are distinct.
    fn ids(self, events: usize) -> (Vec<String>, usize) {
        match self {
            Self::New => (ids(events, false), events),
            Self::HalfDuplicates => {
                // Delivery 2k is the k-th new id; 2k + 1 repeats the (k / 2)-th, which delivery
                // k or k - 1 brought: close behind at the start, ever further back later on.
                let fresh = ids(events.div_ceil(2), false);
                let ids = (0..events)
                    .map(|i| fresh[if i % 2 == 0 { i / 2 } else { i / 4 }].clone())
                    .collect();
                (ids, fresh.len())
            }
            Self::HotSet => {
                let hot = ids(HOT_IDS.min(events), false);
                let ids = (0..events).map(|i| hot[i % hot.len()].clone()).collect();
                (ids, hot.len())
            }
        }
    }
}

/// "1 conn", "16 conns".
fn conns_label(conns: usize) -> String {
    format!("{conns} conn{}", if conns == 1 { "" } else { "s" })
}

impl Scenario {
    fn label(self) -> String {
        match self {
            Self::Bare => "bare".into(),
            Self::BareAfterPrefill => "bare, after the prefill".into(),
            Self::Cursor => "cursor".into(),
            Self::Chain(size) => format!("chain cursor, blocks of {size}"),
            Self::BareBlock(size) => format!("bare, {size} per transaction"),
            Self::Inbox { v7: false } => "inbox, UUIDv4 ids".into(),
            Self::Inbox { v7: true } => "inbox, UUIDv7 ids".into(),
            Self::InboxUncached => "inbox, statement cache off".into(),
            Self::Duplicates { expected: false } => "duplicates".into(),
            Self::Duplicates { expected: true } => "duplicates, expected".into(),
            Self::Enqueue { order_lock: true } => "enqueue".into(),
            Self::Enqueue { order_lock: false } => "enqueue, no order lock".into(),
            Self::Naive => "naive".into(),
            Self::Minimal => "minimal".into(),
            Self::Batch(size) => format!("batch {size}"),
            Self::Bulk(size) => format!("bulk {size}"),
            Self::Large { v7: false } => "large inbox, UUIDv4 ids".into(),
            Self::Large { v7: true } => "large inbox, UUIDv7 ids".into(),
            Self::Concurrent { inbox, conns, mix } => format!(
                "{}, {}, {}",
                if inbox { "inbox" } else { "bare" },
                conns_label(conns),
                mix.label()
            ),
            Self::Floor(Floor::Bare) => "floor: bare".into(),
            Self::Floor(Floor::Minimal) => "floor: minimal".into(),
            Self::Floor(Floor::Inbox) => "floor: inbox, random ids".into(),
            Self::Async { inbox, tasks } => format!(
                "async {}{}",
                if inbox { "inbox" } else { "bare" },
                if tasks == 1 {
                    String::new()
                } else {
                    format!(", {tasks} tasks, new")
                }
            ),
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
/// to deliver again, the cursor's last sequence, for the next cursor run to continue from, and
/// the chain's last height, for the next block to be its child (see `block_hash`).
#[derive(Default)]
struct Feed {
    processed: Vec<String>,
    sequence: u64,
    height: u64,
}

/// The hash of the bench chain's block at `height`, as long as Ethereum's.
fn block_hash(height: u64) -> String {
    format!("0x{height:064x}")
}

/// For a chain scenario, `ids` in its blocks on the bench chain, event `i` crediting
/// `account(i)`: each block the child of the one before, from the chain's last height in
/// `feed`. None for another scenario.
fn blocks(scenario: Scenario, ids: &[String], feed: &mut Feed) -> Vec<Block<i32>> {
    let Scenario::Chain(size) = scenario else {
        return Vec::new();
    };
    let events: Vec<(EventId, i32)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (EventId::new(id.as_str()).unwrap(), account(i)))
        .collect();
    events
        .chunks(size)
        .map(|events| {
            feed.height += 1;
            let (hash, parent) = (block_hash(feed.height), block_hash(feed.height - 1));
            Block::new(feed.height, &hash, &parent)
                .unwrap()
                .events_from(events.iter().cloned())
        })
        .collect()
}

/// Delivers `blocks` to the bench chain, every event taking effect.
fn process_blocks<C: BenchConn>(conn: &mut C, blocks: &[Block<i32>]) {
    let chain = Inbox::default()
        .chain("bench:chain", FINALITY_DEPTH)
        .unwrap();
    for block in blocks {
        let outcome = chain.process(conn, block, &mut Credit).unwrap();
        assert_eq!(outcome.applied(), block.events().len());
    }
}

/// Credits `account(i)` for each of `events` events in bare transactions of `size` credits,
/// a statement each, as the chain's handler runs a block's.
fn credit_in_blocks<C: BenchConn>(conn: &mut C, events: usize, size: usize) {
    for start in (0..events).step_by(size) {
        let block = start..events.min(start + size);
        conn.in_transaction(|tx| block.map(account).try_for_each(|a| tx.credit(a)))
            .unwrap();
    }
}

/// The block sizes with a bare peer of their own: a block of 1's is the bare scenario.
fn bare_peered_blocks() -> impl Iterator<Item = usize> {
    BLOCK_SIZES.into_iter().filter(|&size| size > 1)
}

/// The chain scenarios' handler: an event is the account it credits, as the bare transaction
/// does. The bench chain never forks, so nothing is reverted.
struct Credit;

impl<C: BenchConn> ChainHandler<C> for Credit {
    type Event = i32;
    type Error = diesel::result::Error;

    fn apply(&mut self, tx: &mut C, _: &BlockId, _: &EventId, account: &i32) -> QueryResult<()> {
        tx.credit(*account)
    }

    fn revert(&mut self, _: &mut C, _: &BlockId, _: &EventId) -> QueryResult<()> {
        unreachable!("the bench chain never forks")
    }
}

/// Runs one scenario over `ids`; returns the seconds it took.
/// Delivers `ids`, every one new, through `with_inbox`, crediting `account(i)` for the `i`-th.
fn deliver_new<C: BenchConn>(conn: &mut C, ids: &[String]) {
    for (i, id) in ids.iter().enumerate() {
        let outcome = with_inbox(conn, id, |tx| tx.credit(account(i))).unwrap();
        assert!(outcome.is_processed());
    }
}

/// [`deliver_new`] with Diesel's prepared statement cache off, as behind a pooler in
/// transaction mode; on again afterwards.
fn deliver_new_uncached<C: BenchConn>(conn: &mut C, ids: &[String]) {
    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
    deliver_new(conn, ids);
    conn.set_prepared_statement_cache_size(CacheSize::Unbounded);
}

fn run<C: BenchConn>(conn: &mut C, scenario: Scenario, ids: &[String], feed: &mut Feed) -> f64 {
    let cursor = Inbox::default().cursor("bench").unwrap();
    // The bulk effect's lookup of each new delivery's account, and the chain's blocks, made
    // before the clock starts.
    let account_of: HashMap<&str, i32> = match scenario {
        Scenario::Bulk(_) => ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), account(i)))
            .collect(),
        _ => HashMap::new(),
    };
    let blocks = blocks(scenario, ids, feed);
    let start = Instant::now();
    match scenario {
        Scenario::Bare | Scenario::BareAfterPrefill => {
            for i in 0..ids.len() {
                conn.in_transaction(|tx| tx.credit(account(i))).unwrap();
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
        Scenario::Chain(_) => process_blocks(conn, &blocks),
        Scenario::BareBlock(size) => credit_in_blocks(conn, ids.len(), size),
        Scenario::Inbox { .. } | Scenario::Large { .. } => {
            deliver_new(conn, ids);
            feed.processed = ids.to_vec();
        }
        Scenario::InboxUncached => deliver_new_uncached(conn, ids),
        Scenario::Duplicates { expected } => {
            let inbox = Inbox::default().expect_duplicates(expected);
            for (i, id) in feed.processed.iter().enumerate() {
                let outcome = inbox.process(conn, id, |tx| tx.credit(account(i))).unwrap();
                assert!(outcome.is_duplicate());
            }
        }
        Scenario::Enqueue { order_lock } => {
            let outbox = Outbox::new("bench").unwrap();
            let outbox = if order_lock {
                outbox
            } else {
                outbox.without_order_lock()
            };
            for (i, id) in ids.iter().enumerate() {
                let event = Envelope::new("account.credited", "account", &account(i).to_string())
                    .with_id(id.as_str())
                    .unwrap();
                conn.in_transaction(|tx| {
                    tx.credit(account(i))?;
                    Ok(outbox.enqueue(tx, "accounts", &event)?)
                })
                .unwrap();
            }
        }
        Scenario::Naive => {
            for (i, id) in ids.iter().enumerate() {
                conn.naive(id, account(i)).unwrap();
            }
        }
        Scenario::Minimal => {
            for (i, id) in ids.iter().enumerate() {
                assert!(conn.minimal(id, account(i)).unwrap());
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
        Scenario::Bulk(size) => {
            // A batch's consecutive indexes map to distinct accounts (size <= ACCOUNTS), so
            // the one update credits each new event's account by 1, as the inbox's does.
            for batch in ids.chunks(size) {
                let results = Inbox::default()
                    .process_bulk(conn, batch, |tx, new: &[&Delivery]| {
                        let accounts: Vec<i32> =
                            new.iter().map(|d| account_of[d.id().as_str()]).collect();
                        tx.credit_all(&accounts)
                    })
                    .unwrap();
                assert!(results
                    .iter()
                    .all(|r| r.as_ref().is_ok_and(Outcome::is_processed)));
            }
        }
        Scenario::Floor(kind) => conn.floor(ids.len(), kind).unwrap(),
        Scenario::Concurrent { .. } | Scenario::Async { .. } => {
            unreachable!("concurrent and async scenarios run on their own")
        }
    }
    start.elapsed().as_secs_f64()
}

/// Runs `scenarios` interleaved, round after round, so that drift in the machine (other load,
/// a growing WAL, checkpoints) touches them all alike, every other round in reverse order, so
/// that no scenario always follows the same one. Returns each scenario's rate per round.
fn rounds<C: BenchConn>(
    conn: &mut C,
    scenarios: &[Scenario],
    options: &Options,
    feed: &mut Feed,
) -> Vec<Rates> {
    let per_round = (options.events / options.rounds).max(1);
    let mut rates: Vec<Rates> = scenarios.iter().map(|&s| (s, Vec::new())).collect();
    for round in 0..options.rounds {
        let order: Box<dyn Iterator<Item = &mut Rates>> = if round % 2 == 0 {
            Box::new(rates.iter_mut())
        } else {
            Box::new(rates.iter_mut().rev())
        };
        for (scenario, per_round_rates) in order {
            // A batch or block scenario runs at least one full batch or block per round.
            let events = match *scenario {
                Scenario::Batch(size)
                | Scenario::Bulk(size)
                | Scenario::Chain(size)
                | Scenario::BareBlock(size) => per_round.max(size),
                Scenario::Duplicates { .. } => feed.processed.len(),
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

/// Contention retries the inbox has made in this process, counted off its debug event.
static RETRIES: AtomicU64 = AtomicU64::new(0);

/// Counts the events it is shown: the inbox's "contention; retrying" (see `main`).
struct CountRetries;

impl<S: tracing::Subscriber> Layer<S> for CountRetries {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        RETRIES.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one concurrent run measured, of the deliveries that succeeded.
struct Measured {
    rate: f64,
    /// Per-delivery latency over all threads, p50 and p99, in milliseconds.
    latency: [f64; 2],
    retries: u64,
    errors: Vec<String>,
}

/// One worker thread's share of a concurrent run.
struct Worker {
    started: Instant,
    finished: Instant,
    /// Each successful delivery's duration, in milliseconds.
    took: Vec<f64>,
    processed: usize,
    errors: Vec<String>,
}

/// Delivers `ids` from `conns` threads, each on a pooled connection of its own and taking the
/// next delivery from a shared counter (a queue with `conns` consumers): the bare transaction,
/// or `with_inbox`. Delivery `i` credits `account(i)`, so threads rarely meet on an account.
/// `distinct` is how many different ids there are: the inbox processes each once. An error
/// is counted, not raised: under contention it is a finding.
fn run_concurrently<C: BenchConn>(
    pool: &Pool<ConnectionManager<C>>,
    inbox: bool,
    conns: usize,
    ids: &[String],
    distinct: usize,
) -> Measured {
    let next = AtomicUsize::new(0);
    let ready = Barrier::new(conns);
    let retries = RETRIES.load(Ordering::Relaxed);
    let workers: Vec<Worker> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..conns)
            .map(|_| {
                scope.spawn(|| {
                    let mut pooled = pool.get().unwrap();
                    let conn: &mut C = &mut pooled;
                    let (mut took, mut processed, mut errors) = (Vec::new(), 0, Vec::new());
                    ready.wait();
                    let started = Instant::now();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(id) = ids.get(i) else { break };
                        let delivered = Instant::now();
                        let result = if inbox {
                            with_inbox(&mut *conn, id, |tx| tx.credit(account(i)))
                                .map(|outcome| outcome.is_processed())
                        } else {
                            conn.in_transaction(|tx| tx.credit(account(i)))
                                .map(|()| true)
                        };
                        match result {
                            Ok(new) => {
                                took.push(delivered.elapsed().as_secs_f64() * 1e3);
                                processed += usize::from(new);
                            }
                            Err(error) => errors.push(error.to_string()),
                        }
                    }
                    Worker {
                        started,
                        finished: Instant::now(),
                        took,
                        processed,
                        errors,
                    }
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let started = workers.iter().map(|w| w.started).min().unwrap();
    let finished = workers.iter().map(|w| w.finished).max().unwrap();
    let processed: usize = workers.iter().map(|w| w.processed).sum();
    let errors: Vec<String> = workers.iter().flat_map(|w| w.errors.clone()).collect();
    // The bare transaction has no idempotency: it credits every delivery, duplicates too.
    let expected = if inbox { distinct } else { ids.len() };
    assert!(
        processed == expected || !errors.is_empty() && processed < expected,
        "{} of {expected} ids processed, {} errors",
        processed,
        errors.len()
    );
    let mut took: Vec<f64> = workers
        .iter()
        .flat_map(|w| w.took.iter().copied())
        .collect();
    took.sort_by(f64::total_cmp);
    Measured {
        rate: rate(took.len(), (finished - started).as_secs_f64()),
        latency: [percentile(&took, 50), percentile(&took, 99)],
        retries: RETRIES.load(Ordering::Relaxed) - retries,
        errors,
    }
}

/// The nearest-rank `percent`-th percentile of `sorted`.
fn percentile(sorted: &[f64], percent: usize) -> f64 {
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or(f64::NAN)
}

/// The concurrency phase: each connection count and mix, bare then inbox, interleaved round
/// after round as the single-connection scenarios are.
fn concurrency<C: BenchConn>(db: &TestDatabase<C>, options: &Options) -> Vec<Concurrency> {
    let most = *CONNS.iter().max().unwrap();
    let pool = db.pool(u32::try_from(most).unwrap());
    // Warm every pooled connection's prepared statements.
    for inbox in [false, true] {
        let (ids, distinct) = Mix::New.ids(most * 5);
        run_concurrently(&pool, inbox, most, &ids, distinct);
    }
    let mut runs: Vec<Concurrency> = CONNS
        .iter()
        .flat_map(|&conns| Mix::ALL.map(|mix| (conns, mix)))
        .flat_map(|(conns, mix)| {
            [false, true].map(|inbox| Scenario::Concurrent { inbox, conns, mix })
        })
        .map(|scenario| Concurrency {
            scenario,
            rates: Vec::new(),
            latencies: Vec::new(),
            retries: 0,
            errors: Vec::new(),
        })
        .collect();
    let events = options.concurrency_events.unwrap_or(options.events);
    let per_round = (events / options.rounds).max(1);
    for _ in 0..options.rounds {
        for run in &mut runs {
            let Scenario::Concurrent { inbox, conns, mix } = run.scenario else {
                unreachable!()
            };
            let (ids, distinct) = mix.ids(per_round.max(conns));
            let measured = run_concurrently(&pool, inbox, conns, &ids, distinct);
            if let Some(error) = measured.errors.first() {
                eprintln!(
                    "{}: {}: {} errors, the first: {error}",
                    C::NAME,
                    run.scenario.label(),
                    measured.errors.len()
                );
            }
            run.rates.push(measured.rate);
            run.latencies.push(measured.latency);
            run.retries += measured.retries;
            run.errors.extend(measured.errors);
        }
    }
    runs
}

/// A scenario and its rate in each round.
type Rates = (Scenario, Vec<f64>);

/// A concurrent scenario's figures: rate and latencies per round, retries and errors over all.
struct Concurrency {
    scenario: Scenario,
    rates: Vec<f64>,
    /// p50 and p99 per round, in milliseconds.
    latencies: Vec<[f64; 2]>,
    retries: u64,
    errors: Vec<String>,
}

/// One backend's rates, per scenario and round. The large-inbox phase has a bare run of its
/// own, under `BareAfterPrefill`; the concurrent scenarios have latencies besides.
struct Figures {
    name: &'static str,
    rates: Vec<Rates>,
    concurrency: Vec<Concurrency>,
}

impl Figures {
    fn rounds(&self, scenario: Scenario) -> &[f64] {
        self.rates
            .iter()
            .find(|(s, _)| *s == scenario)
            .map(|(_, r)| r.as_slice())
            .or_else(|| {
                self.concurrency
                    .iter()
                    .find(|c| c.scenario == scenario)
                    .map(|c| c.rates.as_slice())
            })
            .unwrap_or(&[])
    }

    /// The interquartile mean over rounds: robust to the bursts a shared machine throws in.
    fn rate(&self, scenario: Scenario) -> f64 {
        middle_mean(self.rounds(scenario).to_vec())
    }

    /// The interquartile mean over rounds of `over`'s rate divided by `under`'s in the same
    /// round.
    fn ratio(&self, over: Scenario, under: Scenario) -> f64 {
        let pairs = self.rounds(over).iter().zip(self.rounds(under));
        middle_mean(pairs.map(|(o, u)| o / u).collect())
    }

    /// The interquartile mean over rounds of `over / under` as a fraction of the same ratio of
    /// their floors, in the same round: 1 when the client adds to the inbox no more than to
    /// bare.
    fn of_floor(&self, [over, under]: [Scenario; 2], [floor_over, floor_under]: [Floor; 2]) -> f64 {
        let client = self.rounds(over).iter().zip(self.rounds(under));
        let floor = self
            .rounds(Scenario::Floor(floor_over))
            .iter()
            .zip(self.rounds(Scenario::Floor(floor_under)));
        middle_mean(
            client
                .zip(floor)
                .map(|((o, u), (fo, fu))| (o / u) / (fo / fu))
                .collect(),
        )
    }

    fn concurrent(&self, scenario: Scenario) -> &Concurrency {
        self.concurrency
            .iter()
            .find(|c| c.scenario == scenario)
            .unwrap()
    }

    /// The medians over rounds of a concurrent scenario's p50 and p99, in milliseconds.
    fn latency(&self, scenario: Scenario) -> [f64; 2] {
        let latencies = &self.concurrent(scenario).latencies;
        [0, 1].map(|k| median(latencies.iter().map(|l| l[k]).collect()))
    }
}

/// The interquartile mean: the mean of the middle half of `values`, a quarter dropped at each
/// end (none of fewer than four).
#[allow(clippy::cast_precision_loss)] // a handful of rounds
fn middle_mean(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let quarter = values.len() / 4;
    let middle = &values[quarter..values.len() - quarter];
    middle.iter().sum::<f64>() / middle.len() as f64
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
    let floors = if let Some(procedure) = C::FLOOR {
        diesel::sql_query(procedure).execute(&mut conn).unwrap();
        [Floor::Bare, Floor::Minimal, Floor::Inbox]
            .map(Scenario::Floor)
            .to_vec()
    } else {
        Vec::new()
    };
    // The minimal inbox is correct: a duplicate does not credit again.
    assert!(conn.minimal("minimal-check", 1).unwrap());
    assert!(!conn.minimal("minimal-check", 1).unwrap());
    // Warm caches, prepared statements and the servers' buffers before timing anything; the
    // cursor's first sequence and the chain's first block create their rows, the timed ones
    // continue from the last.
    let mut feed = Feed::default();
    let warm_up = Scenario::Inbox { v7: false };
    run(&mut conn, warm_up, &ids(200, false), &mut feed);
    run(&mut conn, Scenario::Cursor, &ids(200, false), &mut feed);
    for chain in BLOCK_SIZES.map(Scenario::Chain) {
        run(&mut conn, chain, &ids(200, false), &mut feed);
    }

    // Duplicates redeliver what the scenario before them processed.
    let mut small = vec![Scenario::Bare, Scenario::Cursor];
    small.extend(BLOCK_SIZES.map(Scenario::Chain));
    small.extend(bare_peered_blocks().map(Scenario::BareBlock));
    small.extend([
        Scenario::Inbox { v7: true },
        Scenario::InboxUncached,
        Scenario::Inbox { v7: false },
        Scenario::Duplicates { expected: false },
        Scenario::Duplicates { expected: true },
        Scenario::Enqueue { order_lock: true },
        Scenario::Enqueue { order_lock: false },
        Scenario::Naive,
        Scenario::Minimal,
    ]);
    small.extend(BATCH_SIZES.map(Scenario::Batch));
    small.extend(BATCH_SIZES.map(Scenario::Bulk));
    small.extend(floors);
    let mut rates = rounds(&mut conn, &small, options, &mut feed);
    let per_round = (options.events / options.rounds).max(1);
    let single = asynch::single::<C::Async>(db.url(), per_round, options.rounds);
    for (inbox, rounds) in [false, true].into_iter().zip(single) {
        rates.push((Scenario::Async { inbox, tasks: 1 }, rounds));
    }

    // Before the prefill, so that the many connections meet the inbox table at the size the
    // single connection did.
    let concurrent = Instant::now();
    let concurrency = concurrency(&db, options);
    let events = options.concurrency_events.unwrap_or(options.events);
    let tasks = *CONNS.iter().max().unwrap();
    let per_round = (events / options.rounds).max(1);
    let together = asynch::concurrent::<C::Async>(db.url(), tasks, per_round, options.rounds);
    for (inbox, rounds) in [false, true].into_iter().zip(together) {
        rates.push((Scenario::Async { inbox, tasks }, rounds));
    }
    eprintln!(
        "{}: concurrency phases in {:.1?}",
        C::NAME,
        concurrent.elapsed()
    );

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
        concurrency,
    }
}

fn main() -> Result<(), String> {
    let options = options()?;
    // The inbox's warnings on stderr (`RUST_LOG` sets more), and its contention retries
    // counted off the debug event each one logs; the filter passes no other callsite.
    let warnings = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let retries = tracing_subscriber::filter::filter_fn(|meta| {
        meta.is_event()
            && meta.target() == "diesel_inbox::transaction"
            && meta.fields().field("attempt").is_some()
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(warnings),
        )
        .with(CountRetries.with_filter(retries))
        .init();
    let started_all = Instant::now();
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

    let mut out = String::new();
    let out = &mut out;
    writeln!(
        out,
        "{} events per scenario in {} interleaved rounds, one connection; large runs after {} rows were put in the inbox table\n",
        options.events, options.rounds, options.prefill
    )
    .unwrap();
    let names: Vec<String> = columns.iter().map(|c| c.name.to_owned()).collect();
    print_row(out, "events/s (middle half of rounds)", &names);
    print_rule(out, columns.len());
    for (scenario, _) in &columns[0].rates {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| figure(c.rate(*scenario), 0))
            .collect();
        print_row(out, &scenario.label(), &cells);
    }

    writeln!(
        out,
        "\n{} deliveries per concurrent scenario in {} interleaved rounds, a pooled connection per thread; rates and ratios over the middle half of rounds, latencies their medians, ratio = inbox/s over bare/s; the inbox's retries over all rounds\n",
        options.concurrency_events.unwrap_or(options.events),
        options.rounds
    )
    .unwrap();
    for figures in &columns {
        print_concurrency(out, figures);
    }

    writeln!(out).unwrap();
    print_ratios(out, &columns);
    print!("\n{out}");
    if let Some(path) = &options.markdown {
        markdown::write(path, out, started_all.elapsed())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The ratio table: the rows readers compare between runs, by name.
/// The ratio that says what the statement cache off costs the inbox.
const UNCACHED_RATIO: &str = "inbox, statement cache off / inbox";

fn print_ratios(out: &mut String, columns: &[Figures]) {
    let names: Vec<String> = columns.iter().map(|c| c.name.to_owned()).collect();
    print_row(out, "ratio (middle half of rounds)", &names);
    print_rule(out, columns.len());
    let (v4, v7) = (Scenario::Inbox { v7: false }, Scenario::Inbox { v7: true });
    let mut ratios = cursor_ratios();
    ratios.extend([
        ("inbox / bare, UUIDv4".to_owned(), v4, Scenario::Bare),
        ("inbox / bare, UUIDv7".to_owned(), v7, Scenario::Bare),
        (UNCACHED_RATIO.to_owned(), Scenario::InboxUncached, v4),
        (
            "duplicates / bare".to_owned(),
            Scenario::Duplicates { expected: false },
            Scenario::Bare,
        ),
        (
            "duplicates, expected / bare".to_owned(),
            Scenario::Duplicates { expected: true },
            Scenario::Bare,
        ),
        (
            "enqueue / bare".to_owned(),
            Scenario::Enqueue { order_lock: true },
            Scenario::Bare,
        ),
        (
            "enqueue / enqueue, no order lock".to_owned(),
            Scenario::Enqueue { order_lock: true },
            Scenario::Enqueue { order_lock: false },
        ),
        ("naive / bare".to_owned(), Scenario::Naive, Scenario::Bare),
        ("inbox / naive, UUIDv4".to_owned(), v4, Scenario::Naive),
        (
            "minimal / bare".to_owned(),
            Scenario::Minimal,
            Scenario::Bare,
        ),
        ("inbox / minimal, UUIDv4".to_owned(), v4, Scenario::Minimal),
        (
            "async inbox / async bare, UUIDv4".to_owned(),
            Scenario::Async {
                inbox: true,
                tasks: 1,
            },
            Scenario::Async {
                inbox: false,
                tasks: 1,
            },
        ),
    ]);
    for size in BATCH_SIZES {
        ratios.push((
            format!("batch {size} / inbox, UUIDv4"),
            Scenario::Batch(size),
            v4,
        ));
    }
    for size in BATCH_SIZES {
        ratios.push((
            format!("bulk {size} / inbox, UUIDv4"),
            Scenario::Bulk(size),
            v4,
        ));
    }
    for (name, over, under) in ratios {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| figure(c.ratio(over, under), 2))
            .collect();
        print_row(out, &name, &cells);
    }
    print_floor_ratios(out, columns);
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
        print_row(out, label, &cells);
    }
    for mix in Mix::ALL {
        for conns in CONNS {
            let [bare, inbox] =
                [false, true].map(|inbox| Scenario::Concurrent { inbox, conns, mix });
            let cells: Vec<_> = columns
                .iter()
                .map(|c| format!("{:.2}", c.ratio(inbox, bare)))
                .collect();
            let name = format!("inbox / bare, {}, {}", conns_label(conns), mix.label());
            print_row(out, &name, &cells);
        }
    }
    print_async_ratios(out, columns);
}

/// The floor's ratios, and the client's as a fraction of them; a dash where there is no floor
/// (SQLite, in process).
fn print_floor_ratios(out: &mut String, columns: &[Figures]) {
    let v4 = Scenario::Inbox { v7: false };
    for (label, over, under) in [
        ("floor: inbox / bare", Floor::Inbox, Floor::Bare),
        ("floor: minimal / bare", Floor::Minimal, Floor::Bare),
        ("floor: inbox / minimal", Floor::Inbox, Floor::Minimal),
    ] {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| figure(c.ratio(Scenario::Floor(over), Scenario::Floor(under)), 2))
            .collect();
        print_row(out, label, &cells);
    }
    for (label, client, floor) in [
        (
            "inbox / bare, of the floor's",
            [v4, Scenario::Bare],
            [Floor::Inbox, Floor::Bare],
        ),
        (
            "minimal / bare, of the floor's",
            [Scenario::Minimal, Scenario::Bare],
            [Floor::Minimal, Floor::Bare],
        ),
        (
            "inbox / minimal, of the floor's",
            [v4, Scenario::Minimal],
            [Floor::Inbox, Floor::Minimal],
        ),
    ] {
        let cells: Vec<_> = columns
            .iter()
            .map(|c| figure(c.of_floor(client, floor), 2))
            .collect();
        print_row(out, label, &cells);
    }
}

/// `value` with `decimals` decimals, or a dash where it was not measured.
fn figure(value: f64, decimals: usize) -> String {
    if value.is_nan() {
        "—".to_owned()
    } else {
        format!("{value:.decimals$}")
    }
}

/// The cursor's and the chain cursor's ratios: a label, the scenario over, the one under.
fn cursor_ratios() -> Vec<(String, Scenario, Scenario)> {
    let mut ratios = vec![("cursor / bare".to_owned(), Scenario::Cursor, Scenario::Bare)];
    for size in BLOCK_SIZES {
        let chain = Scenario::Chain(size);
        ratios.push((format!("{} / bare", chain.label()), chain, Scenario::Bare));
    }
    for size in bare_peered_blocks() {
        let (chain, bare) = (Scenario::Chain(size), Scenario::BareBlock(size));
        // Both sides commit `size` events a transaction: the label says it once.
        ratios.push((format!("chain cursor / {}", bare.label()), chain, bare));
    }
    ratios
}

/// The async phase's 16 tasks on one thread: over its own bare, and over the sync phase's 16
/// threads (each phase over its own rounds, so drift between the phases stays in).
fn print_async_ratios(out: &mut String, columns: &[Figures]) {
    let tasks = *CONNS.iter().max().unwrap();
    let [bare, inbox] = [false, true].map(|inbox| Scenario::Async { inbox, tasks });
    let threads = Scenario::Concurrent {
        inbox: true,
        conns: tasks,
        mix: Mix::New,
    };
    let cells = |ratio: &dyn Fn(&Figures) -> f64| -> Vec<String> {
        columns.iter().map(|c| format!("{:.2}", ratio(c))).collect()
    };
    print_row(
        out,
        &format!("async inbox / async bare, {tasks} tasks, new"),
        &cells(&|c| c.ratio(inbox, bare)),
    );
    print_row(
        out,
        &format!("async inbox {tasks} tasks / inbox {tasks} threads"),
        &cells(&|c| c.rate(inbox) / c.rate(threads)),
    );
}

/// One backend's concurrent scenarios: bare and inbox side by side, a row per connection
/// count and mix.
fn print_concurrency(out: &mut String, figures: &Figures) {
    const HEADERS: [&str; 8] = [
        "bare/s", "p50 ms", "p99 ms", "inbox/s", "p50 ms", "p99 ms", "retries", "ratio",
    ];
    let title = format!("{}, concurrent", figures.name);
    print_cells(out, &title, 26, &HEADERS.map(str::to_owned), 8);
    print_rule_of(out, 26, HEADERS.len(), 8);
    for conns in CONNS {
        for mix in Mix::ALL {
            let [bare, inbox] =
                [false, true].map(|inbox| Scenario::Concurrent { inbox, conns, mix });
            let mut cells = Vec::new();
            for scenario in [bare, inbox] {
                let [p50, p99] = figures.latency(scenario);
                cells.push(format!("{:.0}", figures.rate(scenario)));
                cells.push(format!("{p50:.2}"));
                cells.push(format!("{p99:.2}"));
            }
            cells.push(figures.concurrent(inbox).retries.to_string());
            cells.push(format!("{:.2}", figures.ratio(inbox, bare)));
            print_cells(
                out,
                &format!("{}, {}", conns_label(conns), mix.label()),
                26,
                &cells,
                8,
            );
        }
    }
    for run in &figures.concurrency {
        if let Some(error) = run.errors.first() {
            writeln!(
                out,
                "{}: {} errors, the first: {error}",
                run.scenario.label(),
                run.errors.len()
            )
            .unwrap();
        }
    }
    writeln!(out).unwrap();
}

/// A row of the single-connection and ratio tables.
fn print_row(out: &mut String, label: &str, cells: &[String]) {
    print_cells(out, label, 40, cells, 12);
}

fn print_rule(out: &mut String, columns: usize) {
    print_rule_of(out, 40, columns, 12);
}

fn print_cells(out: &mut String, label: &str, label_width: usize, cells: &[String], width: usize) {
    write!(out, "| {label:<label_width$} |").unwrap();
    for cell in cells {
        write!(out, " {cell:>width$} |").unwrap();
    }
    writeln!(out).unwrap();
}

fn print_rule_of(out: &mut String, label_width: usize, columns: usize, width: usize) {
    write!(out, "|{}|", "-".repeat(label_width + 2)).unwrap();
    for _ in 0..columns {
        write!(out, "{}:|", "-".repeat(width + 1)).unwrap();
    }
    writeln!(out).unwrap();
}
