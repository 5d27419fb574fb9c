//! Chain cursors: blocks checked by their parents, reorgs undone exactly once, every fork in
//! the ledger, finality enforced.

use std::collections::{BTreeMap, HashSet};
use std::thread;
use std::time::Duration;

use diesel_inbox::chain::{self, Block, BlockId, BlockOutcome, Chain, ChainHandler, Reorg};
use diesel_inbox::{claim::ClaimState, Ack, Error, EventId, Inbox};

use crate::support::{
    setup, setup_flavour, Backend, ChainLedger, ChildTest, Flavour, TestConn, REVERTED,
};

/// Where the crash scenario's child finds its parent's database.
const CRASH_CHILD: &str = "DIESEL_INBOX_CHAIN_CRASH_CHILD";

/// How long the child may take to reach the point where it is killed.
const CHILD_STARTS_WITHIN: Duration = Duration::from_secs(60);

fn rewards(finality_depth: u64) -> Chain {
    Inbox::new("rewards")
        .unwrap()
        .chain("eth:main", finality_depth)
        .unwrap()
}

/// The block at `height` with hash `hash`, child of `parent`, carrying `events`.
fn block(height: u64, hash: &str, parent: &str, events: &[&str]) -> Block<()> {
    let block = Block::new(height, hash, parent).unwrap();
    block.events_from(events.iter().map(|id| (EventId::new(*id).unwrap(), ())))
}

/// Blocks `from..=to` of branch `branch` (hashes `{height}{branch}`), the first one's parent
/// `{from - 1}a`, each carrying the event `e{height}{branch}`.
fn branch(branch: &str, from: u64, to: u64) -> Vec<Block<()>> {
    (from..=to)
        .map(|height| {
            let parent = if height == from {
                format!("{}a", height.wrapping_sub(1))
            } else {
                format!("{}{branch}", height - 1)
            };
            let hash = format!("{height}{branch}");
            block(height, &hash, &parent, &[&format!("e{hash}")])
        })
        .collect()
}

/// Each event's net effect, its effect rows less its correction rows, and its effect rows.
fn effects(check: &mut impl TestConn) -> BTreeMap<String, (i64, i64)> {
    let mut effects = BTreeMap::<String, (i64, i64)>::new();
    for row in check.effect_rows() {
        if let Some(id) = row.strip_prefix(REVERTED) {
            effects.entry(id.to_owned()).or_default().0 -= 1;
        } else {
            let entry = effects.entry(row).or_default();
            entry.0 += 1;
            entry.1 += 1;
        }
    }
    effects
}

/// The net effect of `id`.
fn net(check: &mut impl TestConn, id: &str) -> i64 {
    effects(check).get(id).map_or(0, |&(net, _)| net)
}

async fn deliver_all<F: Flavour>(chain: &Chain, conn: &mut F::Conn, blocks: &[Block<()>]) {
    let mut ledger = ChainLedger::default();
    for block in blocks {
        let outcome = F::process_block(chain, conn, block, &mut ledger).await;
        assert!(outcome.unwrap().is_processed(), "block {}", block.id());
    }
}

/// The seed case: a reward credited in 100a; 100b replaces it and includes the same
/// transaction again, and drops another.
pub async fn a_reward_in_an_orphaned_block_re_included_by_its_replacement_is_credited_once<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let chain = rewards(64);
    let mut ledger = ChainLedger::default();
    let a = [
        block(99, "99a", "98a", &[]),
        block(100, "100a", "99a", &["reward", "dropped"]),
    ];
    deliver_all::<F>(&chain, &mut conn, &a).await;
    let again = F::process_block(&chain, &mut conn, &a[1], &mut ledger).await;
    assert!(again.unwrap().is_duplicate());

    let b = block(100, "100b", "99a", &["reward", "new"]);
    let outcome = F::process_block(&chain, &mut conn, &b, &mut ledger)
        .await
        .unwrap();

    let BlockOutcome::Processed {
        applied,
        duplicates,
        reorg: Some(reorg),
    } = &outcome
    else {
        panic!("100b replaces 100a: {outcome:?}");
    };
    assert_eq!((*applied, *duplicates), (2, 0));
    assert_eq!(
        (reorg.ancestor, reorg.depth(), reorg.events_reverted),
        (99, 1, 2)
    );
    assert_eq!(reorg.old_head.hash(), "100a");
    assert_eq!(reorg.new_head.hash(), "100b");
    assert_eq!(Ack::of(&Ok::<_, Error>(outcome.clone())), Ack::Ack);
    assert_eq!(net(&mut check, "reward"), 1, "credited exactly once");
    assert_eq!(net(&mut check, "dropped"), 0, "reverted with 100a");
    assert_eq!(net(&mut check, "new"), 1);
    assert_eq!(
        effects(&mut check)["reward"],
        (1, 2),
        "applied, reverted, applied"
    );

    let redelivered = F::process_block(&chain, &mut conn, &b, &mut ledger).await;
    assert!(redelivered.unwrap().is_duplicate());
    assert_eq!(net(&mut check, "reward"), 1);
    let ledger_rows = F::reorgs(&chain, &mut conn).await.unwrap();
    assert_eq!(ledger_rows.len(), 1);
    assert_eq!(
        (
            ledger_rows[0].events_reverted,
            ledger_rows[0].events_reapplied
        ),
        (2, 1),
        "the reward came back on the new branch"
    );
    let position = F::chain_position(&chain, &mut conn).await.unwrap().unwrap();
    assert_eq!(position.head, BlockId::clone(b.id()));
}

/// Every row of the chain's fork ledger, in id order: `(old head, new head, events reverted,
/// events re-applied)`.
async fn ledger_rows<F: Flavour>(
    chain: &Chain,
    conn: &mut F::Conn,
) -> Vec<(String, String, u64, u64)> {
    F::reorgs(chain, conn)
        .await
        .unwrap()
        .into_iter()
        .map(|reorg| {
            (
                reorg.old_head.hash().to_owned(),
                reorg.new_head.hash().to_owned(),
                reorg.events_reverted,
                reorg.events_reapplied,
            )
        })
        .collect()
}

/// Reorg A reverts t1, t2 and t3; t3 comes back; reorg B reverts t3 again, and x. The block
/// that found B includes t2 (A's) and t3 (B's); a later block includes t1 (A's) and x (B's).
pub async fn each_re_applied_event_is_credited_to_the_reorg_that_reverted_it_however_late<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let chain = rewards(64);
    let mut ledger = ChainLedger::default();
    let row = |old: &str, new: &str, reverted, reapplied| {
        (old.to_owned(), new.to_owned(), reverted, reapplied)
    };
    deliver_all::<F>(
        &chain,
        &mut conn,
        &[
            block(99, "99a", "98a", &[]),
            block(100, "100a", "99a", &["t1", "t2"]),
            block(101, "101a", "100a", &["t3"]),
        ],
    )
    .await;

    let found_a = F::process_block(
        &chain,
        &mut conn,
        &block(100, "100b", "99a", &[]),
        &mut ledger,
    )
    .await
    .unwrap();
    let a = found_a.reorg().expect("100b replaced 100a").clone();
    assert_eq!((a.events_reverted, a.events_reapplied), (3, 0));
    deliver_all::<F>(
        &chain,
        &mut conn,
        &[block(101, "101b", "100b", &["t3", "x"])],
    )
    .await;
    assert_eq!(
        ledger_rows::<F>(&chain, &mut conn).await,
        [row("101a", "100b", 3, 1)],
        "t3 back, on A"
    );

    let found_b = F::process_block(
        &chain,
        &mut conn,
        &block(101, "101c", "100b", &["t2", "t3"]),
        &mut ledger,
    )
    .await
    .unwrap();
    assert_eq!(
        ledger_rows::<F>(&chain, &mut conn).await,
        [row("101a", "100b", 3, 2), row("101b", "101c", 2, 1)],
        "t2 back, on A; t3 back, on B"
    );
    let b = found_b.reorg().expect("101c replaced 101b").clone();
    assert_eq!(
        (b.events_reverted, b.events_reapplied),
        (2, 1),
        "B reverted t3 and x; its block brought back t3, and t2, which is A's"
    );

    // The late re-inclusion: t1 was reverted by A, two reorgs ago; x by B.
    deliver_all::<F>(
        &chain,
        &mut conn,
        &[block(102, "102c", "101c", &["t1", "x"])],
    )
    .await;
    assert_eq!(
        ledger_rows::<F>(&chain, &mut conn).await,
        [row("101a", "100b", 3, 3), row("101b", "101c", 2, 2)],
        "every event each reorg reverted took effect again, each counted once, in its own reorg"
    );
    let ids: Vec<i64> = F::reorgs(&chain, &mut conn)
        .await
        .unwrap()
        .iter()
        .map(|reorg| reorg.id)
        .collect();
    assert_eq!(ids, [a.id, b.id]);
    for id in ["t1", "t2", "t3", "x"] {
        assert_eq!(net(&mut check, id), 1, "{id} in effect once");
    }
}

pub async fn a_fork_reaching_the_finalized_height_is_refused_and_commits_nothing<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    // Depth 2: with the head at 5, height 3 is final.
    let chain = rewards(2);
    deliver_all::<F>(&chain, &mut conn, &branch("a", 0, 5)).await;
    let before = effects(&mut check);

    let mut ledger = ChainLedger::naming(BTreeMap::from([(3, "3b".to_owned())]));
    let replaces_final = block(3, "3b", "2a", &["e3b"]);
    let forks_below_final = block(4, "4b", "3b", &["e4b"]);
    for deep in [&replaces_final, &forks_below_final] {
        let refused = F::process_block(&chain, &mut conn, deep, &mut ledger).await;
        match &refused {
            Err(Error::Chain(chain::Refused::ReorgBeyondFinality {
                height, finalized, ..
            })) => assert_eq!((*height, *finalized), (deep.id().height(), 3)),
            other => panic!("block {} must be refused: {other:?}", deep.id()),
        }
        assert_eq!(Ack::of(&refused), Ack::Redeliver);
    }

    assert_eq!(
        effects(&mut check),
        before,
        "nothing reverted, nothing applied"
    );
    assert!(F::reorgs(&chain, &mut conn).await.unwrap().is_empty());
    let position = F::chain_position(&chain, &mut conn).await.unwrap().unwrap();
    assert_eq!((position.head.hash(), position.finalized), ("5a", Some(3)));
    // A fork from the finalized block itself is as deep as the stream accepts.
    let at_depth = block(4, "4c", "3a", &["e4c"]);
    let outcome = F::process_block(&chain, &mut conn, &at_depth, &mut ledger).await;
    assert_eq!(outcome.unwrap().reorg().map(Reorg::depth), Some(2));
}

pub async fn a_block_forking_below_its_parent_rewinds_to_the_ancestor_its_branch_names<
    F: Flavour,
>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let chain = rewards(64);
    deliver_all::<F>(&chain, &mut conn, &branch("a", 0, 4)).await;
    let b = branch("b", 3, 5);
    // 3b's parent is 2a: the new branch forks above height 2.
    let new_head = &b[2];

    let mut unnamed = ChainLedger::default();
    let unknown = F::process_block(&chain, &mut conn, new_head, &mut unnamed).await;
    assert!(
        matches!(
            unknown,
            Err(Error::Chain(chain::Refused::UnknownAncestor {
                height: 4,
                ..
            }))
        ),
        "{unknown:?}"
    );
    let far_ahead = block(7, "7b", "6b", &[]);
    let ahead = F::process_block(&chain, &mut conn, &far_ahead, &mut unnamed);
    assert!(
        matches!(
            ahead.await,
            Err(Error::Chain(chain::Refused::MissingBlocks {
                head: 4,
                height: 7,
                ..
            }))
        ),
        "a block above the head plus one waits for the blocks between"
    );
    assert_eq!(net(&mut check, "e4a"), 1, "nothing committed");

    let named: BTreeMap<u64, String> = [(5, "5b"), (4, "4b"), (3, "3b"), (2, "2a")]
        .into_iter()
        .map(|(height, hash)| (height, hash.to_owned()))
        .collect();
    let mut ledger = ChainLedger::naming(named);
    let outcome = F::process_block(
        &chain,
        &mut conn,
        &block(5, "5b", "4b", &["e5b"]),
        &mut ledger,
    )
    .await
    .unwrap();
    let BlockOutcome::Rewound { reorg } = &outcome else {
        panic!("the stream rewinds to 2a: {outcome:?}");
    };
    assert_eq!(
        (reorg.ancestor, reorg.depth(), reorg.events_reverted),
        (2, 2, 2)
    );
    assert_eq!(outcome.applied(), 0);
    assert_eq!((net(&mut check, "e3a"), net(&mut check, "e4a")), (0, 0));
    assert_eq!(
        F::chain_position(&chain, &mut conn)
            .await
            .unwrap()
            .unwrap()
            .head
            .hash(),
        "2a"
    );

    deliver_all::<F>(&chain, &mut conn, &b).await;
    for id in ["e0a", "e1a", "e2a", "e3b", "e4b", "e5b"] {
        assert_eq!(net(&mut check, id), 1, "{id} is on the canonical chain");
    }
    assert_eq!(F::reorgs(&chain, &mut conn).await.unwrap().len(), 1);
}

pub async fn final_blocks_only_waits_for_finality_and_refuses_every_fork<F: Flavour>() {
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let chain = rewards(3).final_blocks_only();
    let mut ledger = ChainLedger::default();
    let first = block(0, "0a", "genesis", &["e0a"]);

    for tip in [None, Some(2)] {
        let early = match tip {
            Some(tip) => first.clone().tip(tip),
            None => first.clone(),
        };
        let waiting = F::process_block(&chain, &mut conn, &early, &mut ledger).await;
        assert!(
            matches!(
                waiting,
                Err(Error::Chain(chain::Refused::BlockNotFinal {
                    final_at: 3,
                    ..
                }))
            ),
            "{waiting:?}"
        );
        assert_eq!(Ack::of(&waiting), Ack::Redeliver);
    }
    assert_eq!(net(&mut check, "e0a"), 0);

    let final_now = first.clone().tip(3);
    let final_now = F::process_block(&chain, &mut conn, &final_now, &mut ledger);
    assert!(final_now.await.unwrap().is_processed());
    let next = block(1, "1a", "0a", &["e1a"]).tip(9);
    assert!(F::process_block(&chain, &mut conn, &next, &mut ledger)
        .await
        .unwrap()
        .is_processed());
    let fork = block(1, "1b", "0a", &["e1b"]).tip(9);
    let refused = F::process_block(&chain, &mut conn, &fork, &mut ledger).await;
    assert!(
        matches!(
            refused,
            Err(Error::Chain(chain::Refused::ReorgBeyondFinality { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!((net(&mut check, "e1a"), net(&mut check, "e1b")), (1, 0));
}

/// A side effect outside the database (a claim) made for an event a reorg later orphans.
pub fn a_side_effect_claimed_for_an_orphaned_event_is_listed_for_ops<B: Backend>() {
    let (_db, mut conn) = setup::<B>();
    let chain = rewards(64);
    let mut ledger = ChainLedger::default();
    for block in [
        block(0, "0a", "g", &[]),
        block(1, "1a", "0a", &["payout", "quiet"]),
    ] {
        assert!(chain
            .process(&mut conn, &block, &mut ledger)
            .unwrap()
            .is_processed());
    }
    let claims = Inbox::new("rewards").unwrap().claims();
    let paid = claims.run(&mut conn, "payout", |_claim| {
        Ok::<_, Error>("sent".to_owned())
    });
    assert!(paid.is_ok(), "{paid:?}");

    let outcome = chain
        .process(&mut conn, &block(1, "1b", "0a", &[]), &mut ledger)
        .unwrap();

    let reorg = outcome.reorg().expect("1b replaces 1a").clone();
    let orphaned = chain.reorgs().orphaned_effects(&mut conn).unwrap();
    assert_eq!(orphaned.len(), 1, "{orphaned:?}");
    assert_eq!(orphaned[0].event_id, "payout");
    assert_eq!(orphaned[0].reorg, reorg.id);
    assert_eq!(orphaned[0].claim_state, ClaimState::Completed);
    assert_eq!(orphaned[0].block.hash(), "1a");
}

/// A reorg's undo, killed half-way: the child reverts one of 2a's events and is killed before
/// the transaction commits. The old branch stands whole, and the redelivery finishes it.
pub fn a_crash_in_the_middle_of_a_reorgs_undo_leaves_the_old_branch_and_the_redelivery_finishes_it<
    B: Backend,
>() {
    const HALF_UNDONE: &str = "one of 2a's events reverted, not committed";
    const TEST: &str =
        "a_crash_in_the_middle_of_a_reorgs_undo_leaves_the_old_branch_and_the_redelivery_finishes_it";
    let chain = rewards(64);
    let replacement = block(2, "2b", "1a", &["t2", "t4"]);

    if let Ok(url) = std::env::var(CRASH_CHILD) {
        /// Reverts like the ledger, then waits to be killed.
        struct Killed(ChainLedger);
        impl<C: TestConn> ChainHandler<C> for Killed {
            type Event = ();
            type Error = Error;
            fn apply(
                &mut self,
                tx: &mut C,
                b: &BlockId,
                id: &EventId,
                e: &(),
            ) -> Result<(), Error> {
                self.0.apply(tx, b, id, e)
            }
            fn revert(&mut self, tx: &mut C, b: &BlockId, id: &EventId) -> Result<(), Error> {
                self.0.revert(tx, b, id)?;
                println!("{HALF_UNDONE}");
                thread::sleep(2 * CHILD_STARTS_WITHIN);
                Ok(())
            }
        }
        let mut conn = B::connect_to(&url);
        let _ = chain.process(&mut conn, &replacement, &mut Killed(ChainLedger::default()));
        return;
    }

    let (db, mut conn) = setup::<B>();
    let a = [
        block(0, "0a", "g", &["t0"]),
        block(1, "1a", "0a", &["t1"]),
        block(2, "2a", "1a", &["t2", "t3"]),
    ];
    let mut ledger = ChainLedger::default();
    for block in &a {
        assert!(chain
            .process(&mut conn, block, &mut ledger)
            .unwrap()
            .is_processed());
    }
    let mut child = ChildTest::spawn(TEST, &[(CRASH_CHILD, db.url())]);
    child.wait_for(HALF_UNDONE, CHILD_STARTS_WITHIN);
    child.kill();

    let before: BTreeMap<_, _> = ["t0", "t1", "t2", "t3"]
        .into_iter()
        .map(|id| (id.to_owned(), (1, 1)))
        .collect();
    assert_eq!(
        effects(&mut conn),
        before,
        "the old branch, whole: nothing reverted"
    );
    assert!(chain.reorgs().list(&mut conn, 0, 10).unwrap().is_empty());
    assert_eq!(
        chain.position(&mut conn).unwrap().unwrap().head.hash(),
        "2a"
    );

    let outcome = chain.process(&mut conn, &replacement, &mut ledger).unwrap();
    assert_eq!(outcome.reorg().map(|r| r.events_reverted), Some(2));
    let after = effects(&mut conn);
    let nets: Vec<(&str, i64)> = after
        .iter()
        .map(|(id, (net, _))| (id.as_str(), *net))
        .collect();
    assert_eq!(
        nets,
        [("t0", 1), ("t1", 1), ("t2", 1), ("t3", 0), ("t4", 1)]
    );
}

/// The model of the property test: the canonical chain as the generator grows and reorganises
/// it, and the branch the consumer has processed.
#[derive(Debug, Default)]
struct Model {
    /// What this chain's event ids start with: the chains share one consumer.
    prefix: String,
    /// The canonical chain, by height: hash and events.
    truth: Vec<(String, Vec<String>)>,
    /// The branch the consumer processed, by height: a prefix of `truth`, or stale above
    /// the ancestor of a reorg it has not been delivered yet.
    view: Vec<(String, Vec<String>)>,
    /// The height no reorg may reach at or below, as the chain cursor computes it.
    finalized: Option<usize>,
    next_hash: usize,
    next_event: usize,
    /// Events the canonical chain dropped: what a later block may include again.
    dropped: Vec<String>,
    /// Events whose effect a reorg reverted and no block applied again since.
    reverted_ids: HashSet<String>,
    reorgs: usize,
    reverted: usize,
    reapplied: usize,
}

/// What the generator counted over every chain.
#[derive(Debug, Default)]
struct Counts {
    chains: usize,
    blocks: usize,
    reorgs: usize,
    reverted: usize,
    reapplied: usize,
    rewound: usize,
    refused: usize,
    duplicates: usize,
}

/// The property test's finality depth.
const DEPTH: usize = 4;

impl Model {
    fn hash(&mut self, height: usize) -> String {
        self.next_hash += 1;
        format!("{height}-{}", self.next_hash)
    }

    /// New events for a block: fresh ones, and now and then one the chain dropped.
    fn events(&mut self, rng: &mut fastrand::Rng) -> Vec<String> {
        let mut events = Vec::new();
        for _ in 0..rng.usize(0..4) {
            if !self.dropped.is_empty() && rng.bool() {
                events.push(self.dropped.swap_remove(rng.usize(..self.dropped.len())));
            } else {
                self.next_event += 1;
                events.push(format!("{}e{}", self.prefix, self.next_event));
            }
        }
        events
    }

    /// Grows the canonical chain by one block.
    fn grow(&mut self, rng: &mut fastrand::Rng) {
        let height = self.truth.len();
        let hash = self.hash(height);
        let events = self.events(rng);
        self.truth.push((hash, events));
    }

    /// Replaces the canonical chain above `ancestor` with `len` new blocks, which include
    /// some of the orphaned events again.
    fn reorganise(&mut self, ancestor: usize, len: usize, rng: &mut fastrand::Rng) {
        let orphaned: Vec<String> = self
            .truth
            .drain(ancestor + 1..)
            .flat_map(|(_, e)| e)
            .collect();
        self.dropped.extend(orphaned);
        for _ in 0..len {
            self.grow(rng);
        }
    }

    fn block(&self, height: usize) -> Block<()> {
        let (hash, events) = &self.truth[height];
        let parent = height
            .checked_sub(1)
            .map_or("genesis", |p| self.truth[p].0.as_str());
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        block(height as u64, hash, parent, &events)
    }

    /// The new branch's hashes, for the handler's walk.
    fn branch(&self) -> BTreeMap<u64, String> {
        self.truth
            .iter()
            .enumerate()
            .map(|(height, (hash, _))| (height as u64, hash.clone()))
            .collect()
    }

    /// What delivering the canonical block at `height` does to the consumer's view: its
    /// expected outcome, as `(kind, reverted)`.
    fn deliver(&mut self, height: usize) -> (&'static str, usize) {
        let (hash, events) = self.truth[height].clone();
        if self.view.get(height).is_some_and(|(h, _)| *h == hash) {
            return ("duplicate", 0);
        }
        // The last block the view shares with the canonical chain.
        let shared = (0..self.view.len().min(height))
            .rev()
            .find(|&h| self.view[h].0 == self.truth[h].0);
        let linked = height == 0 || shared == Some(height - 1);
        let ancestor = if linked {
            height.checked_sub(1)
        } else {
            shared
        };
        let mut reverted = 0;
        if ancestor.map_or(0, |a| a + 1) < self.view.len() {
            let keep = ancestor.map_or(0, |a| a + 1);
            for (_, orphaned) in self.view.drain(keep..) {
                reverted += orphaned.len();
                self.reverted_ids.extend(orphaned);
            }
            self.reorgs += 1;
            self.reverted += reverted;
        }
        if !linked {
            return ("rewound", reverted);
        }
        let again = events
            .iter()
            .filter(|id| self.reverted_ids.remove(*id))
            .count();
        self.reapplied += again;
        self.view.push((hash, events));
        let head = self.view.len() - 1;
        self.finalized = self.finalized.max(head.checked_sub(DEPTH));
        ("processed", reverted)
    }

    /// Each event's expected net effect: 1 on the consumer's branch, 0 elsewhere.
    fn expected(&self, every: &HashSet<String>) -> BTreeMap<String, i64> {
        let on_view: HashSet<&String> = self.view.iter().flat_map(|(_, e)| e).collect();
        every
            .iter()
            .map(|id| (id.clone(), i64::from(on_view.contains(id))))
            .collect()
    }
}

/// Random chains with reorgs of random depth, reorgs inside reorgs (a new branch reorganised
/// again before it was all delivered), events re-included or dropped, blocks redelivered,
/// and forks too deep to accept: after every delivery each event on the consumer's branch has
/// exactly one effect and every other none, and the ledger lists every reorg.
pub async fn random_chains_with_reorgs_settle_to_one_effect_per_canonical_event<F: Flavour>() {
    const CHAINS: u64 = 40;
    const STEPS: usize = 60;
    let (_db, mut check, mut conn) = setup_flavour::<F>().await;
    let mut counts = Counts::default();
    for seed in 0..CHAINS {
        let mut walk = Walk::new(seed);
        walk.model.grow(&mut walk.rng);
        for step in 0..STEPS {
            let tip = walk.model.truth.len() - 1;
            let mut ledger = ChainLedger::naming(walk.model.branch());
            let at = format!("seed {seed} step {step}");
            match walk.rng.usize(0..10) {
                0 | 1 if tip > 0 => walk.reorganise(),
                2 if !walk.model.view.is_empty() => {
                    // A block the consumer has, redelivered.
                    let height = walk.rng.usize(..walk.model.view.len());
                    let block = walk.model.block_of_view(height);
                    let outcome = F::process_block(&walk.chain, &mut conn, &block, &mut ledger);
                    assert!(outcome.await.unwrap().is_duplicate(), "{at}");
                    counts.duplicates += 1;
                }
                3 if walk.model.fork_of_final().is_some() => {
                    // A fork of a final block: refused, nothing changes.
                    let deep = walk.model.fork_of_final().unwrap();
                    let before = effects(&mut check);
                    let refused = F::process_block(&walk.chain, &mut conn, &deep, &mut ledger);
                    let refused = refused.await;
                    assert!(
                        matches!(
                            refused,
                            Err(Error::Chain(chain::Refused::ReorgBeyondFinality { .. }))
                        ),
                        "{at}: {refused:?}"
                    );
                    assert_eq!(effects(&mut check), before, "{at}");
                    counts.refused += 1;
                }
                _ => {
                    walk.deliver::<F>(&mut conn, &mut ledger, &mut counts, &at)
                        .await;
                    // The property, after every delivery.
                    let got: BTreeMap<String, i64> = effects(&mut check)
                        .into_iter()
                        .filter(|(id, _)| walk.every.contains(id))
                        .map(|(id, (net, _))| (id, net))
                        .collect();
                    let mut expected = walk.model.expected(&walk.every);
                    expected.retain(|id, net| *net != 0 || got.contains_key(id));
                    assert_eq!(got, expected, "{at}: net effect per event");
                }
            }
        }
        let model = &walk.model;
        let listed = F::reorgs(&walk.chain, &mut conn).await.unwrap();
        assert_eq!(
            listed.len(),
            model.reorgs,
            "seed {seed}: every reorg in the ledger"
        );
        let reverted: usize = listed.iter().map(|r| count(r.events_reverted)).sum();
        assert_eq!(reverted, model.reverted, "seed {seed}");
        let reapplied: usize = listed.iter().map(|r| count(r.events_reapplied)).sum();
        assert_eq!(reapplied, model.reapplied, "seed {seed}");
        counts.chains += 1;
        counts.reorgs += model.reorgs;
        counts.reverted += model.reverted;
        counts.reapplied += model.reapplied;
    }
    println!("chain model: {counts:?}");
    assert!(
        counts.reorgs > counts.chains,
        "the generator reorganises: {counts:?}"
    );
    assert!(
        counts.reapplied > 0 && counts.rewound > 0 && counts.refused > 0,
        "every path taken: {counts:?}"
    );
}

/// A stored count or height as an index.
fn count(n: u64) -> usize {
    usize::try_from(n).unwrap()
}

/// One chain of the property test: its cursor, its model, and the consumer's progress.
struct Walk {
    chain: Chain,
    rng: fastrand::Rng,
    model: Model,
    /// Every event the consumer was delivered.
    every: HashSet<String>,
    /// The consumer's progress along the canonical chain: the next height to deliver.
    next: usize,
}

impl Walk {
    fn new(seed: u64) -> Self {
        Self {
            chain: Inbox::new("indexer")
                .unwrap()
                .chain(&format!("chain-{seed}"), DEPTH as u64)
                .unwrap(),
            rng: fastrand::Rng::with_seed(seed),
            model: Model {
                prefix: format!("s{seed}-"),
                ..Model::default()
            },
            every: HashSet::new(),
            next: 0,
        }
    }

    /// Reorganises the chain above a random ancestor, within the finality depth of the
    /// consumer's head, with a branch of a random length; the consumer goes on from the fork
    /// point, or from the block above its head.
    fn reorganise(&mut self) {
        let model = &mut self.model;
        let tip = model.truth.len() - 1;
        let lowest = model.finalized.unwrap_or(0).max(tip.saturating_sub(DEPTH));
        let ancestor = self.rng.usize(lowest..tip);
        model.reorganise(ancestor, self.rng.usize(1..=DEPTH), &mut self.rng);
        self.next = if self.rng.bool() {
            (ancestor + 1).min(model.view.len())
        } else {
            self.next.min(model.truth.len() - 1)
        };
    }

    /// Delivers the next canonical block, and checks its outcome against the model's.
    async fn deliver<F: Flavour>(
        &mut self,
        conn: &mut F::Conn,
        ledger: &mut ChainLedger,
        counts: &mut Counts,
        at: &str,
    ) {
        if self.next >= self.model.truth.len() {
            self.model.grow(&mut self.rng);
        }
        let height = self.next;
        let block = self.model.block(height);
        self.every
            .extend(self.model.truth[height].1.iter().cloned());
        let (kind, reverted) = self.model.deliver(height);
        let outcome = F::process_block(&self.chain, conn, &block, ledger)
            .await
            .unwrap_or_else(|e| panic!("{at}, block {}: {e}", block.id()));
        let got = match &outcome {
            BlockOutcome::Processed { .. } => "processed",
            BlockOutcome::Duplicate => "duplicate",
            BlockOutcome::Rewound { .. } => "rewound",
            _ => "other",
        };
        assert_eq!(got, kind, "{at}, block {}: {outcome:?}", block.id());
        let got_reverted = outcome.reorg().map_or(0, |r| count(r.events_reverted));
        assert_eq!(got_reverted, reverted, "{at}");
        counts.rewound += usize::from(kind == "rewound");
        counts.blocks += usize::from(kind == "processed");
        self.next = match outcome {
            BlockOutcome::Rewound { reorg } => count(reorg.ancestor) + 1,
            _ => height + 1,
        };
    }
}

impl Model {
    /// A fork of the consumer's finalized block, when it has one below its head: a block the
    /// stream must refuse.
    fn fork_of_final(&self) -> Option<Block<()>> {
        let finalized = self.finalized.filter(|f| *f + 1 < self.view.len())?;
        let parent = finalized
            .checked_sub(1)
            .map_or("genesis", |p| self.view[p].0.as_str());
        Some(block(finalized as u64, "too-deep", parent, &["never"]))
    }

    /// The block of the consumer's view at `height`, as it was delivered.
    fn block_of_view(&self, height: usize) -> Block<()> {
        let (hash, events) = &self.view[height];
        let parent = height
            .checked_sub(1)
            .map_or("genesis", |p| self.view[p].0.as_str());
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        block(height as u64, hash, parent, &events)
    }
}
