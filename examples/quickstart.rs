//! A consumer on embedded SQLite that receives duplicates, a failure and an out-of-order
//! redelivery, and still credits each reward exactly once.
//!
//! ```sh
//! cargo run --example quickstart --features sqlite
//! RUST_LOG=diesel_inbox=debug cargo run --example quickstart --features sqlite  # and its traces
//! ```

use std::collections::BTreeSet;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_inbox::{Ack, FailureKind, HandlerError, Inbox, Outcome, SqliteSetup};

/// An event as the broker hands it over: an identity and a payload.
struct Delivery {
    event_id: &'static str,
    account: &'static str,
    points: i64,
}

/// Why the handler failed: its own error type, with room for the inbox's.
#[derive(Debug, thiserror::Error)]
enum RewardError {
    #[error("points service briefly unavailable")]
    Transient,
    #[error(transparent)]
    Inbox(#[from] diesel_inbox::Error),
}

impl From<diesel::result::Error> for RewardError {
    fn from(e: diesel::result::Error) -> Self {
        RewardError::Inbox(e.into())
    }
}

/// What the inbox may know of the error: the inbox's own inside it, and that an unavailable
/// points service is transient (redelivered, never counted toward dead-lettering).
impl HandlerError for RewardError {
    fn inbox_error(&self) -> Option<&diesel_inbox::Error> {
        match self {
            RewardError::Inbox(error) => Some(error),
            RewardError::Transient => None,
        }
    }

    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        self.inbox_error().and_then(HandlerError::diesel_error)
    }

    fn failure_kind(&self) -> FailureKind {
        match self {
            RewardError::Transient => FailureKind::Transient,
            RewardError::Inbox(_) => FailureKind::Counted,
        }
    }
}

/// The business effect: credit points and keep a ledger line, in the inbox's transaction.
fn credit(conn: &mut SqliteConnection, delivery: &Delivery) -> Result<i64, RewardError> {
    diesel::sql_query("UPDATE accounts SET points = points + ? WHERE name = ?")
        .bind::<BigInt, _>(delivery.points)
        .bind::<Text, _>(delivery.account)
        .execute(conn)?;
    diesel::sql_query("INSERT INTO ledger (event_id, points) VALUES (?, ?)")
        .bind::<Text, _>(delivery.event_id)
        .bind::<BigInt, _>(delivery.points)
        .execute(conn)?;
    Ok(delivery.points)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every inbox call is a span with its consumer and event id; RUST_LOG chooses what prints.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("quickstart.db");
    let mut conn = SqliteConnection::establish(&path.display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE accounts (name TEXT PRIMARY KEY, points BIGINT NOT NULL);
         CREATE TABLE ledger (event_id TEXT NOT NULL, points BIGINT NOT NULL);
         INSERT INTO accounts VALUES ('alice', 0), ('bob', 0);",
    )?;

    let inbox = Inbox::new("rewards")?;
    let stream = [
        Delivery {
            event_id: "evt-1",
            account: "alice",
            points: 10,
        },
        Delivery {
            event_id: "evt-2",
            account: "bob",
            points: 5,
        },
        Delivery {
            event_id: "evt-1",
            account: "alice",
            points: 10,
        }, // broker redelivery
        Delivery {
            event_id: "evt-3",
            account: "alice",
            points: 7,
        }, // handler fails once
        Delivery {
            event_id: "evt-4",
            account: "bob",
            points: 3,
        },
        Delivery {
            event_id: "evt-3",
            account: "alice",
            points: 7,
        }, // redelivered after the failure
        Delivery {
            event_id: "evt-2",
            account: "bob",
            points: 5,
        }, // late, out of order
        Delivery {
            event_id: "evt-1",
            account: "alice",
            points: 10,
        }, // and once more
    ];

    let mut failed_once = false;
    let mut unique = BTreeSet::new();
    for delivery in &stream {
        unique.insert(delivery.event_id);
        let result = inbox.process(&mut conn, delivery.event_id, |tx| {
            if delivery.event_id == "evt-3" && !failed_once {
                failed_once = true;
                return Err(RewardError::Transient);
            }
            credit(tx, delivery)
        });
        // What to tell the broker: ask the inbox, whatever the result.
        let ack = Ack::of(&result);
        let said = match result {
            Ok(Outcome::Processed(points)) => format!("processed: {} +{points}", delivery.account),
            Ok(Outcome::Duplicate(d)) => match (d.deliveries(), d.processed_at()) {
                (Some(n), Some(at)) => format!(
                    "duplicate: skipped (delivery #{n}, first processed {})",
                    at.format("%H:%M:%S%.3f")
                ),
                _ => "duplicate: skipped".to_owned(),
            },
            Ok(_) => "other outcome".to_owned(),
            Err(e) => format!("failed: {e}; rolled back"),
        };
        println!("{:<6} -> {said} => {ack:?}", delivery.event_id);
    }

    let effects = diesel::sql_query("SELECT COUNT(*) AS n FROM ledger")
        .get_result::<Count>(&mut conn)?
        .n;
    let balances = diesel::sql_query("SELECT SUM(points) AS n FROM accounts")
        .get_result::<Count>(&mut conn)?
        .n;
    println!(
        "deliveries: {}, effects: {effects} == unique events: {} (points credited: {balances})",
        stream.len(),
        unique.len()
    );
    assert_eq!(
        usize::try_from(effects)?,
        unique.len(),
        "each event took effect exactly once"
    );
    Ok(())
}
