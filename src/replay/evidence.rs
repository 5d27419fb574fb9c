//! A replay's reconciliation: the evidence the crate computes (every input's inbox row, the
//! counts, the input digest re-read), the app's reports, and whether they meet the plan's
//! expectation. Pure: the reads are in `mod.rs`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::plan::Expectation;

/// What a replay did with the events it read. They add up: `read` is the sum of the
/// other counts but `suppressed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplayCounts {
    /// Events read from the source, inside the range.
    pub read: u64,
    /// Events whose effect ran in the target.
    pub processed: u64,
    /// Events the target had processed already: nothing ran.
    pub duplicates: u64,
    /// Events whose handler failed.
    pub failed: u64,
    /// Events the target holds dead-lettered: nothing ran.
    pub dead_lettered: u64,
    /// Events the plan's schema interpretation does not read: not delivered.
    pub skipped: u64,
    /// Side effects suppressed: claims that did not call out, enqueues dropped or redirected.
    pub suppressed: u64,
}

impl ReplayCounts {
    /// Whether every event read is counted once: processed, duplicate, failed, dead-lettered
    /// or skipped.
    pub fn add_up(&self) -> bool {
        self.processed + self.duplicates + self.failed + self.dead_lettered + self.skipped
            == self.read
    }

    /// The stored form.
    pub(crate) fn to_document(self) -> String {
        serde_json::to_string(&self).expect("counts always serialize")
    }
}

/// How many of the ids without an inbox row the evidence names.
const NAMED: usize = 20;

/// The app's own comparison of a replay's result, returned by its reconciliation callback:
/// row counts and checksums per key, the isolated target against the live tables, or against
/// a golden copy.
///
/// ```
/// use diesel_inbox::replay::Report;
///
/// let same = Report::compare("points per user", &[("alice", 61)], &[("alice", 61)]);
/// assert!(same.matches);
/// let off = Report::compare("points per user", &[("alice", 61), ("bob", 27)], &[("alice", 60)]);
/// assert!(!off.matches);
/// assert_eq!(off.details, ["alice: expected 61, found 60", "bob: expected 27, found nothing"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    /// What was compared.
    pub name: String,
    /// Whether it matched.
    pub matches: bool,
    /// What differs, one line each; empty when it matched.
    pub details: Vec<String>,
}

impl Report {
    /// A comparison that matched.
    pub fn matching(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            matches: true,
            details: Vec::new(),
        }
    }

    /// A comparison that did not, with what differs.
    pub fn differing(name: &str, details: Vec<String>) -> Self {
        Self {
            name: name.to_owned(),
            matches: false,
            details,
        }
    }

    /// Compares `expected` with `found`, key by key (each sorted or not): a report naming
    /// every key whose value differs or that only one side has.
    pub fn compare<K, V>(name: &str, expected: &[(K, V)], found: &[(K, V)]) -> Self
    where
        K: Ord + std::fmt::Display,
        V: PartialEq + std::fmt::Display,
    {
        let found: std::collections::BTreeMap<&K, &V> = found.iter().map(|(k, v)| (k, v)).collect();
        let expected_map: std::collections::BTreeMap<&K, &V> =
            expected.iter().map(|(k, v)| (k, v)).collect();
        let mut details = Vec::new();
        for (key, value) in &expected_map {
            match found.get(key) {
                Some(seen) if seen == value => {}
                Some(seen) => details.push(format!("{key}: expected {value}, found {seen}")),
                None => details.push(format!("{key}: expected {value}, found nothing")),
            }
        }
        for (key, value) in &found {
            if !expected_map.contains_key(key) {
                details.push(format!("{key}: expected nothing, found {value}"));
            }
        }
        if details.is_empty() {
            Self::matching(name)
        } else {
            Self::differing(name, details)
        }
    }
}

/// What a reconciliation found: [`Replays::reconcile`](super::Replays::reconcile). The replay
/// is accepted without an override only when it [`matches`](Self::matches).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Evidence {
    /// The events the range holds now, re-read from the source.
    pub reread: u64,
    /// The input digest of that re-read.
    pub reread_digest: String,
    /// The input digest the replay computed as it ran.
    pub recorded_digest: String,
    /// How many events the plan reads (not skipped) have no row in the target's inbox.
    pub without_inbox_row: u64,
    /// The first of them.
    pub without_inbox_row_ids: Vec<String>,
    /// The replay's counts.
    pub counts: ReplayCounts,
    /// What the plan expected.
    pub expectation: Expectation,
    /// The app's reports.
    pub reports: Vec<Report>,
    /// Everything that differs from the expectation, one line each: empty when it matches.
    pub differences: Vec<String>,
    /// When it was computed.
    pub at: DateTime<Utc>,
}

impl Evidence {
    /// `true` when nothing differs from the plan's expectation.
    pub fn matches(&self) -> bool {
        self.differences.is_empty()
    }

    /// The stored form.
    pub(crate) fn to_document(&self) -> String {
        serde_json::to_string(self).expect("evidence always serializes")
    }
}

/// What a re-read of the source found.
#[derive(Debug, Default)]
pub(crate) struct Reread {
    pub(crate) events: u64,
    pub(crate) digest: String,
    /// The ids the plan reads that have no row in the target's inbox.
    pub(crate) without_row: Vec<String>,
}

/// Judges a replay's record against its expectation: the evidence, naming what differs.
pub(crate) fn judge(
    counts: ReplayCounts,
    recorded_digest: &str,
    expectation: Expectation,
    reread: Reread,
    reports: Vec<Report>,
    at: DateTime<Utc>,
) -> Evidence {
    let mut differences = Vec::new();
    if reread.events != counts.read {
        differences.push(format!(
            "the source holds {} events in the range now; the replay read {}",
            reread.events, counts.read
        ));
    }
    if reread.digest != recorded_digest {
        differences.push(format!(
            "the input digest re-read from the source ({}) is not the replay's ({recorded_digest}): the source changed under it",
            reread.digest
        ));
    }
    if !counts.add_up() {
        differences.push(format!(
            "the counts do not add up: {} read, but {} processed + {} duplicates + {} failed + {} dead-lettered + {} skipped",
            counts.read, counts.processed, counts.duplicates, counts.failed, counts.dead_lettered, counts.skipped
        ));
    }
    if !reread.without_row.is_empty() {
        let named: Vec<&str> = reread
            .without_row
            .iter()
            .take(NAMED)
            .map(String::as_str)
            .collect();
        differences.push(format!(
            "no row in the target's inbox for {} of the events read: {}{}",
            reread.without_row.len(),
            named.join(", "),
            if reread.without_row.len() > NAMED {
                ", …"
            } else {
                ""
            }
        ));
    }
    match expectation {
        Expectation::AllProcessed => {
            if counts.duplicates + counts.failed + counts.dead_lettered > 0 {
                differences.push(format!(
                    "expected every event to take effect in the target; {} were duplicates, {} failed, {} dead-lettered",
                    counts.duplicates, counts.failed, counts.dead_lettered
                ));
            }
        }
        Expectation::AllDuplicates => {
            if counts.processed + counts.failed > 0 {
                differences.push(format!(
                    "expected only duplicates; {} events took effect and {} failed (see the replay's notes)",
                    counts.processed, counts.failed
                ));
            }
        }
        Expectation::Any => {}
    }
    for report in reports.iter().filter(|report| !report.matches) {
        differences.push(format!("{}: {}", report.name, report.details.join("; ")));
    }
    Evidence {
        reread: reread.events,
        reread_digest: reread.digest,
        recorded_digest: recorded_digest.to_owned(),
        without_inbox_row: reread.without_row.len() as u64,
        without_inbox_row_ids: reread.without_row.into_iter().take(NAMED).collect(),
        counts,
        expectation,
        reports,
        differences,
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(read: u64, processed: u64, duplicates: u64) -> ReplayCounts {
        ReplayCounts {
            read,
            processed,
            duplicates,
            ..ReplayCounts::default()
        }
    }

    fn reread(events: u64, digest: &str) -> Reread {
        Reread {
            events,
            digest: digest.to_owned(),
            without_row: Vec::new(),
        }
    }

    #[test]
    fn a_replay_that_did_what_was_expected_matches() {
        let evidence = judge(
            counts(3, 3, 0),
            "d",
            Expectation::AllProcessed,
            reread(3, "d"),
            vec![],
            Utc::now(),
        );
        assert!(evidence.matches(), "{:?}", evidence.differences);
        let probe = judge(
            counts(3, 0, 3),
            "d",
            Expectation::AllDuplicates,
            reread(3, "d"),
            vec![],
            Utc::now(),
        );
        assert!(probe.matches());
    }

    #[test]
    fn every_difference_is_named() {
        let mut changed = reread(4, "e");
        changed.without_row = vec!["evt-9".into()];
        let off = Report::differing("balances", vec!["bob: expected 27, found 26".into()]);
        let evidence = judge(
            counts(3, 2, 0),
            "d",
            Expectation::AllDuplicates,
            changed,
            vec![off],
            Utc::now(),
        );
        let all = evidence.differences.join("\n");
        for needle in [
            "holds 4 events",
            "input digest",
            "do not add up",
            "evt-9",
            "expected only duplicates",
            "bob: expected 27",
        ] {
            assert!(all.contains(needle), "{needle} in {all}");
        }
    }
}
