//! What a replay is asked to do: its range, target, schema interpretation, expectation and
//! side-effect policy; and the JSON document the record keeps of it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Refused;
use crate::names::Consumer;
use crate::{envelope::SchemaVersions, EventId};

/// The events a replay reads from its source: always bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Range {
    /// Source positions `first..=last`: outbox positions, JetStream sequences, Kafka offsets.
    Positions {
        /// The first position.
        first: u64,
        /// The last position: events after it are never read, whatever arrives later.
        last: u64,
    },
    /// The events the source stamped from `from` (included) to `to` (excluded): the outbox
    /// reads its enqueue times.
    Times {
        /// The start.
        from: DateTime<Utc>,
        /// The end: events stamped at or after it are never read.
        to: DateTime<Utc>,
    },
    /// These events, in this order; an event's position is its place in the list, from 1.
    Ids(Vec<EventId>),
}

impl Range {
    /// Source positions `first..=last`.
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`] when `first` is above `last`, or `last` above `i64::MAX`.
    pub fn positions(first: u64, last: u64) -> Result<Self, Refused> {
        if first > last || i64::try_from(last).is_err() {
            return Err(Refused::InvalidPlan(format!(
                "a position range runs from a first to a last position no larger than {}, not {first}..={last}",
                i64::MAX
            )));
        }
        Ok(Self::Positions { first, last })
    }

    /// The events stamped from `from` to `to` (excluded).
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`] when `to` is not after `from`.
    pub fn times(from: DateTime<Utc>, to: DateTime<Utc>) -> Result<Self, Refused> {
        if to <= from {
            return Err(Refused::InvalidPlan(format!(
                "a time range ends after it starts, not from {from} to {to}"
            )));
        }
        Ok(Self::Times { from, to })
    }

    /// These events, in this order.
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`] for an empty list or one that names an event twice.
    pub fn ids(ids: impl IntoIterator<Item = EventId>) -> Result<Self, Refused> {
        let ids: Vec<EventId> = ids.into_iter().collect();
        let mut seen = std::collections::HashSet::new();
        if ids.is_empty() {
            return Err(Refused::InvalidPlan(
                "an id range names at least one event".into(),
            ));
        }
        if let Some(twice) = ids.iter().find(|id| !seen.insert(id.as_str())) {
            return Err(Refused::InvalidPlan(format!(
                "an id range names each event once; {twice:?} is there twice"
            )));
        }
        Ok(Self::Ids(ids))
    }

    /// The error a source returns for a kind of range it cannot read:
    /// [`Refused::UnsupportedRange`], naming the source.
    pub fn unsupported_by(&self, source: &str) -> crate::Error {
        Refused::UnsupportedRange {
            source_name: source.to_owned(),
            range: self.kind(),
        }
        .into()
    }

    /// What kind of range it is: `positions`, `times` or `ids`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Positions { .. } => "positions",
            Self::Times { .. } => "times",
            Self::Ids(_) => "ids",
        }
    }

    /// Its first and last positions, where it is a range of positions (or of ids).
    pub(crate) fn bounds(&self) -> (Option<i64>, Option<i64>) {
        let stored = |n: u64| i64::try_from(n).ok();
        match self {
            Self::Positions { first, last } => (stored(*first), stored(*last)),
            Self::Ids(ids) => (None, stored(ids.len() as u64)),
            Self::Times { .. } => (None, None),
        }
    }

    /// Where a source event at `position`, stamped at `at`, falls: what a source returned
    /// outside the range is dropped, whatever it is, and one past its end ends it.
    pub(crate) fn place(&self, position: u64, at: Option<DateTime<Utc>>) -> Place {
        let (before, past) = match self {
            Self::Positions { first, last } => (position < *first, position > *last),
            Self::Ids(ids) => (position == 0, position > ids.len() as u64),
            Self::Times { from, to } => at.map_or((false, false), |at| (at < *from, at >= *to)),
        };
        match (before, past) {
            (true, _) => Place::Before,
            (_, true) => Place::Past,
            _ => Place::Inside,
        }
    }

    /// [`place`](Self::place) for a read after position `after`: an event at or before it
    /// was settled already, and is passed over as one before the range.
    pub(crate) fn place_after(
        &self,
        after: Option<u64>,
        position: u64,
        at: Option<DateTime<Utc>>,
    ) -> Place {
        if after.is_some_and(|after| position <= after) {
            Place::Before
        } else {
            self.place(position, at)
        }
    }

    /// Checks a range built by hand as its constructors do.
    fn check(&self) -> Result<(), Refused> {
        match self {
            Self::Positions { first, last } => Self::positions(*first, *last).map(drop),
            Self::Times { from, to } => Self::times(*from, *to).map(drop),
            Self::Ids(ids) => Self::ids(ids.iter().cloned()).map(drop),
        }
    }
}

/// Where a source event falls in a replay's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Before its start: passed over.
    Before,
    /// Inside: replayed.
    Inside,
    /// Past its end: the range ends.
    Past,
}

/// The consumer a replay runs through, and whether it is the live one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    consumer: Consumer,
    destination: Option<String>,
}

impl Target {
    /// An isolated target: the consumer `consumer`, a name of the replay's own, whose handler
    /// writes into `destination`: the shadow tables or schema the app names, an identifier
    /// (`points_shadow`, `shadow.points`) the handler may put into its SQL. The live
    /// consumer's rows are never touched.
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`] for an invalid consumer name, or a destination that is
    /// not 1 to 128 ASCII letters, digits and `_`, in one or two `.`-separated parts, each
    /// starting with a letter or `_`.
    pub fn isolated(consumer: &str, destination: &str) -> Result<Self, Refused> {
        if !is_identifier(destination) {
            return Err(Refused::InvalidPlan(format!(
                "an isolated target names where it writes as an identifier (points_shadow, shadow.points), not {destination:?}"
            )));
        }
        Ok(Self {
            consumer: Consumer::new(consumer).map_err(|e| Refused::InvalidPlan(e.to_string()))?,
            destination: Some(destination.to_owned()),
        })
    }

    /// The live consumer `consumer`: the replay proves what would run again there; its
    /// expectation is [`Expectation::AllDuplicates`] unless the plan says otherwise.
    ///
    /// # Errors
    ///
    /// [`Refused::InvalidPlan`] for an invalid consumer name.
    pub fn live(consumer: &str) -> Result<Self, Refused> {
        Ok(Self {
            consumer: Consumer::new(consumer).map_err(|e| Refused::InvalidPlan(e.to_string()))?,
            destination: None,
        })
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        self.consumer.as_str()
    }

    /// Where an isolated target writes; `None` for the live consumer.
    pub fn destination(&self) -> Option<&str> {
        self.destination.as_deref()
    }

    /// `true` for the live consumer.
    pub fn is_live(&self) -> bool {
        self.destination.is_none()
    }
}

/// Whether `name` is an SQL identifier no quoting changes: `table` or `schema.table`.
fn is_identifier(name: &str) -> bool {
    let part = |part: &str| {
        part.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = name.split('.').collect();
    name.len() <= 128 && parts.len() <= 2 && parts.into_iter().all(part)
}

/// What the plan expects of the target: what the evidence must show for the replay to be
/// accepted without an override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Expectation {
    /// Every event read takes effect in the target once: none a duplicate, none failed or
    /// dead-lettered. The default for an isolated target.
    AllProcessed,
    /// No event takes effect: the target had processed every one. The default for the live
    /// consumer, where the replay proves that nothing would run twice.
    AllDuplicates,
    /// Whatever the target makes of them, as long as the counts add up and every event has
    /// its inbox row.
    Any,
}

impl Expectation {
    /// Its name, as the CLI takes it: `all-processed`, `all-duplicates`, `any`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllProcessed => "all-processed",
            Self::AllDuplicates => "all-duplicates",
            Self::Any => "any",
        }
    }
}

impl std::str::FromStr for Expectation {
    type Err = Refused;

    fn from_str(text: &str) -> Result<Self, Refused> {
        match text {
            "all-processed" => Ok(Self::AllProcessed),
            "all-duplicates" => Ok(Self::AllDuplicates),
            "any" => Ok(Self::Any),
            other => Err(Refused::InvalidPlan(format!(
                "the expectation is all-processed, all-duplicates or any, not {other:?}"
            ))),
        }
    }
}

/// How the replay reads its events' schemas.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Interpretation {
    /// These event types and versions; any other is skipped, counted and named.
    Versions(SchemaVersions),
    /// Every event goes to the app's decoder, named here with its version for the record.
    Decoder {
        /// The decoder's name.
        name: String,
        /// Its version.
        version: String,
    },
}

/// Where the outbox enqueues of a replayed handler go
/// ([`Replayed::topic`](super::Replayed::topic)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enqueues {
    /// Dropped: nothing is enqueued. The default.
    Drop,
    /// Enqueued to this topic of the replay's own, never to the live one.
    Redirect(String),
}

/// A replay's plan: what it reads, into which target, read how, expecting what, and what its
/// side effects may do. Recorded with the replay, and never changed after.
///
/// ```
/// use diesel_inbox::replay::{Expectation, Plan, Range, Target};
///
/// let plan = Plan::new(Target::isolated("points-rebuild", "points_shadow")?, Range::positions(1, 500)?);
/// assert_eq!(plan.expectation(), Expectation::AllProcessed);
/// let probe = Plan::new(Target::live("points")?, Range::positions(1, 500)?);
/// assert_eq!(probe.expectation(), Expectation::AllDuplicates);
/// # Ok::<(), diesel_inbox::replay::Refused>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Plan {
    target: Target,
    range: Range,
    interpretation: Option<Interpretation>,
    expectation: Expectation,
    enqueues: Enqueues,
    calls: bool,
}

impl Plan {
    /// A replay of `range` into `target`: every schema version read, enqueues dropped, claims
    /// suppressed, and the target's default expectation.
    pub fn new(target: Target, range: Range) -> Self {
        let expectation = if target.is_live() {
            Expectation::AllDuplicates
        } else {
            Expectation::AllProcessed
        };
        Self {
            target,
            range,
            interpretation: None,
            expectation,
            enqueues: Enqueues::Drop,
            calls: false,
        }
    }

    /// How the replay reads its events' schemas; by default every version of every type.
    pub fn interpretation(mut self, interpretation: Interpretation) -> Self {
        self.interpretation = Some(interpretation);
        self
    }

    /// What the evidence must show.
    pub fn expect(mut self, expectation: Expectation) -> Self {
        self.expectation = expectation;
        self
    }

    /// The replayed handler's outbox enqueues go to `topic`, a topic of the replay's own,
    /// instead of being dropped.
    pub fn redirect_enqueues(mut self, topic: &str) -> Self {
        self.enqueues = Enqueues::Redirect(topic.to_owned());
        self
    }

    /// Claims under the replay call out: their side effects run. Off by default, when they
    /// report what they would have done instead.
    pub fn allow_calls(mut self) -> Self {
        self.calls = true;
        self
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The range.
    pub fn range(&self) -> &Range {
        &self.range
    }

    /// The schema interpretation; `None` reads every version.
    pub fn schema(&self) -> Option<&Interpretation> {
        self.interpretation.as_ref()
    }

    /// The expectation.
    pub fn expectation(&self) -> Expectation {
        self.expectation
    }

    /// Where enqueues go.
    pub fn enqueues(&self) -> &Enqueues {
        &self.enqueues
    }

    /// Whether claims call out.
    pub fn calls_allowed(&self) -> bool {
        self.calls
    }

    /// Checks the plan against the source it will read.
    pub(crate) fn check(&self) -> Result<(), Refused> {
        self.range.check()?;
        if let Enqueues::Redirect(topic) = &self.enqueues {
            if topic.trim().is_empty() {
                return Err(Refused::InvalidPlan(
                    "a replay's enqueues are redirected to a topic of its own: name it".into(),
                ));
            }
        }
        Ok(())
    }

    /// The document the record keeps.
    pub(crate) fn to_document(&self) -> String {
        let doc = PlanDoc {
            target: TargetDoc {
                destination: self.target.destination.clone(),
            },
            range: match &self.range {
                Range::Positions { first, last } => RangeDoc::Positions {
                    first: *first,
                    last: *last,
                },
                Range::Times { from, to } => RangeDoc::Times {
                    from: *from,
                    to: *to,
                },
                Range::Ids(ids) => RangeDoc::Ids {
                    ids: ids.iter().map(|id| id.as_str().to_owned()).collect(),
                },
            },
            schema: self.interpretation.as_ref().map(|i| match i {
                Interpretation::Versions(versions) => {
                    let mut accepted: BTreeMap<String, Vec<u32>> = BTreeMap::new();
                    for (event_type, version) in versions.accepted() {
                        accepted
                            .entry(event_type.to_owned())
                            .or_default()
                            .push(version);
                    }
                    SchemaDoc::Versions { accepted }
                }
                Interpretation::Decoder { name, version } => SchemaDoc::Decoder {
                    name: name.clone(),
                    version: version.clone(),
                },
            }),
            expectation: self.expectation,
            redirect_enqueues_to: match &self.enqueues {
                Enqueues::Drop => None,
                Enqueues::Redirect(topic) => Some(topic.clone()),
            },
            calls: self.calls,
        };
        serde_json::to_string(&doc).expect("a plan always serializes")
    }

    /// The plan a record keeps, for the target consumer `consumer`; `None` when the
    /// document is not one this version reads.
    pub(crate) fn from_document(consumer: &str, document: &str) -> Option<Self> {
        let doc: PlanDoc = serde_json::from_str(document).ok()?;
        let consumer = Consumer::new(consumer).ok()?;
        let range = match doc.range {
            RangeDoc::Positions { first, last } => Range::Positions { first, last },
            RangeDoc::Times { from, to } => Range::Times { from, to },
            RangeDoc::Ids { ids } => Range::Ids(
                ids.into_iter()
                    .map(EventId::new)
                    .collect::<Result<_, _>>()
                    .ok()?,
            ),
        };
        Some(Self {
            target: Target {
                consumer,
                destination: doc.target.destination,
            },
            range,
            interpretation: doc.schema.map(|schema| match schema {
                SchemaDoc::Versions { accepted } => Interpretation::Versions(
                    accepted
                        .into_iter()
                        .fold(SchemaVersions::new(), |all, (event_type, versions)| {
                            all.accept(&event_type, versions)
                        }),
                ),
                SchemaDoc::Decoder { name, version } => Interpretation::Decoder { name, version },
            }),
            expectation: doc.expectation,
            enqueues: doc
                .redirect_enqueues_to
                .map_or(Enqueues::Drop, Enqueues::Redirect),
            calls: doc.calls,
        })
    }
}

/// The stored form of a plan.
#[derive(Serialize, Deserialize)]
struct PlanDoc {
    target: TargetDoc,
    range: RangeDoc,
    schema: Option<SchemaDoc>,
    expectation: Expectation,
    redirect_enqueues_to: Option<String>,
    calls: bool,
}

#[derive(Serialize, Deserialize)]
struct TargetDoc {
    /// `None` for the live consumer.
    destination: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
enum RangeDoc {
    Positions {
        first: u64,
        last: u64,
    },
    Times {
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
    Ids {
        ids: Vec<String>,
    },
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
enum SchemaDoc {
    Versions {
        accepted: BTreeMap<String, Vec<u32>>,
    },
    Decoder {
        name: String,
        version: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_reads_back_equal_from_its_document() {
        let versions = SchemaVersions::new().accept("points.awarded", [1, 2]);
        let plans = [
            Plan::new(
                Target::isolated("rebuild", "shadow").unwrap(),
                Range::positions(3, 9).unwrap(),
            )
            .interpretation(Interpretation::Versions(versions))
            .redirect_enqueues("replay.points"),
            Plan::new(
                Target::live("points").unwrap(),
                Range::ids([EventId::new("a").unwrap(), EventId::new("b").unwrap()]).unwrap(),
            )
            .allow_calls()
            .expect(Expectation::Any),
        ];
        for plan in plans {
            let consumer = plan.target().consumer().to_owned();
            assert_eq!(
                Plan::from_document(&consumer, &plan.to_document()),
                Some(plan)
            );
        }
    }

    #[test]
    fn an_isolated_targets_destination_is_an_identifier() {
        for good in ["points_shadow", "shadow.points", "_t1"] {
            assert!(Target::isolated("rebuild", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            " ",
            "points; DROP TABLE x",
            "a.b.c",
            "1points",
            "shadow points",
            "p\"q",
        ] {
            assert!(Target::isolated("rebuild", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_range_has_an_end_and_holds_only_what_is_inside_it() {
        assert!(Range::positions(5, 4).is_err());
        assert!(Range::positions(1, u64::MAX).is_err());
        assert!(Range::ids([]).is_err());
        let twice = Range::ids([EventId::new("a").unwrap(), EventId::new("a").unwrap()]);
        assert!(twice.is_err());
        let range = Range::positions(5, 7).unwrap();
        let places: Vec<Place> = [4, 5, 7, 8]
            .into_iter()
            .map(|p| range.place(p, None))
            .collect();
        assert_eq!(
            places,
            [Place::Before, Place::Inside, Place::Inside, Place::Past]
        );
        let by_hand = Range::Positions { first: 9, last: 3 };
        let plan = Plan::new(Target::live("points").unwrap(), by_hand);
        assert!(
            plan.check().is_err(),
            "a range built by hand is checked too"
        );
    }
}
