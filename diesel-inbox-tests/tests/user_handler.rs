//! How to prove your own handler idempotent with `diesel_inbox_test`: copy this file and
//! swap in your handler and schema.
//!
//! The handler credits a wallet when a payment event arrives. The tests deliver payments the way
//! an at-least-once broker does (again, from several workers at once, after failures, in any
//! order) and check that each payment is credited once.
//!
//! It runs on SQLite with no setup: `cargo test -p diesel-inbox-tests --features sqlite --test
//! user_handler`. The same tests run on PostgreSQL or MySQL/MariaDB with
//! `TestDatabase::postgres(admin_url)` or `TestDatabase::mysql(admin_url)` and the connection
//! type changed. In your own crate, add the test kit for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! diesel-inbox-test = { version = "0.1", features = ["sqlite"] }
//! proptest = "1"
//! ```

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel_inbox::{HandlerError, Inbox, Outcome};
use diesel_inbox_test::{
    assert_deliveries, assert_idempotent, assert_idempotent_concurrently, assert_not_processed,
    assert_processed_once, run_schedule, Faults, InjectedFault, ScheduleOptions, TestDatabase,
};
use proptest::prelude::*;

// The application: schema, event, handler. In your crate these live in `src/`.

mod schema {
    diesel::table! {
        wallets (account) {
            account -> Text,
            cents -> BigInt,
        }
    }

    diesel::table! {
        ledger (id) {
            id -> Integer,
            event_id -> Text,
            account -> Text,
            cents -> BigInt,
        }
    }
}

use schema::{ledger, wallets};

const SCHEMA: &str = "
    CREATE TABLE wallets (account TEXT PRIMARY KEY, cents BIGINT NOT NULL);
    CREATE TABLE ledger (
        id INTEGER PRIMARY KEY,
        event_id TEXT NOT NULL,
        account TEXT NOT NULL,
        cents BIGINT NOT NULL
    );
";

/// A payment event as the broker delivers it: an identity and a payload.
#[derive(Debug, Clone)]
struct PaymentReceived {
    event_id: String,
    account: String,
    cents: i64,
}

#[derive(Debug, thiserror::Error)]
enum WalletError {
    #[error("no wallet for account {0}")]
    UnknownAccount(String),
    #[error("payment service briefly unavailable")]
    Unavailable,
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
    #[error(transparent)]
    Inbox(#[from] diesel_inbox::Error),
}

/// What the inbox may know of the handler's error: the database error inside, so contention
/// is retried and never counted, and the inbox's own error, so `Ack::of` finds it. Every
/// failure of the handler's own is counted (the default kind).
impl HandlerError for WalletError {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        match self {
            WalletError::Database(error) => Some(error),
            WalletError::Inbox(error) => error.diesel_error(),
            WalletError::UnknownAccount(_) | WalletError::Unavailable => None,
        }
    }

    fn inbox_error(&self) -> Option<&diesel_inbox::Error> {
        match self {
            WalletError::Inbox(error) => Some(error),
            _ => None,
        }
    }
}

/// Lets [`Faults`] fail the effect with the handler's own error type. In your crate, keep this
/// impl in the test module.
impl From<InjectedFault> for WalletError {
    fn from(_: InjectedFault) -> Self {
        WalletError::Unavailable
    }
}

fn payments_inbox() -> Inbox {
    Inbox::new("wallet.payments").expect("a valid consumer name")
}

/// The effect: credit the wallet and write a ledger line, inside the inbox's transaction.
/// Returns the new balance.
fn credit(tx: &mut SqliteConnection, payment: &PaymentReceived) -> Result<i64, WalletError> {
    let wallet = wallets::table.find(&payment.account);
    let updated = diesel::update(wallet)
        .set(wallets::cents.eq(wallets::cents + payment.cents))
        .execute(tx)?;
    if updated == 0 {
        return Err(WalletError::UnknownAccount(payment.account.clone()));
    }
    diesel::insert_into(ledger::table)
        .values((
            ledger::event_id.eq(&payment.event_id),
            ledger::account.eq(&payment.account),
            ledger::cents.eq(payment.cents),
        ))
        .execute(tx)?;
    Ok(wallet.select(wallets::cents).first(tx)?)
}

/// The handler the consumer loop calls for each delivery; it acks whatever the outcome.
fn on_payment(
    conn: &mut SqliteConnection,
    payment: &PaymentReceived,
) -> Result<Outcome<i64>, WalletError> {
    payments_inbox().process(conn, payment.event_id.as_str(), |tx| credit(tx, payment))
}

// The tests.

fn payment(event_id: &str, cents: i64) -> PaymentReceived {
    PaymentReceived {
        event_id: event_id.to_owned(),
        account: "alice".to_owned(),
        cents,
    }
}

/// A database with the application's schema and alice's empty wallet.
fn database() -> (TestDatabase<SqliteConnection>, SqliteConnection) {
    let db = TestDatabase::sqlite();
    let mut conn = db.connect();
    conn.batch_execute(SCHEMA).unwrap();
    conn.batch_execute("INSERT INTO wallets VALUES ('alice', 0)")
        .unwrap();
    (db, conn)
}

/// The effect, counted: one ledger line per credited payment.
fn ledger_lines(conn: &mut SqliteConnection) -> QueryResult<i64> {
    ledger::table.count().get_result(conn)
}

fn balance(conn: &mut SqliteConnection) -> i64 {
    wallets::table
        .find("alice")
        .select(wallets::cents)
        .first(conn)
        .unwrap()
}

#[test]
fn a_payment_delivered_five_times_is_credited_once() {
    let (_db, mut conn) = database();
    let paid = payment("pay-1", 500);

    assert_idempotent(&mut conn, 5, |c| on_payment(c, &paid), ledger_lines);

    assert_eq!(balance(&mut conn), 500);
    assert_deliveries(&mut conn, &payments_inbox(), "pay-1", 5);
}

#[test]
fn a_payment_delivered_by_eight_workers_at_once_is_credited_once() {
    let (db, mut conn) = database();
    let pool = db.pool(4);
    let paid = payment("pay-1", 500);

    assert_idempotent_concurrently(&pool, 8, |c| on_payment(c, &paid), ledger_lines);

    assert_eq!(balance(&mut conn), 500);
    assert_deliveries(&mut conn, &payments_inbox(), "pay-1", 8);
}

#[test]
fn a_payment_to_an_unknown_wallet_is_not_recorded_and_a_redelivery_credits_it() {
    let (_db, mut conn) = database();
    let paid = PaymentReceived {
        account: "bob".to_owned(),
        ..payment("pay-1", 300)
    };

    let refused = on_payment(&mut conn, &paid);
    assert!(
        matches!(refused, Err(WalletError::UnknownAccount(ref a)) if a == "bob"),
        "{refused:?}"
    );
    assert_not_processed(&mut conn, &payments_inbox(), "pay-1");

    conn.batch_execute("INSERT INTO wallets VALUES ('bob', 0)")
        .unwrap();
    let credited = on_payment(&mut conn, &paid).unwrap();

    assert_eq!(credited, Outcome::Processed(300));
    assert_processed_once(&mut conn, &payments_inbox(), "pay-1");
}

#[test]
fn a_payment_whose_first_two_attempts_fail_is_credited_once_by_the_retries() {
    let (_db, mut conn) = database();
    let paid = payment("pay-1", 500);
    let faults = Faults::on_attempts([1, 2]);
    let mut flaky_credit = faults.wrap(|tx: &mut SqliteConnection| credit(tx, &paid));

    // The consumer's retry path: a failed delivery is retried, up to five times.
    let mut outcome = Err(WalletError::Unavailable);
    for _ in 0..5 {
        outcome = payments_inbox().process(&mut conn, "pay-1", &mut flaky_credit);
        if outcome.is_ok() {
            break;
        }
    }

    assert_eq!(outcome.unwrap(), Outcome::Processed(500));
    assert_eq!((faults.attempts(), faults.injected()), (3, 2));
    assert_eq!(balance(&mut conn), 500, "failed attempts were rolled back");
    assert_deliveries(&mut conn, &payments_inbox(), "pay-1", 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Any mix of redeliveries, reorderings, errors and panics credits each payment once.
    #[test]
    fn any_delivery_schedule_credits_each_payment_once(
        schedule in ScheduleOptions::default().events(5).strategy()
    ) {
        let (_db, mut conn) = database();

        let report = run_schedule(
            &mut conn,
            &payments_inbox(),
            &schedule,
            |tx, id| credit(tx, &payment(id.as_str(), 100)),
            ledger_lines,
        );

        prop_assert_eq!(report.processed(), schedule.distinct_events());
        let distinct = i64::try_from(schedule.distinct_events()).unwrap();
        prop_assert_eq!(balance(&mut conn), 100 * distinct);
    }
}

// Schema versions: the payment event's payload changed shape in version 2 (the amount became an
// object with a currency). The consumer reads both; `tests/fixtures/events/` keeps one envelope
// of each version as the producer sent it, and the check below fails a release whose decoding
// no longer reads one of them.

/// The versions of `payment.received` the wallet consumer reads.
fn accepted_versions() -> diesel_inbox::envelope::SchemaVersions {
    diesel_inbox::envelope::SchemaVersions::new().accept("payment.received", [1, 2])
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/events");

/// The consumer's decoding: either version to the one event the handler takes.
fn decode_payment(
    envelope: &diesel_inbox::envelope::Envelope,
) -> Result<PaymentReceived, diesel_inbox::Error> {
    #[derive(serde::Deserialize)]
    struct V1 {
        account: String,
        cents: i64,
    }
    #[derive(serde::Deserialize)]
    struct Amount {
        cents: i64,
    }
    #[derive(serde::Deserialize)]
    struct V2 {
        account: String,
        amount: Amount,
    }
    accepted_versions().check(envelope)?;
    let (account, cents) = if envelope.schema_version() == 1 {
        let v1: V1 = envelope.decode_json()?;
        (v1.account, v1.cents)
    } else {
        let v2: V2 = envelope.decode_json()?;
        (v2.account, v2.amount.cents)
    };
    Ok(PaymentReceived {
        event_id: envelope.id().as_str().to_owned(),
        account,
        cents,
    })
}

#[test]
fn every_accepted_schema_version_has_a_fixture_the_consumer_decodes() {
    let checked =
        diesel_inbox_test::check_schema_fixtures(FIXTURES, &accepted_versions(), decode_payment)
            .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(checked, 2);
}

#[test]
fn a_consumer_that_stops_reading_version_1_fails_its_fixture_check_before_release() {
    // A refactor that reads every payload as version 2.
    let v2_only = |envelope: &diesel_inbox::envelope::Envelope| {
        #[derive(serde::Deserialize)]
        struct Amount {
            #[allow(dead_code)]
            cents: i64,
        }
        #[derive(serde::Deserialize)]
        struct V2 {
            #[allow(dead_code)]
            amount: Amount,
        }
        envelope.decode_json::<V2>()
    };
    let error = diesel_inbox_test::check_schema_fixtures(FIXTURES, &accepted_versions(), v2_only)
        .expect_err("version 1's fixture no longer decodes");
    let report = error.to_string();
    assert!(report.contains("payment.received/v1.json"), "{report}");
    assert!(!report.contains("v2.json"), "{report}");
    // And a version accepted without a fixture is a failure too.
    let without_fixture = accepted_versions().accept("payment.received", [3]);
    let error =
        diesel_inbox_test::check_schema_fixtures(FIXTURES, &without_fixture, decode_payment)
            .expect_err("no fixture of version 3");
    assert!(error.to_string().contains("v3.json"), "{error}");
}
