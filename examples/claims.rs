//! Claims on embedded SQLite: side effects that a rollback cannot undo, run through
//! `Inbox::claims`.
//!
//! 1. A welcome email through a mailer that takes no idempotency key (as with SES, Postmark,
//!    `SendGrid`): at most once, the default policy. The event comes twice; one email goes out.
//! 2. A card charge through a payment API that honours an idempotency key. The worker dies
//!    after the charge and before it completes the claim. After the lease the redelivery runs
//!    again with the same key (`InDoubtPolicy::RerunAfterLease`). The API applies the charge
//!    once, and the order records the charge once.
//! 3. A receipt email whose worker dies after the send: the claim is in doubt, nothing sends
//!    it again, and ops resolve it from the mailer's log.
//!
//! ```sh
//! cargo run --example claims --features sqlite
//! RUST_LOG=diesel_inbox=warn cargo run --example claims --features sqlite  # the warnings, on stderr
//! ```

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Text;
use diesel_inbox::{
    claim::{ClaimOutcome, Claimed, InDoubtPolicy, Resolution},
    Audit, Delivery, Inbox, SqliteSetup,
};
use serde_json::json;

/// What each part of the story returns: `?` on the inbox's and Diesel's errors alike.
type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const ADA: &str = "ada@example.com";
const RECEIPT: &str = "Your receipt for order-7";

/// An email the mailer sent, as its dashboard lists it.
struct Sent {
    message_id: String,
    to: String,
    subject: String,
}

/// An email provider's API as most offer it: no idempotency key, so each call sends an email.
#[derive(Default)]
struct Mailer {
    sent: Vec<Sent>,
}

impl Mailer {
    fn send(&mut self, to: &str, subject: &str) -> String {
        let message_id = format!("msg-{}", self.sent.len() + 1);
        self.sent.push(Sent {
            message_id: message_id.clone(),
            to: to.to_owned(),
            subject: subject.to_owned(),
        });
        message_id
    }
}

/// A payment API that honours an idempotency key: a repeated key gets the first charge back,
/// and the card is charged once.
#[derive(Default)]
struct Payments {
    calls: u32,
    charges: Vec<(String, i64)>,
    by_key: HashMap<String, String>,
}

impl Payments {
    fn charge(&mut self, idempotency_key: &str, cents: i64) -> String {
        self.calls += 1;
        if let Some(charge_id) = self.by_key.get(idempotency_key) {
            return charge_id.clone();
        }
        let charge_id = format!("ch_{}", self.charges.len() + 1);
        self.charges.push((charge_id.clone(), cents));
        self.by_key
            .insert(idempotency_key.to_owned(), charge_id.clone());
        charge_id
    }
}

/// What a delivery came to, and what to tell the broker.
fn said(outcome: &ClaimOutcome<String>) -> String {
    let what = match outcome {
        ClaimOutcome::Ran(value) => format!("ran: {value}"),
        ClaimOutcome::Completed(value) => format!("completed before: {value}; did not run again"),
        ClaimOutcome::InDoubt(doubt) => {
            format!("in doubt (attempt {}); did not run", doubt.attempt())
        }
        other => format!("{other:?}"),
    };
    format!("{what} => {:?}", outcome.ack())
}

#[derive(QueryableByName)]
struct Order {
    #[diesel(sql_type = Text)]
    charge_id: String,
}

fn main() -> Result {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let dir = tempfile::tempdir()?;
    let mut conn = SqliteConnection::establish(&dir.path().join("shop.db").display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE orders (id TEXT PRIMARY KEY, cents BIGINT NOT NULL, charge_id TEXT);
         INSERT INTO orders VALUES ('order-7', 4200, NULL);",
    )?;
    let mut mailer = Mailer::default();
    let lease = Duration::from_millis(50);
    welcome(&mut conn, &mut mailer)?;
    billing(&mut conn, &mut Payments::default(), lease)?;
    receipt(&mut conn, &mut mailer, lease)
}

/// An email at most once: the redelivery gets the stored message id back.
fn welcome(conn: &mut SqliteConnection, mailer: &mut Mailer) -> Result {
    println!("1. welcome-mailer: at most once (InDoubtPolicy::Hold, the default)");
    let emails = Inbox::new("welcome-mailer")?.claims();
    let signed_up = Delivery::new("user-42:signed-up")?.json(json!({"email": ADA}));
    for delivery in 1..=2 {
        let outcome = emails.run(conn, &signed_up, |_claim| {
            Ok::<_, diesel_inbox::Error>(mailer.send(ADA, "Welcome!"))
        })?;
        println!(
            "  delivery {delivery} of user-42:signed-up -> {}",
            said(&outcome)
        );
    }
    println!("  emails sent: {}", mailer.sent.len());
    assert_eq!(
        mailer.sent.len(),
        1,
        "the broker's redelivery sent no second email"
    );
    Ok(())
}

/// A charge once downstream: the worker dies after charging; the re-run passes the same
/// idempotency key, and its completion records the charge on the order.
fn billing(conn: &mut SqliteConnection, payments: &mut Payments, lease: Duration) -> Result {
    println!("2. billing: once downstream (InDoubtPolicy::RerunAfterLease, lease {lease:?})");
    let charges = Inbox::new("billing")?
        .claims()
        .lease(lease)
        .policy(InDoubtPolicy::RerunAfterLease);
    let Claimed::Acquired(claim) = charges.claim(conn, "order-7:charge")? else {
        unreachable!("the first delivery acquires the claim")
    };
    let key = claim.idempotency_key();
    let charge_id = payments.charge(&key, 4200);
    println!(
        "  worker A: claim attempt {}, charged {charge_id} with idempotency key {key}",
        claim.attempt()
    );
    println!("  worker A crashes before it completes the claim (the drop logs a warning)");
    drop(claim);
    thread::sleep(lease * 2);
    let outcome = charges.run_and_record(
        conn,
        "order-7:charge",
        |claim| {
            assert_eq!(
                claim.idempotency_key(),
                key,
                "the same key on every attempt"
            );
            println!(
                "  worker B: claim attempt {}, charging again with the same key",
                claim.attempt()
            );
            Ok::<_, diesel_inbox::Error>(payments.charge(&claim.idempotency_key(), 4200))
        },
        |tx, charge_id| {
            diesel::sql_query("UPDATE orders SET charge_id = ? WHERE id = 'order-7'")
                .bind::<Text, _>(charge_id)
                .execute(tx)?;
            Ok(())
        },
    )?;
    println!("  redelivery of order-7:charge -> {}", said(&outcome));
    let orders = diesel::sql_query("SELECT charge_id FROM orders WHERE charge_id IS NOT NULL")
        .load::<Order>(conn)?;
    println!(
        "  payment API: {} calls, {} charge applied; order-7's charge: {}",
        payments.calls,
        payments.charges.len(),
        orders[0].charge_id
    );
    assert_eq!(outcome, ClaimOutcome::Ran(charge_id.clone()));
    assert_eq!((payments.calls, payments.charges.len()), (2, 1));
    assert_eq!(orders.len(), 1);
    assert_eq!(orders[0].charge_id, charge_id);
    Ok(())
}

/// An email in doubt: the worker dies after sending; nothing sends it again until ops,
/// having found it in the mailer's log, resolve the claim as completed.
fn receipt(conn: &mut SqliteConnection, mailer: &mut Mailer, lease: Duration) -> Result {
    println!("3. receipt-mailer: at most once, and the worker dies after the send");
    let receipts = Inbox::new("receipt-mailer")?.claims().lease(lease);
    let Claimed::Acquired(claim) = receipts.claim(conn, "order-7:receipt")? else {
        unreachable!("the first delivery acquires the claim")
    };
    let message_id = mailer.send(ADA, RECEIPT);
    println!("  worker A: sent {message_id}, then crashes before it completes the claim");
    drop(claim);
    thread::sleep(lease * 2);
    let redeliver = |conn: &mut SqliteConnection, mailer: &mut Mailer| {
        receipts.run(conn, "order-7:receipt", |_claim| {
            Ok::<_, diesel_inbox::Error>(mailer.send(ADA, RECEIPT))
        })
    };
    let outcome = redeliver(conn, mailer)?;
    println!("  redelivery of order-7:receipt -> {}", said(&outcome));
    assert!(outcome.is_in_doubt());
    assert_eq!(mailer.sent.len(), 2, "an email in doubt is not sent again");

    println!("  ops list the claims in doubt (diesel-inbox --consumer receipt-mailer claims):");
    let in_doubt = receipts.in_doubt(conn)?;
    for record in &in_doubt {
        println!(
            "    {} attempt {} key {}\n      reason: {}",
            record.event_id,
            record.attempt,
            record.idempotency_key,
            record.reason.as_deref().unwrap_or("-")
        );
    }
    assert_eq!(in_doubt.len(), 1);
    let found = mailer
        .sent
        .iter()
        .find(|sent| sent.to == ADA && sent.subject == RECEIPT)
        .expect("the mailer's log has the receipt");
    println!(
        "  the mailer's log shows {} to {}: \"{}\"; ops resolve the claim as completed",
        found.message_id, found.to, found.subject
    );
    println!(
        "    (diesel-inbox --yes --consumer receipt-mailer claims resolve order-7:receipt \\\n       --completed '\"{}\"' --actor ops@shop.example --reason \"...\")",
        found.message_id
    );
    let audit = Audit::new(
        "ops@shop.example",
        format!(
            "{} is in the mailer's log: the receipt went out",
            found.message_id
        ),
    )?;
    let resolved = receipts.resolve(
        conn,
        "order-7:receipt",
        Resolution::Completed(json!(found.message_id)),
        &audit,
    )?;
    println!("  order-7:receipt is now {}", resolved.state);
    let outcome = redeliver(conn, mailer)?;
    println!(
        "  a late duplicate of order-7:receipt -> {}",
        said(&outcome)
    );
    assert_eq!(outcome, ClaimOutcome::Completed(message_id));
    assert_eq!(mailer.sent.len(), 2, "two emails, each sent once");
    assert!(receipts.in_doubt(conn)?.is_empty());
    Ok(())
}
