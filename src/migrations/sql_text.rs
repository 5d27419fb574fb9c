//! Reading the migrations' own SQL: the tables, columns and indexes each `up.sql` creates, and
//! the statements that create them, so that the doctor's remedies are the migrations' SQL and a
//! test can hold the object list against it. Knows only the shapes the inbox's migrations use.

/// A table a migration's SQL creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatedTable {
    /// Its name.
    pub(crate) name: String,
    /// Its columns, each with its definition as written (`state TEXT NOT NULL`), in order.
    pub(crate) columns: Vec<(String, String)>,
    /// The `CREATE TABLE` statement, on one line, without comments.
    pub(crate) statement: String,
}

/// An index a migration's SQL creates: by `CREATE INDEX`, as a `KEY`/`INDEX` inside
/// `CREATE TABLE`, or as a unique constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatedIndex {
    /// Its name.
    pub(crate) name: String,
    /// Its table.
    pub(crate) table: String,
    /// Its columns, in order.
    pub(crate) columns: Vec<String>,
    /// Whether it is unique.
    pub(crate) unique: bool,
}

/// The tables and indexes `sql` creates.
pub(crate) fn created(sql: &str) -> (Vec<CreatedTable>, Vec<CreatedIndex>) {
    let mut tables = Vec::new();
    let mut indexes = Vec::new();
    for statement in statements(sql) {
        let words: Vec<&str> = statement.split_whitespace().collect();
        let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
        let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
        match upper.as_slice() {
            ["CREATE", "TABLE", "IF", "NOT", "EXISTS", ..] | ["CREATE", "TABLE", ..] => {
                let name = words[if upper[2] == "IF" { 5 } else { 2 }];
                let name = name.split('(').next().unwrap_or(name).to_owned();
                let table = created_table(&name, &statement, &mut indexes);
                tables.push(table);
            }
            ["CREATE", rest @ ..] if rest.contains(&"INDEX") => {
                let unique = rest.first() == Some(&"UNIQUE");
                let on = upper.iter().position(|w| *w == "ON").unwrap_or(0);
                let name = words[on - 1].to_owned();
                let table = words[on + 1].split('(').next().unwrap_or("").to_owned();
                indexes.push(CreatedIndex {
                    name,
                    table,
                    columns: parenthesised(&statement),
                    unique,
                });
            }
            _ => {}
        }
    }
    (tables, indexes)
}

/// Reads the body of a `CREATE TABLE`: columns, and the indexes declared in it.
fn created_table(name: &str, statement: &str, indexes: &mut Vec<CreatedIndex>) -> CreatedTable {
    let open = statement.find('(').unwrap_or(0);
    let close = statement.rfind(')').unwrap_or(statement.len());
    let mut columns = Vec::new();
    for item in split_top_level(&statement[open + 1..close]) {
        let words: Vec<&str> = item.split_whitespace().collect();
        let first = words.first().map(|w| w.to_ascii_uppercase());
        let second = words.get(1).map(|w| w.to_ascii_uppercase());
        let index = |at: usize, unique: bool| CreatedIndex {
            name: words[at].split('(').next().unwrap_or("").to_owned(),
            table: name.to_owned(),
            columns: parenthesised(&item),
            unique,
        };
        match (first.as_deref(), second.as_deref()) {
            // The primary key is part of the table; a check is no object.
            (Some("PRIMARY" | "CHECK") | None, _) => {}
            (Some("KEY" | "INDEX"), _) => indexes.push(index(1, false)),
            (Some("UNIQUE"), Some("KEY" | "INDEX")) => indexes.push(index(2, true)),
            (Some("CONSTRAINT"), _) => indexes.push(index(1, true)),
            (Some(column), _) => columns.push((column.to_ascii_lowercase(), item.clone())),
        }
    }
    CreatedTable {
        name: name.to_owned(),
        columns,
        statement: statement.to_owned(),
    }
}

/// The statements of `sql`, comments removed, whitespace collapsed to single spaces.
fn statements(sql: &str) -> Vec<String> {
    let code: String = sql
        .lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    code.split(';')
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .collect()
}

/// The items of a parenthesised list, split at the commas outside nested parentheses.
fn split_top_level(body: &str) -> Vec<String> {
    let mut items = vec![String::new()];
    let mut depth = 0;
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(item) = items.last_mut() {
            item.push(c);
        }
    }
    items
        .into_iter()
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect()
}

/// The names in the last parenthesised list of `text`: an index's columns.
fn parenthesised(text: &str) -> Vec<String> {
    let open = text.rfind('(').unwrap_or(0);
    let close = text.rfind(')').unwrap_or(text.len());
    text[open + 1..close.max(open + 1)]
        .split(',')
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_columns_and_every_kind_of_index_are_read_from_the_sql() {
        let sql = "-- a comment; with a semicolon\n\
            CREATE TABLE IF NOT EXISTS t (\n\
                id BIGINT NOT NULL, -- the key\n\
                name VARCHAR(16) CHARACTER SET ascii NOT NULL,\n\
                amount DECIMAL(10, 2),\n\
                PRIMARY KEY (id),\n\
                KEY t_name (name, id),\n\
                UNIQUE KEY t_amount (amount),\n\
                CONSTRAINT t_unique UNIQUE (name),\n\
                CHECK (id > 0)\n\
            ) ENGINE = InnoDB;\n\
            CREATE INDEX IF NOT EXISTS t_other ON t (amount, name);";
        let (tables, indexes) = created(sql);
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].name, "t");
        let columns: Vec<&str> = tables[0].columns.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(columns, ["id", "name", "amount"]);
        assert_eq!(tables[0].columns[2].1, "amount DECIMAL(10, 2)");
        let found: Vec<(&str, &str, String, bool)> = indexes
            .iter()
            .map(|i| {
                (
                    i.name.as_str(),
                    i.table.as_str(),
                    i.columns.join(","),
                    i.unique,
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                ("t_name", "t", "name,id".to_owned(), false),
                ("t_amount", "t", "amount".to_owned(), true),
                ("t_unique", "t", "name".to_owned(), true),
                ("t_other", "t", "amount,name".to_owned(), false),
            ]
        );
    }
}
