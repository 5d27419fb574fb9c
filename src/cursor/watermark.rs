//! A cursor's arithmetic, apart from I/O: what one sequence means against a stream's watermark
//! and open gaps, and which ledger rows that changes. [`crate::cursor`] loads a [`Stream`],
//! offers sequences to it and writes back the [`Change`]s; an async flavour would do the same.
//!
//! The model: every sequence at or below `high` is settled except those inside an open gap.
//! The watermark is the last sequence before the first gap that may still fill (cause
//! [`GapCause::Skipped`]), or `high` when there is none; evicted gaps never fill, so they do not
//! hold it back. Sequences are `i64`, as stored; a fresh cursor may start below zero (Kafka's
//! offset 0 puts the watermark at -1).

use chrono::{DateTime, Utc};

use crate::cursor::state::GapCause;

/// A stored sequence as the API hands it out: `u64`, as sequences go in. Gaps and `high` are
/// never below zero, since only `u64` sequences are stored; a watermark is, one below a stream
/// that starts at 0, and callers see that as no watermark ([`crate::cursor::Position::watermark`]).
pub(crate) fn unstored(sequence: i64) -> u64 {
    u64::try_from(sequence).unwrap_or(0)
}

/// A gap that is open: its sequences are missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenGap {
    /// Its ledger id; `None` until [`Change::Insert`] is written.
    pub(crate) id: Option<i64>,
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) cause: GapCause,
    pub(crate) detected_at: DateTime<Utc>,
}

impl OpenGap {
    fn contains(&self, sequence: i64) -> bool {
        (self.first..=self.last).contains(&sequence)
    }
}

/// A change to the gap ledger, to write in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// A new row: a gap this offer found (`detected`), or the upper part of a split one.
    Insert { gap: OpenGap, detected: bool },
    /// An open row's range or cause changed.
    Update(OpenGap),
    /// Late arrivals filled the row: it is closed.
    Filled { id: i64 },
}

/// What a sequence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Settled before: skip the effect.
    Duplicate,
    /// Not settled yet: run the effect. `filled` when it arrived late, inside an open gap.
    New { filled: bool },
}

/// Why a sequence cannot be offered; nothing may be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The caller said the broker's first available sequence is above this one.
    BeforeFirstAvailable { first_available: i64 },
    /// Accepting it would open one gap more than the bound allows.
    TooManyOpenGaps { open: usize },
}

/// One `(consumer, stream)`: its watermark, highest settled sequence and open gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stream {
    /// `None` before the first sequence.
    high: Option<i64>,
    /// Sorted by `first`, disjoint, all at or below `high`.
    open: Vec<OpenGap>,
}

impl Stream {
    /// A stream as stored: its highest settled sequence and its open gaps.
    pub(crate) fn new(
        high: Option<i64>,
        open: impl IntoIterator<Item = impl Into<OpenGap>>,
    ) -> Self {
        let mut open: Vec<OpenGap> = open.into_iter().map(Into::into).collect();
        open.sort_by_key(|gap| gap.first);
        Self { high, open }
    }

    /// The highest settled sequence.
    pub(crate) fn high(&self) -> Option<i64> {
        self.high
    }

    /// Every sequence at or below it is settled (or given up by an eviction).
    pub(crate) fn watermark(&self) -> Option<i64> {
        self.open
            .iter()
            .find(|gap| gap.cause == GapCause::Skipped)
            .map_or(self.high, |gap| Some(gap.first - 1))
    }

    /// The open gaps, in order.
    #[cfg(test)]
    pub(crate) fn open_gaps(&self) -> &[OpenGap] {
        &self.open
    }

    /// Offers `sequence`; `first_available` is the broker's first available sequence, when
    /// the caller knows it. Gaps that may still fill are bounded by `max_open`. On `Ok`, the
    /// stream has taken the sequence in and `changes` holds what to write; on `Err` the
    /// stream is unusable (the transaction rolls back, and with it what was offered).
    pub(crate) fn offer(
        &mut self,
        sequence: i64,
        first_available: Option<i64>,
        max_open: usize,
        now: DateTime<Utc>,
        changes: &mut Vec<Change>,
    ) -> Result<Verdict, Refusal> {
        if let Some(first_available) = first_available.filter(|&first| sequence < first) {
            return Err(Refusal::BeforeFirstAvailable { first_available });
        }
        let high = match self.high {
            Some(high) => high,
            // A fresh cursor starts where the broker's log does, or at this sequence.
            None => first_available.unwrap_or(sequence) - 1,
        };
        self.high = Some(high);
        if let Some(first_available) = first_available {
            self.evict_below(first_available, now, changes);
        }
        if let Some(index) = self.open.iter().position(|gap| gap.contains(sequence)) {
            self.fill(index, sequence, changes);
            return Ok(Verdict::New { filled: true });
        }
        let high = self.high.unwrap_or(high);
        if sequence <= high {
            return Ok(Verdict::Duplicate);
        }
        if sequence > high + 1 {
            let open = self.skipped();
            if open >= max_open {
                return Err(Refusal::TooManyOpenGaps { open });
            }
            self.open_gap(high + 1, sequence - 1, GapCause::Skipped, now, changes);
        }
        self.high = Some(sequence);
        Ok(Verdict::New { filled: false })
    }

    /// Gives up the open gap `id` (ops resolved it): the watermark may move past it.
    /// `false` when no open gap has that id.
    pub(crate) fn resolve(&mut self, id: i64) -> bool {
        let before = self.open.len();
        self.open.retain(|gap| gap.id != Some(id));
        self.open.len() < before
    }

    /// Records the ledger id of the gap [`Change::Insert`] wrote.
    pub(crate) fn inserted(&mut self, first: i64, id: i64) {
        if let Some(gap) = self.open.iter_mut().find(|gap| gap.first == first) {
            gap.id = Some(id);
        }
    }

    /// Gaps that may still fill.
    fn skipped(&self) -> usize {
        self.open
            .iter()
            .filter(|gap| gap.cause == GapCause::Skipped)
            .count()
    }

    /// Everything below `first_available` that is still missing will never come: open gaps
    /// there turn evicted (split at `first_available`), and so does the range between `high`
    /// and it.
    fn evict_below(&mut self, first_available: i64, now: DateTime<Utc>, changes: &mut Vec<Change>) {
        let mut index = 0;
        while let Some(gap) = self.open.get(index).cloned() {
            index += 1;
            if gap.first >= first_available || gap.cause == GapCause::Evicted {
                continue;
            }
            let evicted = OpenGap {
                last: gap.last.min(first_available - 1),
                cause: GapCause::Evicted,
                ..gap.clone()
            };
            self.open[index - 1] = evicted.clone();
            Self::record_update(evicted, gap.first, changes);
            if gap.last >= first_available {
                let rest = OpenGap {
                    id: None,
                    first: first_available,
                    ..gap
                };
                self.open.insert(index, rest.clone());
                changes.push(Change::Insert {
                    gap: rest,
                    detected: false,
                });
                index += 1;
            }
        }
        let high = self.high.unwrap_or(first_available - 1);
        if high < first_available - 1 {
            self.open_gap(
                high + 1,
                first_available - 1,
                GapCause::Evicted,
                now,
                changes,
            );
            self.high = Some(first_available - 1);
        }
    }

    /// Takes `sequence` out of the open gap at `index`: shrinks, splits or closes it.
    fn fill(&mut self, index: usize, sequence: i64, changes: &mut Vec<Change>) {
        let gap = self.open[index].clone();
        if gap.first == gap.last {
            self.open.remove(index);
            if let Some(id) = gap.id {
                changes.push(Change::Filled { id });
            } else {
                changes.retain(|change| !matches!(change, Change::Insert { gap: new, .. } if new.first == gap.first));
            }
            return;
        }
        let lower = OpenGap {
            first: if sequence == gap.first {
                sequence + 1
            } else {
                gap.first
            },
            last: if sequence == gap.first {
                gap.last
            } else {
                sequence - 1
            },
            ..gap.clone()
        };
        self.open[index] = lower.clone();
        Self::record_update(lower, gap.first, changes);
        if sequence > gap.first && sequence < gap.last {
            let upper = OpenGap {
                id: None,
                first: sequence + 1,
                ..gap
            };
            self.open.insert(index + 1, upper.clone());
            changes.push(Change::Insert {
                gap: upper,
                detected: false,
            });
        }
    }

    /// An update of a gap that was `first` before; a gap not written yet is changed in its
    /// pending insert instead.
    fn record_update(gap: OpenGap, first: i64, changes: &mut Vec<Change>) {
        if gap.id.is_some() {
            changes.push(Change::Update(gap));
            return;
        }
        for change in changes.iter_mut() {
            if let Change::Insert { gap: pending, .. } = change {
                if pending.first == first {
                    *pending = gap;
                    return;
                }
            }
        }
    }

    fn open_gap(
        &mut self,
        first: i64,
        last: i64,
        cause: GapCause,
        now: DateTime<Utc>,
        changes: &mut Vec<Change>,
    ) {
        let gap = OpenGap {
            id: None,
            first,
            last,
            cause,
            detected_at: now,
        };
        let index = self.open.partition_point(|open| open.first < first);
        self.open.insert(index, gap.clone());
        changes.push(Change::Insert {
            gap,
            detected: true,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    const BOUND: usize = 64;

    fn offer(stream: &mut Stream, sequence: i64) -> Verdict {
        offer_with(stream, sequence, None).unwrap()
    }

    fn offer_with(
        stream: &mut Stream,
        sequence: i64,
        first_available: Option<i64>,
    ) -> Result<Verdict, Refusal> {
        let mut changes = Vec::new();
        let verdict = stream.offer(sequence, first_available, BOUND, Utc::now(), &mut changes);
        // Give new rows ids, as the ledger would.
        for change in &changes {
            if let Change::Insert { gap, .. } = change {
                stream.inserted(gap.first, gap.first * 1000);
            }
        }
        verdict
    }

    fn ranges(stream: &Stream) -> Vec<(i64, i64, GapCause)> {
        stream
            .open_gaps()
            .iter()
            .map(|gap| (gap.first, gap.last, gap.cause))
            .collect()
    }

    const NEW: Verdict = Verdict::New { filled: false };
    const FILLED: Verdict = Verdict::New { filled: true };

    #[test]
    fn the_next_sequence_is_new_and_one_at_or_below_the_watermark_a_duplicate() {
        let mut stream = Stream::new(None, Vec::<OpenGap>::new());
        assert_eq!(offer(&mut stream, 7), NEW);
        assert_eq!(offer(&mut stream, 8), NEW);
        assert_eq!(
            (offer(&mut stream, 8), offer(&mut stream, 3)),
            (Verdict::Duplicate, Verdict::Duplicate)
        );
        assert_eq!((stream.watermark(), stream.high()), (Some(8), Some(8)));
    }

    #[test]
    fn a_jump_opens_a_skipped_gap_that_holds_the_watermark_until_it_fills() {
        let mut stream = Stream::new(Some(4), Vec::<OpenGap>::new());
        assert_eq!(offer(&mut stream, 9), NEW);
        assert_eq!(ranges(&stream), [(5, 8, GapCause::Skipped)]);
        assert_eq!(stream.watermark(), Some(4));
        assert_eq!(offer(&mut stream, 6), FILLED);
        assert_eq!(
            ranges(&stream),
            [(5, 5, GapCause::Skipped), (7, 8, GapCause::Skipped)]
        );
        assert_eq!(offer(&mut stream, 6), Verdict::Duplicate);
        for sequence in [5, 8, 7] {
            assert_eq!(offer(&mut stream, sequence), FILLED);
        }
        assert_eq!((ranges(&stream), stream.watermark()), (vec![], Some(9)));
    }

    #[test]
    fn a_split_gap_changes_the_old_row_and_inserts_the_upper_part() {
        let gap = OpenGap {
            id: Some(1),
            first: 5,
            last: 9,
            cause: GapCause::Skipped,
            detected_at: Utc::now(),
        };
        let mut stream = Stream::new(Some(10), vec![gap.clone()]);
        let mut changes = Vec::new();
        stream
            .offer(7, None, BOUND, Utc::now(), &mut changes)
            .unwrap();
        let [Change::Update(lower), Change::Insert {
            gap: upper,
            detected: false,
        }] = &changes[..]
        else {
            panic!("{changes:?}");
        };
        assert_eq!((lower.id, lower.first, lower.last), (Some(1), 5, 6));
        assert_eq!(
            (upper.id, upper.first, upper.last, upper.detected_at),
            (None, 8, 9, gap.detected_at)
        );
        let mut changes = Vec::new();
        stream
            .offer(5, None, BOUND, Utc::now(), &mut changes)
            .unwrap();
        stream
            .offer(6, None, BOUND, Utc::now(), &mut changes)
            .unwrap();
        assert!(
            matches!(&changes[..], [Change::Update(_), Change::Filled { id: 1 }]),
            "{changes:?}"
        );
    }

    #[test]
    fn a_cursor_behind_the_first_available_sequence_records_an_eviction_and_moves_on() {
        let mut stream = Stream::new(Some(10), Vec::<OpenGap>::new());
        assert_eq!(offer_with(&mut stream, 51, Some(50)), Ok(NEW));
        assert_eq!(
            ranges(&stream),
            [(11, 49, GapCause::Evicted), (50, 50, GapCause::Skipped)]
        );
        assert_eq!(stream.watermark(), Some(49));
        assert_eq!(offer(&mut stream, 50), FILLED);
        assert_eq!(stream.watermark(), Some(51));
    }

    #[test]
    fn an_eviction_splits_a_skipped_gap_at_the_first_available_sequence() {
        let mut stream = Stream::new(Some(1), Vec::<OpenGap>::new());
        offer(&mut stream, 10);
        assert_eq!(offer_with(&mut stream, 11, Some(5)), Ok(NEW));
        assert_eq!(
            ranges(&stream),
            [(2, 4, GapCause::Evicted), (5, 9, GapCause::Skipped)]
        );
        assert_eq!(stream.watermark(), Some(4));
    }

    #[test]
    fn a_fresh_cursor_starts_at_the_first_available_sequence_when_told() {
        let mut stream = Stream::new(None, Vec::<OpenGap>::new());
        assert_eq!(offer_with(&mut stream, 3, Some(0)), Ok(NEW));
        assert_eq!(ranges(&stream), [(0, 2, GapCause::Skipped)]);
        assert_eq!(stream.watermark(), Some(-1));
    }

    #[test]
    fn a_sequence_below_the_first_available_one_is_refused() {
        let mut stream = Stream::new(Some(3), Vec::<OpenGap>::new());
        assert_eq!(
            offer_with(&mut stream, 4, Some(5)),
            Err(Refusal::BeforeFirstAvailable { first_available: 5 })
        );
    }

    #[test]
    fn past_the_bound_a_new_gap_is_refused() {
        let mut stream = Stream::new(Some(0), Vec::<OpenGap>::new());
        let mut changes = Vec::new();
        for i in 1..=3 {
            stream
                .offer(i * 2, None, 3, Utc::now(), &mut changes)
                .unwrap();
        }
        assert_eq!(
            stream.offer(8, None, 3, Utc::now(), &mut changes),
            Err(Refusal::TooManyOpenGaps { open: 3 })
        );
        // Filling needs no new gap, so it is always accepted.
        assert_eq!(
            stream.offer(3, None, 3, Utc::now(), &mut changes),
            Ok(FILLED)
        );
    }

    #[test]
    fn resolving_a_skipped_gap_lets_the_watermark_move_past_it() {
        let mut stream = Stream::new(Some(1), Vec::<OpenGap>::new());
        offer(&mut stream, 5);
        assert_eq!(stream.watermark(), Some(1));
        assert!(stream.resolve(2000));
        assert!(!stream.resolve(2000));
        assert_eq!(stream.watermark(), Some(5));
        assert_eq!(offer(&mut stream, 3), Verdict::Duplicate);
    }

    proptest! {
        /// Any delivery order, with repeats: each sequence is new exactly once, and the open
        /// gaps are exactly the sequences missing below the highest one seen.
        #[test]
        fn every_sequence_is_new_once_and_the_gaps_are_what_is_missing(
            deliveries in proptest::collection::vec(0i64..40, 1..120)
        ) {
            let mut stream = Stream::new(None, Vec::<OpenGap>::new());
            let mut settled = BTreeSet::new();
            let start = deliveries[0];
            for &sequence in &deliveries {
                let verdict = offer_with(&mut stream, sequence, None);
                let expected_new = sequence >= start && !settled.contains(&sequence);
                prop_assert_eq!(verdict, Ok(if expected_new {
                    Verdict::New { filled: sequence < *settled.iter().next_back().unwrap_or(&i64::MIN) }
                } else {
                    Verdict::Duplicate
                }));
                if expected_new {
                    settled.insert(sequence);
                }
                let high = *settled.iter().next_back().unwrap();
                let missing: BTreeSet<i64> = (start..=high).filter(|s| !settled.contains(s)).collect();
                let open: BTreeSet<i64> = stream.open_gaps().iter().flat_map(|gap| gap.first..=gap.last).collect();
                prop_assert_eq!(&open, &missing);
                let watermark = missing.iter().next().map_or(high, |first| first - 1);
                prop_assert_eq!(stream.watermark(), Some(watermark));
            }
        }
    }
}
