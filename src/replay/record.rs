//! A replay as the record keeps it: its plan, state, progress, counts and evidence, its
//! transitions and its notes.

use chrono::{DateTime, Utc};

use super::evidence::ReplayCounts;
use super::plan::Plan;
use super::sql::{NoteRow, ReplayRow, TransitionRow};
use super::{NoteKind, ReplayState};
use crate::{CorruptRow, Error};

/// A replay, as recorded: [`Replays::get`](super::Replays::get).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReplayRecord {
    /// Its number.
    pub id: i64,
    /// The source it reads: `outbox`, `jetstream:ORDERS`, or a [`ReplaySource`](super::ReplaySource)'s name.
    pub source: String,
    /// What it was asked to do.
    pub plan: Plan,
    /// Why.
    pub reason: String,
    /// Who asked.
    pub requested_by: String,
    /// Where it stands.
    pub state: ReplayState,
    /// The source position of the last event settled: a resumed run reads after it.
    pub checkpoint: Option<u64>,
    /// What it did so far.
    pub counts: ReplayCounts,
    /// The input digest so far, as hex: SHA-256 chained over each event's id and payload
    /// fingerprint, in order.
    pub digest: String,
    /// Until when its runner holds it, while running.
    pub lease_until: Option<DateTime<Utc>>,
    /// The reconciliation's evidence, once reconciled.
    pub evidence: Option<super::Evidence>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

impl ReplayRecord {
    /// A stored row, or the row named as corrupt.
    pub(crate) fn from_row(row: ReplayRow) -> Result<Self, Error> {
        let id = row.id.to_string();
        let corrupt = |column: &str, text: &str| {
            let remedy = "this version cannot read the document: upgrade diesel-inbox if a newer version wrote it, or repair the row".to_owned();
            CorruptRow::new(
                "diesel_inbox_replays",
                &[("id", id.as_str())],
                column,
                text.to_owned(),
                remedy,
            )
        };
        let state = row
            .state
            .parse::<ReplayState>()
            .map_err(|unknown| unknown.in_row(&[("id", id.as_str())]))?;
        let plan = Plan::from_document(&row.consumer, &row.plan)
            .ok_or_else(|| corrupt("plan", &row.plan))?;
        let counts =
            serde_json::from_str(&row.counts).map_err(|_| corrupt("counts", &row.counts))?;
        let evidence = row
            .evidence
            .as_deref()
            .map(|text| serde_json::from_str(text).map_err(|_| corrupt("evidence", text)))
            .transpose()?;
        Ok(Self {
            id: row.id,
            source: row.source,
            plan,
            reason: row.reason,
            requested_by: row.requested_by,
            state,
            checkpoint: row.checkpoint.map(i64::unsigned_abs),
            counts,
            digest: row.digest,
            lease_until: row.lease_until,
            evidence,
            updated_at: row.updated_at,
        })
    }
}

/// What happened to one event of a replay that did not simply take effect or come back as a
/// duplicate: [`Replays::notes`](super::Replays::notes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplayNote {
    /// The event's source position.
    pub position: u64,
    /// What happened.
    pub kind: NoteKind,
    /// The event id.
    pub event_id: String,
    /// Said in words: the schema version skipped, the handler's error, the side effect
    /// suppressed.
    pub detail: String,
}

impl ReplayNote {
    pub(crate) fn from_row(replay: i64, row: NoteRow) -> Result<Self, CorruptRow> {
        let kind = row.kind.parse::<NoteKind>().map_err(|unknown| {
            let (id, position) = (replay.to_string(), row.position.to_string());
            unknown.in_row(&[("replay_id", id.as_str()), ("position", position.as_str())])
        })?;
        Ok(Self {
            position: row.position.unsigned_abs(),
            kind,
            event_id: row.event_id,
            detail: row.detail,
        })
    }
}

/// How many of a page's notes, at `positions` in order, to return: up to `limit`, then the
/// rest of the last event's, so that no event's notes are split between two pages.
pub(crate) fn whole_events(positions: &[i64], limit: usize) -> usize {
    (limit.max(1)..positions.len())
        .find(|&i| positions[i] != positions[i - 1])
        .unwrap_or(positions.len())
}

/// One audited transition of a replay: [`Replays::history`](super::Replays::history).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// The state it left; `None` for its planning.
    pub from: Option<ReplayState>,
    /// The state it entered.
    pub to: ReplayState,
    /// Who made it.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub at: DateTime<Utc>,
}

impl Transition {
    /// The row that records a move from `from` (`None`: the planning) to `to`, by `actor`
    /// for `reason`.
    pub(crate) fn row(
        from: Option<ReplayState>,
        to: ReplayState,
        actor: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> TransitionRow {
        TransitionRow {
            from: from.map(|state| state.as_str().to_owned()),
            to: to.as_str().to_owned(),
            actor: actor.to_owned(),
            reason: reason.to_owned(),
            at,
        }
    }

    pub(crate) fn from_row(replay: i64, row: TransitionRow) -> Result<Self, CorruptRow> {
        let parse = |text: &str| {
            text.parse::<ReplayState>().map_err(|unknown| {
                let id = replay.to_string();
                unknown.in_row(&[("replay_id", id.as_str())])
            })
        };
        Ok(Self {
            from: row.from.as_deref().map(parse).transpose()?,
            to: parse(&row.to)?,
            actor: row.actor,
            reason: row.reason,
            at: row.at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_of_notes_ends_at_a_whole_event() {
        assert_eq!(whole_events(&[1, 2, 2, 3], 2), 3, "both notes of 2");
        assert_eq!(whole_events(&[1, 2, 3], 2), 2);
        assert_eq!(whole_events(&[4, 4, 4], 1), 3);
        assert_eq!(whole_events(&[1], 5), 1);
        assert_eq!(whole_events(&[], 5), 0);
    }
}
