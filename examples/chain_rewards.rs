//! An indexer on embedded SQLite that credits staking rewards from a chain's blocks, through a
//! chain cursor. The chain reorganises twice: once delivered from the fork point, once found
//! from the new head alone, through the node's view of the branch. Each reward on the
//! canonical chain is credited once; a reward only an orphaned block had is taken back; a
//! fork below the finalized height is refused; the fork ledger lists both reorgs.
//!
//! ```sh
//! cargo run --example chain_rewards --features sqlite
//! RUST_LOG=diesel_inbox=warn cargo run --example chain_rewards --features sqlite  # the reorgs' log lines
//! ```

use std::collections::BTreeMap;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_inbox::chain::{Block, BlockId, BlockOutcome, Chain, ChainHandler};
use diesel_inbox::{Ack, EventId, Inbox, SqliteSetup};

/// A reward transaction: who is credited, and how much.
#[derive(Debug, Clone)]
struct Reward {
    account: &'static str,
    amount: i64,
}

/// How deep a reorg may reach: blocks further below the head are final.
const FINALITY_DEPTH: u64 = 3;

/// The indexer's handler: credits each reward in the cursor's transaction, takes back those of
/// orphaned blocks, and knows the node's current branch to find a fork's ancestor.
#[derive(Default)]
struct Indexer {
    /// The node's branch, by height: what `eth_getBlockByNumber` would answer.
    branch: BTreeMap<u64, String>,
}

impl ChainHandler<SqliteConnection> for Indexer {
    type Event = Reward;
    type Error = diesel_inbox::Error;

    fn apply(
        &mut self,
        tx: &mut SqliteConnection,
        block: &BlockId,
        id: &EventId,
        reward: &Reward,
    ) -> Result<(), Self::Error> {
        diesel::sql_query("INSERT INTO credits (tx, account, amount, block) VALUES (?, ?, ?, ?)")
            .bind::<Text, _>(id.as_str())
            .bind::<Text, _>(reward.account)
            .bind::<BigInt, _>(reward.amount)
            .bind::<Text, _>(block.hash())
            .execute(tx)?;
        Ok(())
    }

    fn revert(
        &mut self,
        tx: &mut SqliteConnection,
        _: &BlockId,
        id: &EventId,
    ) -> Result<(), Self::Error> {
        diesel::sql_query("DELETE FROM credits WHERE tx = ?")
            .bind::<Text, _>(id.as_str())
            .execute(tx)?;
        Ok(())
    }

    fn ancestor(&mut self, height: u64) -> Option<String> {
        self.branch.get(&height).cloned()
    }
}

/// A block of the node's: `height`, `hash`, child of `parent`, carrying `rewards` by tx hash.
fn block(
    height: u64,
    hash: &str,
    parent: &str,
    rewards: &[(&str, &'static str, i64)],
) -> Block<Reward> {
    let events = rewards.iter().map(|&(tx, account, amount)| {
        let id = EventId::new(tx).expect("a tx hash is a valid event id");
        (id, Reward { account, amount })
    });
    Block::new(height, hash, parent)
        .expect("a short hash")
        .events_from(events)
}

/// Delivers `block` and prints what came of it and what to tell the node's subscription.
fn deliver(
    conn: &mut SqliteConnection,
    chain: &Chain,
    indexer: &mut Indexer,
    block: &Block<Reward>,
) -> Result<BlockOutcome, diesel_inbox::Error> {
    let result = chain.process(conn, block, indexer);
    let ack = Ack::of(&result);
    let said = match &result {
        Ok(BlockOutcome::Processed {
            applied,
            duplicates,
            reorg,
        }) => {
            let reorg = reorg.as_ref().map_or(String::new(), |r| {
                format!(
                    " after a reorg: {} block(s) above {} orphaned, {} reward(s) taken back",
                    r.depth(),
                    r.ancestor,
                    r.events_reverted
                )
            });
            format!("processed: {applied} credited, {duplicates} already{reorg}")
        }
        Ok(BlockOutcome::Duplicate) => "duplicate: skipped".to_owned(),
        Ok(BlockOutcome::Rewound { reorg }) => format!(
            "rewound to {} ({} reward(s) taken back): deliver the new branch from {}",
            reorg.ancestor,
            reorg.events_reverted,
            reorg.ancestor + 1
        ),
        Ok(other) => format!("{other:?}"),
        Err(error) => format!("refused: {error}"),
    };
    println!("  {:<10} -> {said} => {ack:?}", block.id().to_string());
    result
}

#[derive(QueryableByName)]
struct Balance {
    #[diesel(sql_type = Text)]
    account: String,
    #[diesel(sql_type = BigInt)]
    total: i64,
}

fn balances(conn: &mut SqliteConnection) -> QueryResult<Vec<(String, i64)>> {
    let rows: Vec<Balance> = diesel::sql_query(
        "SELECT account, SUM(amount) AS total FROM credits GROUP BY account ORDER BY account",
    )
    .load(conn)?;
    Ok(rows.into_iter().map(|b| (b.account, b.total)).collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let dir = tempfile::tempdir()?;
    let mut conn =
        SqliteConnection::establish(&dir.path().join("rewards.db").display().to_string())?;
    SqliteSetup::default().apply(&mut conn)?;
    diesel_inbox::run_pending_migrations(&mut conn)?;
    conn.batch_execute(
        "CREATE TABLE credits (tx TEXT PRIMARY KEY, account TEXT NOT NULL, amount BIGINT NOT NULL, block TEXT NOT NULL);",
    )?;
    let chain = Inbox::new("rewards")?.chain("eth:mainnet", FINALITY_DEPTH)?;
    let mut indexer = Indexer::default();

    println!("the node's chain, block by block:");
    for b in [
        block(100, "100a", "99a", &[("tx1", "alice", 50)]),
        block(101, "101a", "100a", &[("tx2", "bob", 20)]),
        block(
            102,
            "102a",
            "101a",
            &[("tx3", "alice", 10), ("tx4", "carol", 5)],
        ),
        block(103, "103a", "102a", &[("tx5", "bob", 7)]),
    ] {
        assert!(deliver(&mut conn, &chain, &mut indexer, &b)?.is_processed());
    }

    println!("the node reorganises above 101a and sends the new branch from the fork point:");
    println!("  (102b includes tx3 again and drops tx4; tx5 moves to 103b, beside tx6)");
    let b102 = block(102, "102b", "101a", &[("tx3", "alice", 10)]);
    let b103 = block(
        103,
        "103b",
        "102b",
        &[("tx5", "bob", 7), ("tx6", "dave", 3)],
    );
    for b in [&b102, &b103] {
        assert!(deliver(&mut conn, &chain, &mut indexer, b)?.is_processed());
    }
    println!("  (the ack of 103b was lost: the node sends it again)");
    assert!(deliver(&mut conn, &chain, &mut indexer, &b103)?.is_duplicate());

    println!("the node reorganises above 102b again, and its subscription sends the new head:");
    let c = [
        block(
            103,
            "103c",
            "102b",
            &[("tx5", "bob", 7), ("tx7", "erin", 12)],
        ),
        block(104, "104c", "103c", &[("tx6", "dave", 3)]),
        block(105, "105c", "104c", &[("tx8", "alice", 1)]),
    ];
    indexer.branch = [(100, "100a"), (101, "101a"), (102, "102b")]
        .into_iter()
        .chain(c.iter().map(|b| (b.id().height(), b.id().hash())))
        .map(|(height, hash)| (height, hash.to_owned()))
        .collect();
    // 104c's parent is not 103b: the handler names the branch's hashes down to 102b.
    let outcome = deliver(&mut conn, &chain, &mut indexer, &c[1])?;
    let from = outcome.reorg().expect("104c forks below 103b").ancestor + 1;
    for b in c.iter().filter(|b| b.id().height() >= from) {
        assert!(deliver(&mut conn, &chain, &mut indexer, b)?.is_processed());
    }

    println!("a lagging node sends a fork of 101a, which is final by now:");
    let stale = block(102, "102x", "101a", &[("tx9", "mallory", 1_000)]);
    let refused = deliver(&mut conn, &chain, &mut indexer, &stale);
    assert!(matches!(
        refused,
        Err(diesel_inbox::Error::Chain(
            diesel_inbox::chain::Refused::ReorgBeyondFinality { .. }
        ))
    ));

    let position = chain.position(&mut conn)?.expect("the stream has a head");
    println!(
        "head {}, finalized at {:?}",
        position.head, position.finalized
    );
    println!("the fork ledger (diesel-inbox reorgs):");
    for reorg in chain.reorgs().list(&mut conn, 0, 100)? {
        println!(
            "  #{} above {}: {} -> {}, depth {}, {} reverted, {} re-applied",
            reorg.id,
            reorg.ancestor,
            reorg.old_head,
            reorg.new_head,
            reorg.depth(),
            reorg.events_reverted,
            reorg.events_reapplied
        );
    }
    let balances = balances(&mut conn)?;
    println!("balances: {balances:?}");
    // Every reward on the canonical chain once; carol's tx4, only in 102a, taken back.
    let expected = [("alice", 61), ("bob", 27), ("dave", 3), ("erin", 12)];
    let expected: Vec<(String, i64)> = expected
        .into_iter()
        .map(|(account, total)| (account.to_owned(), total))
        .collect();
    assert_eq!(balances, expected);
    Ok(())
}
