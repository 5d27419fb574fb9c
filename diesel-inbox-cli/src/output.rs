//! Rendering: aligned plain columns for people, JSON for programs.

use std::fmt::Write as _;

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use diesel_inbox::{CorruptRow, Payload};
use serde_json::{json, Value};

/// `rows` under `headers`, each column as wide as its widest cell, two spaces apart.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_uppercase()).collect();
    for line in std::iter::once(&header).chain(rows) {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(&widths).enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// `key: value` lines, keys aligned.
pub(crate) fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (key, value) in pairs {
        let _ = writeln!(out, "{:<width$} {value}", format!("{key}:"));
    }
    out
}

/// Writes to stdout (what the tool's `print!` and `println!` do); when the reader has closed
/// it (`| head`), ends the process quietly with exit 0: nothing more can be shown, and every
/// change the command makes is committed before it prints. Another write error ends it with
/// exit 1.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;

    let mut out = std::io::stdout().lock();
    if let Err(error) = out.write_fmt(args).and_then(|()| out.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "error: cannot write the output: {error}");
        std::process::exit(1);
    }
}

/// Prints one JSON document.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A time as RFC 3339, in UTC, to the microsecond.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Text cut to `max` characters for a table cell, on one line.
pub(crate) fn cell(text: &str, max: usize) -> String {
    let line = text.replace(['\n', '\r'], " ");
    if line.chars().count() <= max {
        line
    } else {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// The value, or `-` for none.
pub(crate) fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The payload as JSON: the value itself, or bytes as standard base64.
pub(crate) fn payload_value(payload: Option<&Payload>) -> Value {
    match payload {
        Some(Payload::Json(value)) => value.clone(),
        Some(Payload::Bytes(bytes)) => {
            json!(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        Some(_) | None => Value::Null,
    }
}

/// The payload for people: JSON as JSON, bytes as `base64:...`, or `(none)`.
pub(crate) fn payload_text(payload: Option<&Payload>) -> String {
    match payload {
        Some(Payload::Json(value)) => value.to_string(),
        Some(other) => payload_value(Some(other))
            .as_str()
            .map_or_else(String::new, |b64| format!("base64:{b64}")),
        None => "(none)".to_owned(),
    }
}

/// The key columns whose values are numbers: a gap's or a history line's id, an outbox
/// row's position.
const NUMERIC_KEYS: &[&str] = &["id", "position"];

/// The value of `column` in the key of a row this version cannot read (empty when its key has
/// no such column): where a listing's next page starts after it.
pub(crate) fn key_part(corrupt: &CorruptRow, column: &str) -> String {
    corrupt
        .key()
        .iter()
        .find(|(k, _)| k == column)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// A listed row this version cannot read, as JSON, in the listing's place for it: its key
/// columns (an id or a position as a number), `"state": "unreadable"`, and the error that
/// names the table, the column and the text, and says how to repair the row.
pub(crate) fn unreadable(corrupt: &CorruptRow) -> Value {
    let mut row = serde_json::Map::new();
    for (column, value) in corrupt.key() {
        let number = NUMERIC_KEYS
            .contains(&column.as_str())
            .then(|| value.parse::<i64>().ok())
            .flatten();
        row.insert(
            column.clone(),
            number.map_or_else(|| json!(value), |n| json!(n)),
        );
    }
    row.insert("state".to_owned(), json!("unreadable"));
    row.insert("error".to_owned(), json!(corrupt.to_string()));
    Value::Object(row)
}

/// A listed row this version cannot read, as the `width` cells of a table row: its key
/// `column` first (an id or a position as it is, an event id quoted, as it may be empty),
/// `-` in between, and "unreadable: <why>" last.
pub(crate) fn unreadable_cells(corrupt: &CorruptRow, column: &str, width: usize) -> Vec<String> {
    let key = key_part(corrupt, column);
    let mut cells = vec![if NUMERIC_KEYS.contains(&column) {
        key
    } else {
        format!("{key:?}")
    }];
    cells.resize(width.saturating_sub(1).max(1), "-".to_owned());
    cells.push(format!("unreadable: {corrupt}"));
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_to_the_widest_cell() {
        let rows = vec![
            vec!["evt-1".to_owned(), "3".to_owned(), "x".to_owned()],
            vec!["e".to_owned(), "12".to_owned(), "y".to_owned()],
        ];
        assert_eq!(
            table(&["id", "n", "error"], &rows),
            "ID     N   ERROR\nevt-1  3   x\ne      12  y\n"
        );
    }

    #[test]
    fn long_cells_are_cut_on_one_line() {
        assert_eq!(cell("ab\ncdef", 4), "ab …");
        assert_eq!(cell("abc", 4), "abc");
    }
}
