//! `--markdown FILE`: the run written out as a page (the repository's `docs/performance.md`).
//!
//! The page is this module's fixed prose (what a delivery sends, what the bench measures), then
//! the run: the machine, the command, how long it took, and the report the bench printed. A
//! section of hand-written notes on the figures, headed [`NOTES`], is kept from the file being
//! replaced, so that rewriting the page never loses them; they read the figures of the run they
//! were written for, and say so.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The heading of the notes kept from the previous page.
pub(crate) const NOTES: &str = "## Reading the figures";

/// Writes the page for a run whose report is `report` and which took `took`.
pub(crate) fn write(path: &Path, report: &str, took: Duration) -> Result<(), String> {
    let notes = std::fs::read_to_string(path)
        .ok()
        .and_then(|old| old.find(NOTES).map(|at| old[at..].to_owned()));
    let page = page(
        report,
        took,
        &machine(),
        &command(),
        &today(),
        notes.as_deref(),
    );
    std::fs::write(path, page).map_err(|e| format!("{}: {e}", path.display()))
}

/// The page, from its parts.
fn page(
    report: &str,
    took: Duration,
    machine: &str,
    command: &str,
    date: &str,
    notes: Option<&str>,
) -> String {
    let minutes = took.as_secs().div_ceil(60);
    let mut page = String::from(PROSE);
    write!(
        page,
        "## This run\n\n\
         Written by the bench on {date}, on {machine}, with the servers on the same machine;\n\
         it took about {minutes} minute{s}:\n\n\
         ```sh\n{command}\n```\n\n\
         ```text\n{report}```\n",
        s = if minutes == 1 { "" } else { "s" },
        report = report.trim_end().to_owned() + "\n",
    )
    .expect("writing to a String cannot fail");
    if let Some(notes) = notes {
        page.push('\n');
        page.push_str(notes.trim_end());
        page.push('\n');
    }
    page
}

/// The command that made the run, as it would be typed (`--release` when it was optimised).
fn command() -> String {
    let release = if cfg!(debug_assertions) {
        ""
    } else {
        " --release"
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        format!("cargo run{release} -p diesel-inbox-bench")
    } else {
        format!(
            "cargo run{release} -p diesel-inbox-bench -- {}",
            args.join(" ")
        )
    }
}

/// The cores, the processor (where the system says) and the OS.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split(':').nth(1))
                .map(|model| format!(" ({})", model.trim()))
        })
        .unwrap_or_default();
    format!("{cores} cores{model}, {}", std::env::consts::OS)
}

/// Today's date in UTC, `YYYY-MM-DD`, from the days since the Unix epoch.
fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .as_ref()
        .map_or(0, Duration::as_secs);
    let (year, month, day) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    format!("{year:04}-{month:02}-{day:02}")
}

/// Howard Hinnant's `civil_from_days`: the proleptic Gregorian date of a day count.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// What a delivery sends and what the bench measures: the page's fixed part.
const PROSE: &str = r#"# Performance

<!-- Written by diesel-inbox-bench (`--markdown docs/performance.md`): the prose down to "This
run" is the bench's template (diesel-inbox-bench/src/markdown.rs), "This run" is the run, and
"Reading the figures" is kept, as written, from the page the run replaced. -->

A processed delivery sends as many messages as the bare transaction, one fewer than the
smallest correct hand-written inbox (`BEGIN`, one insert of the event id, the effect,
`COMMIT`). The inbox's extra guarantees ride on statements it sends anyway:

| path | PostgreSQL | MariaDB | SQLite (in process) |
|---|---|---|---|
| bare transaction | `BEGIN`, effect, `COMMIT` | the same | the same |
| processed | `BEGIN; SET LOCAL …; INSERT` of the inbox row, effect, `SAVEPOINT …; COMMIT` | `BEGIN NOT ATOMIC … SET autocommit = 0; START TRANSACTION; SAVEPOINT diesel_inbox_open; upsert; END`, effect, `BEGIN NOT ATOMIC … RELEASE SAVEPOINT diesel_inbox_open; COMMIT; SET autocommit = 1; END` (the fence: see the crate docs' chapter on operating beyond one server, `diesel_inbox::doctor`) | `BEGIN IMMEDIATE`, upsert, effect, `BEGIN` (the check), `COMMIT` |
| duplicate | the same first message (the key refuses the insert), `ROLLBACK; BEGIN; SET LOCAL …; SET LOCAL synchronous_commit = off`, upsert, counter upsert, `SAVEPOINT …; COMMIT` | the same first statement, `SELECT` of the row, counter upsert, the same `COMMIT` | `BEGIN IMMEDIATE`, upsert, counter upsert, `COMMIT` |

- **PostgreSQL's insert travels with the `BEGIN`.** The first message is `BEGIN`, the
  transaction's idle bound and a plain `INSERT` of the inbox row, as one simple-protocol
  message. Such a message returns nothing but success or an error, so the unique key answers:
  a new event's row goes in, and a duplicate's is refused (23505). Then one message rolls back
  and opens the transaction that records the delivery on the existing row (with
  `synchronous_commit = off`: it records bookkeeping alone), so a duplicate costs as many
  messages as before. Nothing can be bound in that message: the consumer and event id go in as
  hex that the server decodes (`convert_from(decode('…', 'hex'), 'UTF8')`), so no id can change
  the statement. PostgreSQL logs each refused insert (`ERROR: duplicate key value violates
  unique constraint "diesel_inbox_events_pkey"`, and the statement, ids in hex), as it does for
  any insert-first code. A refused insert also waits for another delivery of the same id that
  holds its row. A consumer that sees many duplicates (a source that replays, a hot set of ids)
  declares it, `Inbox::new("orders")?.expect_duplicates(true)`, and its deliveries begin with
  the upsert: one message more for a new event, and no insert refused.
- **PostgreSQL's check travels with the commit.** A handler that swallowed a failed statement
  leaves the transaction aborted, and `COMMIT` would turn into a silent rollback; a handler
  that ran `ROLLBACK` or `COMMIT` itself leaves none open, and `COMMIT` would only warn.
  `SAVEPOINT …; COMMIT` goes as one message, the savepoint is refused in both cases (25P02,
  25P01), and the server stops at the first error, so neither reaches its `COMMIT`: the
  delivery is `Error::TransactionAborted`.
- **MariaDB's statements travel together, prepared.** Diesel sends `BEGIN` and `COMMIT` as
  text, which costs three round trips each on MySQL (it switches multi-statement mode on and
  off around them). The inbox sends compound statements instead, prepared and kept, one round
  trip each: the `BEGIN` with the upsert of the inbox row (an error in the upsert rolls back
  and is raised again, so no transaction is left open that the caller does not know of), and
  the `COMMIT` with the check that a deadlock did not end the transaction under the handler
  (the check refuses as a deadlock, 1213, and the delivery is retried). Oracle MySQL has no
  compound statements outside stored programs: after one warning, it gets `BEGIN`, the upsert
  and `COMMIT` one by one. There is no `RETURNING` through Diesel there, so a duplicate reads
  its row with a second statement.
- **Upserts stay prepared.** Diesel 2.3 prepares every upsert and `UPDATE` anew, since their
  SQL can vary with the values; on the servers that is one more round trip each time. The
  inbox's own upserts stay prepared, keyed by their SQL text.
- **Counters are striped.** A duplicate bumps the consumer's hourly counter (for stats); each
  counter has 16 rows per hour, picked by event id, so concurrent duplicates rarely queue on
  one row.

The test `each_delivery_path_sends_only_the_statements_it_needs` pins these lists on every
backend and checks that each prepared statement is kept, so that no round trip creeps back in.

## What the bench measures

`diesel-inbox-bench` (a package of the workspace) measures the cost against the bare
transaction and the smallest correct hand-written inbox ("minimal": `INSERT .. ON CONFLICT DO
NOTHING`, or `INSERT IGNORE` on MariaDB, then the effect if a row went in). It runs them side
by side in one run on the three backends (SQLite as a WAL file). Each single-connection
scenario credits one of 1,000 accounts per event. Scenarios run interleaved in rounds, every
other round in reverse order, and each figure is the interquartile mean over the rounds (the
mean of their middle half). The concurrency phase runs 1, 4 and 16 threads over an r2d2 pool,
with every id new, half of them duplicates, or a hot set of 10 ids. On MariaDB the
hand-written peers prepare `BEGIN` and `COMMIT` too, so that the ratios measure the inbox, not
Diesel's transport. The bench's own docs (`diesel-inbox-bench/src/main.rs`) list every
scenario.

**The floor.** Beside the client figures, the bench measures what the same transactions cost
inside the server, with no round trip and no client: a procedure (PL/pgSQL on PostgreSQL, a
stored procedure on MariaDB) loops them, one `CALL` per round, committing each: the credit
alone (floor: bare), the minimal inbox's insert and the credit (floor: minimal), the inbox's
own insert of a new event's row and the credit (floor: inbox). `floor: inbox / bare` is the
most any client can reach; `inbox / bare, of the floor's` is the client's ratio over the
floor's, round by round: 1 when the client adds no more to a delivery than to a bare
transaction. SQLite runs in process, so it has no floor.

"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_the_prose_the_run_and_the_notes_kept() {
        let page = page(
            "| a | 1 |\n",
            Duration::from_secs(61),
            "2 cores, linux",
            "cargo run --release -p diesel-inbox-bench -- --events 100",
            "2026-01-02",
            Some("## Reading the figures\n\nNotes.\n"),
        );
        assert!(page.starts_with("# Performance\n"));
        assert!(page.contains("on 2026-01-02, on 2 cores, linux"));
        assert!(page.contains("about 2 minutes"));
        assert!(
            page.contains("```sh\ncargo run --release -p diesel-inbox-bench -- --events 100\n```")
        );
        assert!(page.contains("```text\n| a | 1 |\n```\n"));
        assert!(page.ends_with("## Reading the figures\n\nNotes.\n"));
    }

    #[test]
    fn days_since_the_epoch_read_as_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}
