//! A replay's decisions, apart from its I/O: how an event is read under the plan's schema
//! interpretation, what its outcome adds to the counts and the notes, and the input digest.

use sha2::{Digest, Sha256};

use super::evidence::ReplayCounts;
use super::plan::{Interpretation, Plan};
use super::sql::NoteRow;
use super::NoteKind;
use crate::envelope::to_hex;
use crate::envelope::{Envelope, Message};

/// The digest before the first event.
pub(crate) const EMPTY_DIGEST: [u8; 32] = [0; 32];

/// The input digest after one more event: SHA-256 over the digest so far, the event id (its
/// length first) and its payload's fingerprint. Chained, so that it can be kept between
/// batches, and re-read the same from the source.
pub(crate) fn chain(digest: &[u8; 32], event_id: &str, fingerprint: &[u8; 32]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(digest);
    hasher.update((event_id.len() as u64).to_be_bytes());
    hasher.update(event_id.as_bytes());
    hasher.update(fingerprint);
    hasher.finalize().into()
}

/// A digest as stored: lowercase hex.
pub(crate) fn digest_text(digest: &[u8; 32]) -> String {
    to_hex(digest)
}

/// A digest read back; `None` for text that is not one.
pub(crate) fn digest_from_text(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut digest = [0; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

/// A source event as the plan reads it: its id, what enters the digest, and the envelope to
/// deliver, or why it is skipped.
pub(crate) struct Read {
    /// The event id, or the message's whole text when it has none.
    pub(crate) event_id: String,
    /// What enters the digest with the id.
    pub(crate) fingerprint: [u8; 32],
    /// The envelope, or why the plan skips it.
    pub(crate) envelope: Result<Envelope, String>,
}

/// Reads `message` under the plan's schema interpretation.
pub(crate) fn read(plan: &Plan, message: &Message) -> Read {
    let headers = message
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()));
    match Envelope::from_message(headers, &message.body) {
        Ok(envelope) => {
            let fingerprint = envelope.payload().fingerprint();
            let event_id = envelope.id().as_str().to_owned();
            let envelope = match plan.schema() {
                Some(Interpretation::Versions(versions))
                    if !versions.accepts(envelope.event_type(), envelope.schema_version()) =>
                {
                    Err(format!(
                        "{} schema version {} is outside the plan's interpretation",
                        envelope.event_type(),
                        envelope.schema_version()
                    ))
                }
                _ => Ok(envelope),
            };
            Read {
                event_id,
                fingerprint,
                envelope,
            }
        }
        Err(error) => {
            let id = message
                .header(crate::envelope::wire::EVENT_ID)
                .unwrap_or("")
                .to_owned();
            Read {
                event_id: id,
                fingerprint: Sha256::digest(&message.body).into(),
                envelope: Err(format!("not an envelope this version reads: {error}")),
            }
        }
    }
}

/// What became of one event in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Its effect ran.
    Processed,
    /// The target had it: nothing ran.
    Duplicate,
    /// The target holds it dead-lettered.
    DeadLettered,
    /// The handler failed, for this reason.
    Failed(String),
    /// The plan does not read it, for this reason.
    Skipped(String),
    /// A probe rolled back its effect, which would have run.
    WouldRun,
}

/// A replay's progress: where it is, what it counted, its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    pub(crate) checkpoint: Option<u64>,
    pub(crate) counts: ReplayCounts,
    pub(crate) digest: [u8; 32],
}

impl Progress {
    /// The progress once the event at `position` settled as `settled`, with `suppressed`
    /// side effects; and the notes to record with it. `live` says whether the target is the
    /// live consumer, where an effect that ran is noted.
    pub(crate) fn after(
        &self,
        position: u64,
        read: &Read,
        settled: &Settled,
        suppressed: &[String],
        live: bool,
    ) -> (Self, Vec<NoteRow>) {
        let mut next = self.clone();
        next.checkpoint = Some(position);
        next.digest = chain(&self.digest, &read.event_id, &read.fingerprint);
        let counts = &mut next.counts;
        counts.read += 1;
        counts.suppressed += suppressed.len() as u64;
        let mut notes = Vec::new();
        let mut note = |kind: NoteKind, detail: String| {
            notes.push(NoteRow {
                position: i64::try_from(position).unwrap_or(i64::MAX),
                kind: kind.as_str().to_owned(),
                event_id: read.event_id.clone(),
                detail,
            });
        };
        match settled {
            Settled::Processed => {
                counts.processed += 1;
                if live {
                    note(NoteKind::Ran, "its effect ran in the live consumer".into());
                }
            }
            Settled::Duplicate => counts.duplicates += 1,
            Settled::DeadLettered => {
                counts.dead_lettered += 1;
                note(
                    NoteKind::DeadLettered,
                    "the target holds it dead-lettered".into(),
                );
            }
            Settled::Failed(why) => {
                counts.failed += 1;
                note(NoteKind::Failed, why.clone());
            }
            Settled::Skipped(why) => {
                counts.skipped += 1;
                note(NoteKind::Skipped, why.clone());
            }
            Settled::WouldRun => {
                counts.failed += 1;
                note(
                    NoteKind::Ran,
                    "would take effect: the probe rolled it back".into(),
                );
            }
        }
        if !suppressed.is_empty() {
            note(NoteKind::Suppressed, suppressed.join("; "));
        }
        (next, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_of(id: &str) -> Read {
        Read {
            event_id: id.to_owned(),
            fingerprint: [7; 32],
            envelope: Err(String::new()),
        }
    }

    #[test]
    fn the_digest_depends_on_every_id_and_their_order() {
        let fp = [1; 32];
        let ab = chain(&chain(&EMPTY_DIGEST, "a", &fp), "b", &fp);
        let ba = chain(&chain(&EMPTY_DIGEST, "b", &fp), "a", &fp);
        assert_ne!(ab, ba);
        // The id's length is hashed: "ab" + "" is not "a" + "b".
        assert_ne!(
            chain(&EMPTY_DIGEST, "ab", &fp),
            chain(&EMPTY_DIGEST, "a", &fp)
        );
        assert_eq!(digest_from_text(&digest_text(&ab)), Some(ab));
        assert_eq!(digest_from_text("zz"), None);
    }

    #[test]
    fn every_event_is_counted_once_and_the_counts_add_up() {
        let start = Progress {
            checkpoint: None,
            counts: ReplayCounts::default(),
            digest: EMPTY_DIGEST,
        };
        let outcomes = [
            Settled::Processed,
            Settled::Duplicate,
            Settled::DeadLettered,
            Settled::Failed("boom".into()),
            Settled::Skipped("v9".into()),
        ];
        let mut progress = start;
        let mut notes = Vec::new();
        for (i, settled) in outcomes.iter().enumerate() {
            let (next, added) = progress.after(
                i as u64 + 1,
                &read_of("e"),
                settled,
                &["claim".into()],
                true,
            );
            progress = next;
            notes.extend(added);
        }
        let counts = progress.counts;
        assert!(counts.add_up(), "{counts:?}");
        assert_eq!((counts.read, counts.suppressed), (5, 5));
        assert_eq!(progress.checkpoint, Some(5));
        let kinds: Vec<&str> = notes.iter().map(|n| n.kind.as_str()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "suppressed").count(), 5);
        for kind in ["ran", "dead_lettered", "failed", "skipped"] {
            assert!(kinds.contains(&kind), "{kinds:?}");
        }
    }
}
