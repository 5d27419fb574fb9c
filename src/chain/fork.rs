//! Where a block stands against the branch a chain stream processed, and how far a reorg may
//! reach: pure decisions over what the chain cursor read, below its I/O. Heights are stored
//! as `i64` (`BIGINT`).

/// A block as delivered: its height, hash and parent hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offered<'a> {
    pub(crate) height: i64,
    pub(crate) hash: &'a str,
    pub(crate) parent: &'a str,
}

/// What the stream holds where the block lands: its head, the stored blocks at the block's
/// height and at its parent's (read only when the block does not simply extend the head),
/// and its finalized height.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stored<'a> {
    pub(crate) head: Option<(i64, &'a str)>,
    pub(crate) at_height: Option<&'a str>,
    pub(crate) at_parent: Option<&'a str>,
    pub(crate) finalized: Option<i64>,
}

/// Where the block goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// It extends the head (or is the stream's first block): apply it.
    Extends,
    /// This branch has it already, or it is final and no longer kept: a duplicate.
    Known,
    /// It forks, and its parent is the processed block at `ancestor`: revert above the
    /// ancestor, then apply it.
    ForksAt { ancestor: i64 },
    /// It forks at or below `from`, from a block its parent does not name: find the
    /// ancestor by the new branch's hashes ([`walk`]).
    ForksBelow { from: i64 },
}

/// Why a block cannot be placed. Nothing commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It is above the head plus one.
    Ahead { head: i64 },
    /// It conflicts with a final block, or its fork reaches below the finalized height.
    BeyondFinality,
}

/// Whether the block only needs the head to be placed: it is the stream's first, or extends
/// the head. Anything else reads the stored blocks at its height and its parent's.
pub(crate) fn extends(block: Offered<'_>, head: Option<(i64, &str)>) -> bool {
    head.is_none_or(|(height, hash)| block.height == height + 1 && block.parent == hash)
}

/// Places `block` against what the stream holds.
pub(crate) fn place(block: Offered<'_>, stored: Stored<'_>) -> Result<Placement, Refusal> {
    let Some((head, _)) = stored.head else {
        return Ok(Placement::Extends);
    };
    if extends(block, stored.head) {
        return Ok(Placement::Extends);
    }
    if block.height > head + 1 {
        return Err(Refusal::Ahead { head });
    }
    if block.height <= head {
        match stored.at_height {
            Some(hash) if hash == block.hash => return Ok(Placement::Known),
            // Below what the stream keeps: final, and settled.
            None => return Ok(Placement::Known),
            Some(_) if is_final(block.height, stored.finalized) => {
                return Err(Refusal::BeyondFinality)
            }
            Some(_) => {}
        }
    }
    let ancestor = block.height - 1;
    if stored.at_parent == Some(block.parent) {
        return within_finality(ancestor, stored.finalized)
            .map(|()| Placement::ForksAt { ancestor });
    }
    Ok(Placement::ForksBelow { from: ancestor })
}

/// One step of the walk down to a fork's ancestor, at `height`: the stream's stored block
/// there and the new branch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Both branches have the same block here: the ancestor.
    Ancestor,
    /// They differ: go one height down.
    Down,
}

/// The walk's step at `height`: `None` for a block the stream no longer keeps, or a height
/// at or below the finalized one, which no reorg reaches.
pub(crate) fn walk(
    height: i64,
    stored: Option<&str>,
    new_branch: &str,
    finalized: Option<i64>,
) -> Result<Step, Refusal> {
    match stored {
        Some(hash) if hash == new_branch => {
            within_finality(height, finalized).map(|()| Step::Ancestor)
        }
        Some(_) if !is_final(height, finalized) && height > 0 => Ok(Step::Down),
        _ => Err(Refusal::BeyondFinality),
    }
}

/// A fork whose ancestor is `ancestor` keeps the finalized height.
fn within_finality(ancestor: i64, finalized: Option<i64>) -> Result<(), Refusal> {
    if finalized.is_some_and(|finalized| ancestor < finalized) {
        Err(Refusal::BeyondFinality)
    } else {
        Ok(())
    }
}

fn is_final(height: i64, finalized: Option<i64>) -> bool {
    finalized.is_some_and(|finalized| height <= finalized)
}

/// The finalized height once the head is `head`: `depth` below it, or the chain's own
/// finalized height where the caller gave one (never above the head), and never lower than
/// it was. `None` while the head is less than `depth` above height 0.
pub(crate) fn finalized_after(
    stored: Option<i64>,
    head: i64,
    depth: u64,
    given: Option<i64>,
) -> Option<i64> {
    let by_depth = i64::try_from(depth)
        .ok()
        .and_then(|depth| head.checked_sub(depth))
        .filter(|height| *height >= 0);
    [stored, by_depth, given.map(|given| given.min(head))]
        .into_iter()
        .flatten()
        .max()
}

/// Whether a block is final at the chain's tip `tip`: at least `depth` blocks below it.
pub(crate) fn is_final_at(height: i64, tip: Option<i64>, depth: u64) -> bool {
    let depth = i64::try_from(depth).unwrap_or(i64::MAX);
    tip.is_some_and(|tip| tip.saturating_sub(height) >= depth)
}

/// How often, in heights, a block prunes the stream's block records below its finalized
/// height: one delete per this many blocks, not one per block.
pub(crate) const PRUNE_EVERY: i64 = 16;

/// Whether the block at `height` prunes the final block records.
pub(crate) fn prunes_at(height: i64) -> bool {
    height % PRUNE_EVERY == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<'a>(height: i64, hash: &'a str, parent: &'a str) -> Offered<'a> {
        Offered {
            height,
            hash,
            parent,
        }
    }

    fn stored<'a>(
        head: (i64, &'a str),
        at_height: Option<&'a str>,
        at_parent: Option<&'a str>,
    ) -> Stored<'a> {
        Stored {
            head: Some(head),
            at_height,
            at_parent,
            finalized: Some(90),
        }
    }

    #[test]
    fn the_first_block_and_a_child_of_the_head_extend_the_stream() {
        let fresh = Stored::default();
        assert_eq!(place(block(7, "a", "x"), fresh), Ok(Placement::Extends));
        let head = stored((100, "100a"), None, None);
        assert_eq!(
            place(block(101, "101a", "100a"), head),
            Ok(Placement::Extends)
        );
        assert!(extends(block(101, "101a", "100a"), head.head));
        assert!(!extends(block(101, "101b", "100b"), head.head));
    }

    #[test]
    fn a_block_this_branch_has_is_known_and_a_block_ahead_of_the_head_is_refused() {
        let here = stored((100, "100a"), Some("99a"), Some("98a"));
        assert_eq!(place(block(99, "99a", "98a"), here), Ok(Placement::Known));
        let head = stored((100, "100a"), None, None);
        assert_eq!(
            place(block(102, "102a", "101a"), head),
            Err(Refusal::Ahead { head: 100 })
        );
    }

    #[test]
    fn a_block_replacing_one_whose_parent_is_processed_forks_at_the_parent() {
        let replaced = stored((100, "100a"), Some("100a"), Some("99a"));
        assert_eq!(
            place(block(100, "100b", "99a"), replaced),
            Ok(Placement::ForksAt { ancestor: 99 })
        );
    }

    #[test]
    fn a_block_whose_parent_is_unknown_forks_below_it() {
        let head = stored((100, "100a"), None, Some("100a"));
        assert_eq!(
            place(block(101, "101b", "100b"), head),
            Ok(Placement::ForksBelow { from: 100 })
        );
        let deep = stored((100, "100a"), Some("99a"), Some("98a"));
        assert_eq!(
            place(block(99, "99b", "98b"), deep),
            Ok(Placement::ForksBelow { from: 98 })
        );
    }

    #[test]
    fn a_fork_at_or_below_the_finalized_height_is_refused() {
        // The block at the finalized height itself conflicts.
        let at_final = stored((100, "100a"), Some("90a"), Some("89a"));
        assert_eq!(
            place(block(90, "90b", "89a"), at_final),
            Err(Refusal::BeyondFinality)
        );
        // Its parent is the finalized block: allowed.
        let above = stored((100, "100a"), Some("91a"), Some("90a"));
        assert_eq!(
            place(block(91, "91b", "90a"), above),
            Ok(Placement::ForksAt { ancestor: 90 })
        );
        // A block at a height no longer kept is final and settled.
        let pruned = stored((100, "100a"), None, None);
        assert_eq!(place(block(50, "50x", "49x"), pruned), Ok(Placement::Known));
    }

    #[test]
    fn the_walk_stops_at_the_shared_block_and_never_goes_below_finality() {
        assert_eq!(walk(95, Some("95a"), "95a", Some(90)), Ok(Step::Ancestor));
        assert_eq!(walk(95, Some("95a"), "95b", Some(90)), Ok(Step::Down));
        assert_eq!(walk(90, Some("90a"), "90a", Some(90)), Ok(Step::Ancestor));
        assert_eq!(
            walk(90, Some("90a"), "90b", Some(90)),
            Err(Refusal::BeyondFinality)
        );
        assert_eq!(walk(89, None, "89b", None), Err(Refusal::BeyondFinality));
    }

    #[test]
    fn the_finalized_height_follows_the_head_by_the_depth_and_never_goes_back() {
        assert_eq!(finalized_after(None, 10, 64, None), None);
        assert_eq!(finalized_after(None, 100, 64, None), Some(36));
        assert_eq!(finalized_after(Some(50), 100, 64, None), Some(50));
        assert_eq!(finalized_after(Some(36), 100, 64, Some(80)), Some(80));
        assert_eq!(finalized_after(None, 100, 64, Some(500)), Some(100));
        assert_eq!(finalized_after(None, 100, 0, None), Some(100));
    }

    #[test]
    fn a_block_is_final_once_the_tip_is_depth_blocks_above_it() {
        assert!(!is_final_at(100, None, 6));
        assert!(!is_final_at(100, Some(105), 6));
        assert!(is_final_at(100, Some(106), 6));
        assert!(prunes_at(32) && !prunes_at(33));
    }
}
