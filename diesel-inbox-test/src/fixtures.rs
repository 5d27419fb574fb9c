//! Schema fixtures: one envelope per accepted event type and schema version, checked to
//! decode before a consumer is released.

use std::fmt::{self, Display};
use std::io;
use std::path::{Path, PathBuf};

use diesel_inbox::envelope::{Envelope, SchemaVersions};

/// Checks that a fixture of every accepted schema version decodes.
///
/// For every event type and version `accepted` lists there must be a file
/// `<dir>/<event type>/v<version>.json` holding an envelope in its JSON form
/// ([`Envelope::to_json`]) of that event type and version, which `decode` (the consumer's own
/// decoding) accepts. Every problem is collected, not only the first. Returns how many
/// fixtures were checked.
///
/// Keep a fixture of each version a producer has ever sent, as it sent it: a consumer whose
/// decoding no longer reads one fails this check before release, rather than dead-lettering
/// the events in production.
///
/// ```
/// use diesel_inbox_test::{check_schema_fixtures, write_schema_fixture};
/// use diesel_inbox::{envelope::{Envelope, SchemaVersions}};
///
/// #[derive(serde::Deserialize)]
/// struct OrderPlaced {
///     total: u64,
/// }
///
/// let dir = tempfile::tempdir()?;
/// let payloads = [
///     (1, serde_json::json!({"total": 5})),
///     (2, serde_json::json!({"total": 5, "currency": "EUR"})),
/// ];
/// for (version, payload) in payloads {
///     let fixture = Envelope::new("order.placed", "order", "42")
///         .with_schema_version(version)
///         .json(&payload)?;
///     write_schema_fixture(dir.path(), &fixture)?;
/// }
///
/// let accepted = SchemaVersions::new().accept("order.placed", [1, 2]);
/// let checked = check_schema_fixtures(dir.path(), &accepted, |envelope| {
///     envelope.decode_json::<OrderPlaced>()
/// })?;
/// assert_eq!(checked, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`FixtureError`] listing every fixture that is missing, unreadable, of another event type
/// or version, or that `decode` refuses.
pub fn check_schema_fixtures<T, E: Display>(
    dir: impl AsRef<Path>,
    accepted: &SchemaVersions,
    decode: impl Fn(&Envelope) -> Result<T, E>,
) -> Result<usize, FixtureError> {
    let dir = dir.as_ref();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (event_type, version) in accepted.accepted() {
        checked += 1;
        let path = match fixture_path(dir, event_type, version) {
            Ok(path) => path,
            Err(error) => {
                problems.push(FixtureProblem::Unreadable {
                    path: dir.to_owned(),
                    reason: error.to_string(),
                });
                continue;
            }
        };
        if let Err(problem) = check_one(&path, event_type, version, &decode) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(FixtureError { checked, problems })
    }
}

fn check_one<T, E: Display>(
    path: &Path,
    event_type: &str,
    version: u32,
    decode: impl Fn(&Envelope) -> Result<T, E>,
) -> Result<(), FixtureProblem> {
    let unreadable = |reason: String| FixtureProblem::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(FixtureProblem::Missing {
                path: path.to_owned(),
                event_type: event_type.to_owned(),
                version,
            })
        }
        Err(error) => return Err(unreadable(error.to_string())),
    };
    let document = serde_json::from_str(&text).map_err(|error| unreadable(error.to_string()))?;
    let envelope = Envelope::from_json(&document).map_err(|error| unreadable(error.to_string()))?;
    if envelope.event_type() != event_type || envelope.schema_version() != version {
        return Err(FixtureProblem::WrongEnvelope {
            path: path.to_owned(),
            expected: (event_type.to_owned(), version),
            found: (envelope.event_type().to_owned(), envelope.schema_version()),
        });
    }
    decode(&envelope).map_err(|error| FixtureProblem::Decode {
        path: path.to_owned(),
        reason: error.to_string(),
    })?;
    Ok(())
}

/// Writes `envelope` as the fixture of its event type and schema version,
/// `<dir>/<event type>/v<version>.json` (pretty JSON, [`Envelope::to_json`]), creating the
/// folders, replacing the file if there is one. Returns its path.
///
/// ```
/// use diesel_inbox_test::write_schema_fixture;
/// use diesel_inbox::envelope::Envelope;
///
/// let fixtures = tempfile::tempdir()?;
/// let placed = Envelope::new("order.placed", "order", "42").json(&serde_json::json!({"qty": 1}))?;
/// let path = write_schema_fixture(fixtures.path(), &placed)?;
/// assert!(path.ends_with("order.placed/v1.json"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// The file system's error; [`io::ErrorKind::InvalidInput`] when the event type cannot name
/// a folder (empty, `.`, `..`, or holding a path separator).
pub fn write_schema_fixture(dir: impl AsRef<Path>, envelope: &Envelope) -> io::Result<PathBuf> {
    let path = fixture_path(
        dir.as_ref(),
        envelope.event_type(),
        envelope.schema_version(),
    )?;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder)?;
    }
    let mut text = serde_json::to_string_pretty(&envelope.to_json())?;
    text.push('\n');
    std::fs::write(&path, text)?;
    Ok(path)
}

fn fixture_path(dir: &Path, event_type: &str, version: u32) -> io::Result<PathBuf> {
    if event_type.is_empty()
        || event_type == "."
        || event_type == ".."
        || event_type.contains(['/', '\\', '\0'])
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("event type {event_type:?} cannot name a fixture folder"),
        ));
    }
    Ok(dir.join(event_type).join(format!("v{version}.json")))
}

/// What [`check_schema_fixtures`] found wrong, every problem of the run.
#[derive(Debug)]
pub struct FixtureError {
    checked: usize,
    problems: Vec<FixtureProblem>,
}

impl FixtureError {
    /// The problems, in the order of the accepted event types and versions.
    pub fn problems(&self) -> &[FixtureProblem] {
        &self.problems
    }

    /// How many fixtures were looked for.
    pub fn checked(&self) -> usize {
        self.checked
    }
}

impl Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} schema {} failed:",
            self.problems.len(),
            self.checked,
            if self.checked == 1 {
                "fixture"
            } else {
                "fixtures"
            }
        )?;
        for problem in &self.problems {
            write!(f, "\n- {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for FixtureError {}

/// One problem [`check_schema_fixtures`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FixtureProblem {
    /// No fixture for an accepted version.
    Missing {
        /// Where it was looked for.
        path: PathBuf,
        /// The event type.
        event_type: String,
        /// The accepted version.
        version: u32,
    },
    /// The file could not be read, is not JSON, or not an envelope's JSON form.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The envelope's event type or version is not the one its path names.
    WrongEnvelope {
        /// The file.
        path: PathBuf,
        /// The event type and version its path names.
        expected: (String, u32),
        /// Those of the envelope in it.
        found: (String, u32),
    },
    /// The consumer's decoding refused the fixture.
    Decode {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        reason: String,
    },
}

impl Display for FixtureProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing {
                path,
                event_type,
                version,
            } => write!(
                f,
                "{}: missing; the consumer accepts {event_type:?} version {version}, so add \
                 a fixture of it as its producer sends it (write_schema_fixture)",
                path.display()
            ),
            Self::Unreadable { path, reason } => write!(
                f,
                "{}: not an envelope's JSON form: {reason}",
                path.display()
            ),
            Self::WrongEnvelope {
                path,
                expected,
                found,
            } => write!(
                f,
                "{}: holds {:?} version {}, but its path names {:?} version {}",
                path.display(),
                found.0,
                found.1,
                expected.0,
                expected.1
            ),
            Self::Decode { path, reason } => write!(
                f,
                "{}: the consumer cannot decode it: {reason}",
                path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Placed {
        total: u64,
    }

    fn decode(envelope: &Envelope) -> Result<Placed, diesel_inbox::Error> {
        envelope.decode_json()
    }

    fn fixture(version: u32, payload: &serde_json::Value) -> Envelope {
        Envelope::new("order.placed", "order", "42")
            .with_producer("orders-service")
            .with_schema_version(version)
            .json(payload)
            .unwrap()
    }

    fn accepted() -> SchemaVersions {
        SchemaVersions::new().accept("order.placed", [1, 2])
    }

    #[test]
    fn a_fixture_of_every_accepted_version_that_decodes_passes() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_schema_fixture(dir.path(), &fixture(1, &json!({"total": 1}))).unwrap();
        assert_eq!(path, dir.path().join("order.placed").join("v1.json"));
        write_schema_fixture(dir.path(), &fixture(2, &json!({"total": 1, "tax": 2}))).unwrap();
        assert_eq!(
            check_schema_fixtures(dir.path(), &accepted(), decode).unwrap(),
            2
        );
    }

    #[test]
    fn a_fixture_lacking_a_field_the_decoder_needs_fails_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        write_schema_fixture(dir.path(), &fixture(1, &json!({"total": 1}))).unwrap();
        let v2 = write_schema_fixture(dir.path(), &fixture(2, &json!({"sum": 1}))).unwrap();
        let error = check_schema_fixtures(dir.path(), &accepted(), decode).unwrap_err();
        assert!(
            matches!(error.problems(), [FixtureProblem::Decode { path, .. }] if *path == v2),
            "{error}"
        );
        let message = error.to_string();
        assert!(message.contains(&v2.display().to_string()), "{message}");
        assert!(message.contains("missing field `total`"), "{message}");
    }

    #[test]
    fn a_missing_version_fails() {
        let dir = tempfile::tempdir().unwrap();
        write_schema_fixture(dir.path(), &fixture(1, &json!({"total": 1}))).unwrap();
        let error = check_schema_fixtures(dir.path(), &accepted(), decode).unwrap_err();
        assert!(
            matches!(
                error.problems(),
                [FixtureProblem::Missing { version: 2, .. }]
            ),
            "{error}"
        );
        assert!(error.to_string().contains("v2.json: missing"), "{error}");
    }

    #[test]
    fn every_problem_is_reported_not_only_the_first() {
        let dir = tempfile::tempdir().unwrap();
        // v1 missing; v2 holds version 1; v3 is not JSON.
        let misplaced = dir.path().join("order.placed").join("v2.json");
        write_schema_fixture(dir.path(), &fixture(1, &json!({"total": 1}))).unwrap();
        std::fs::rename(dir.path().join("order.placed").join("v1.json"), &misplaced).unwrap();
        std::fs::write(dir.path().join("order.placed").join("v3.json"), "{").unwrap();

        let versions = SchemaVersions::new().accept("order.placed", [1, 2, 3]);
        let error = check_schema_fixtures(dir.path(), &versions, decode).unwrap_err();
        assert_eq!(error.checked(), 3);
        assert!(
            matches!(
                error.problems(),
                [
                    FixtureProblem::Missing { version: 1, .. },
                    FixtureProblem::WrongEnvelope { .. },
                    FixtureProblem::Unreadable { .. },
                ]
            ),
            "{error}"
        );
        assert!(error
            .to_string()
            .starts_with("3 of 3 schema fixtures failed:"));
    }

    #[test]
    fn an_event_type_that_cannot_name_a_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let envelope = Envelope::new("../escape", "order", "42");
        let error = write_schema_fixture(dir.path(), &envelope).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }
}
