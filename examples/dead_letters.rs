//! A poison message on embedded SQLite: it fails until the failure policy dead-letters it,
//! later deliveries skip it, ops fix the cause and redrive it from the stored payload, and a
//! second redrive is refused.
//!
//! ```sh
//! cargo run --example dead_letters --features sqlite
//! ```

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_inbox::{
    Audit, Delivery, FailureKind, HandlerError, Inbox, Outcome, Payload, SqliteSetup,
};

#[derive(Debug, thiserror::Error)]
enum ShipError {
    #[error("unknown SKU {0:?}")]
    UnknownSku(String),
    #[error("the message has no usable payload")]
    BadPayload,
    #[error(transparent)]
    Inbox(#[from] diesel_inbox::Error),
    /// A redrive's refusal (the event is not dead-lettered): what `redrive` needs besides.
    #[error(transparent)]
    Refused(#[from] diesel_inbox::AdminError),
}

impl From<diesel::result::Error> for ShipError {
    fn from(e: diesel::result::Error) -> Self {
        ShipError::Inbox(e.into())
    }
}

/// What the inbox may know of the handler's error: the database error inside (contention is
/// retried, never counted), and which failures no retry can cure. An unknown SKU is counted:
/// the catalog may catch up; a payload without a SKU never will.
impl HandlerError for ShipError {
    fn diesel_error(&self) -> Option<&diesel::result::Error> {
        self.inbox_error().and_then(HandlerError::diesel_error)
    }

    fn inbox_error(&self) -> Option<&diesel_inbox::Error> {
        match self {
            ShipError::Inbox(error) => Some(error),
            ShipError::Refused(error) => error.inbox_error(),
            ShipError::UnknownSku(_) | ShipError::BadPayload => None,
        }
    }

    fn failure_kind(&self) -> FailureKind {
        match self {
            ShipError::BadPayload => FailureKind::Permanent,
            ShipError::UnknownSku(_) | ShipError::Inbox(_) | ShipError::Refused(_) => {
                FailureKind::Counted
            }
        }
    }
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The handler: reserve stock for the SKU in the payload.
fn ship(conn: &mut SqliteConnection, payload: Option<&Payload>) -> Result<(), ShipError> {
    let Some(Payload::Json(order)) = payload else {
        return Err(ShipError::BadPayload);
    };
    let sku = order["sku"].as_str().ok_or(ShipError::BadPayload)?;
    let known = diesel::sql_query("SELECT COUNT(*) AS n FROM catalog WHERE sku = ?")
        .bind::<Text, _>(sku)
        .get_result::<Count>(conn)?
        .n;
    if known == 0 {
        return Err(ShipError::UnknownSku(sku.to_owned()));
    }
    diesel::sql_query("UPDATE catalog SET reserved = reserved + 1 WHERE sku = ?")
        .bind::<Text, _>(sku)
        .execute(conn)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut conn = SqliteConnection::establish(&dir.path().join("shop.db").display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE catalog (sku TEXT PRIMARY KEY, reserved BIGINT NOT NULL);
         INSERT INTO catalog VALUES ('MUG-1', 0);",
    )?;

    let inbox = Inbox::new("shipments")?.max_attempts(3);
    let poison = Delivery::new("order-77")?.json(serde_json::json!({"sku": "LAMP-9", "qty": 1}));

    for delivery in 1..=4 {
        let outcome = inbox.process(&mut conn, &poison, |tx| ship(tx, poison.payload()));
        let said = match outcome {
            Ok(Outcome::Processed(())) => "processed".to_owned(),
            Ok(Outcome::DeadLettered(d)) if delivery == 3 => {
                format!(
                    "failed a 3rd time: dead-lettered at {}",
                    d.since().format("%H:%M:%S")
                )
            }
            Ok(Outcome::DeadLettered(d)) => {
                format!(
                    "dead-lettered: skipped, ack it (delivery #{} since)",
                    d.deliveries()
                )
            }
            Ok(other) => format!("{other:?}"),
            Err(e) => format!("failed: {e}; rolled back, will be redelivered"),
        };
        println!("delivery {delivery} of order-77 -> {said}");
    }

    let dead_letters = inbox.dead_letters();
    // A page of up to 100, in event id order; the next starts after the last id shown. A row
    // this version cannot read comes back in its place as an error naming it.
    for letter in dead_letters.list(&mut conn, None, 100)? {
        match letter {
            Ok(letter) => println!(
                "dead letter {}: {} attempts, last error: {}",
                letter.event_id, letter.attempts, letter.last_error
            ),
            Err(unreadable) => println!("unreadable dead letter: {unreadable}"),
        }
    }

    // Ops add the missing SKU, then redrive: the handler runs on the stored payload, through
    // the inbox, so it still takes effect at most once.
    conn.batch_execute("INSERT INTO catalog VALUES ('LAMP-9', 0);")?;
    let audit = Audit::new("ops@shop.example", "LAMP-9 added to the catalog")?;
    let redriven = dead_letters.redrive(&mut conn, "order-77", &audit, ship)?;
    println!("redrive -> processed: {}", redriven.is_processed());
    let again = dead_letters.redrive(&mut conn, "order-77", &audit, ship);
    println!(
        "second redrive -> {}",
        again.map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
    );

    let record = dead_letters.show(&mut conn, "order-77")?;
    println!("order-77 is now {}; history:", record.state);
    for entry in &record.history {
        let attempt = entry.attempt.map(|a| format!(" #{a}")).unwrap_or_default();
        let who = entry
            .actor
            .as_deref()
            .map(|a| format!(" by {a}"))
            .unwrap_or_default();
        let why = entry
            .reason
            .as_deref()
            .or(entry.error.as_deref())
            .unwrap_or("");
        println!(
            "  {} {}{attempt}{who}: {why}",
            entry.at.format("%H:%M:%S%.3f"),
            entry.kind
        );
    }
    let reserved = diesel::sql_query("SELECT reserved AS n FROM catalog WHERE sku = 'LAMP-9'")
        .get_result::<Count>(&mut conn)?
        .n;
    println!("LAMP-9 reserved: {reserved} (exactly once)");
    assert_eq!(reserved, 1);
    Ok(())
}
