//! The layers, kept by a test: pure decisions and types → statements → engine → bodies → fronts.
//! A file may name what sits in its own layer or below, never what sits above it, and no two
//! files name each other round a cycle: no module imports its caller.
//!
//! The test reads the crate's sources, resolves every `crate::`, `$crate::` and `super::` path
//! (`use` groups included) to the file that declares the longest module prefix of it, and
//! checks each edge. A path is resolved to the module it names, so an item is imported from the
//! file that defines it, not through a re-export higher up. Test modules are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// Values, states, errors, outcomes and the decisions over them: no I/O.
    Decisions,
    /// The statements of every backend, the tables and the codecs.
    Statements,
    /// The engine: one transaction, retries, the guards around a handler.
    Engine,
    /// The transaction bodies and the operations each area offers.
    Bodies,
    /// The async front and the crate root.
    Fronts,
}

/// The layer of a module, by its path (`claim::state`, `sql::db`, `engine`).
fn layer(module: &str) -> Layer {
    let parts: Vec<&str> = module.split("::").collect();
    let (first, last) = (parts[0], *parts.last().unwrap_or(&""));
    if matches!(
        first,
        "sql" | "backend" | "tables" | "capabilities" | "schema"
    ) || (first == "migrations" && parts.len() > 1)
        || matches!(last, "sql" | "mysql" | "postgres")
    {
        Layer::Statements
    } else if module.is_empty() || first == "asynch" || last == "asynch" {
        Layer::Fronts
    } else if first == "engine" {
        Layer::Engine
    } else if matches!(last, "state" | "error" | "outcome" | "watermark" | "gap")
        || matches!(
            module,
            "ack"
                | "audit"
                | "chain::block"
                | "check"
                | "class"
                | "decide"
                | "delivery"
                | "dialect"
                | "duration"
                | "handler_error"
                | "id"
                | "names"
                | "observe"
                | "redact"
                | "retry"
                | "rows"
        )
    {
        Layer::Decisions
    } else {
        Layer::Bodies
    }
}

/// Every source file's module path (`""` for the root), and its text without test modules.
fn modules(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let mut parts = prefix.to_vec();
        if path.is_dir() {
            parts.push(name);
            modules(&path, &parts, out);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "layers" {
            if name != "mod" && name != "lib" {
                parts.push(name);
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.insert(parts.join("::"), without_tests(&without_comments(&text)));
        }
    }
}

fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text without its test modules: `#[cfg(test)]` before `mod name { .. }` (the block
/// removed) or `mod name;` (the declaration removed).
fn without_tests(text: &str) -> String {
    let mut out = text.to_owned();
    let mut from = 0;
    while let Some(found) = out[from..].find("#[cfg(test)]") {
        let at = from + found;
        let next = out[at..].lines().nth(1).unwrap_or("").trim();
        if !next.starts_with("mod ") {
            from = at + 1;
            continue;
        }
        let end = if next.ends_with(';') {
            at + out[at..].find(';').map_or(0, |i| i + 1)
        } else {
            let open = at + out[at..].find('{').unwrap_or(0);
            let mut depth = 0;
            let close = out[open..].char_indices().find(|&(_, c)| {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            });
            close.map_or(out.len(), |(i, _)| open + i + 1)
        };
        out.replace_range(at..end, "");
        from = at;
    }
    out
}

/// A source file: its module path, whether it is a `mod.rs` (or the root), and its text.
struct File {
    is_mod: bool,
    text: String,
}

/// The path trees that start at `at` in `chars`: `a::{b, c::{d}}` gives `a::b` and `a::c::d`;
/// an alias (`b as c`) keeps the path. Returns the paths and where they end.
fn trees(chars: &[char], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let skip = |at: &mut usize| {
        while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
            *at += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip(&mut at);
        if chars.get(at) == Some(&'{') {
            at += 1;
            let mut found = Vec::new();
            loop {
                skip(&mut at);
                match chars.get(at) {
                    Some('}') | None => break,
                    Some(',') => at += 1,
                    _ => {
                        let (inner, end) = trees(chars, at);
                        found.extend(
                            inner
                                .into_iter()
                                .map(|tail| [prefix.clone(), tail].concat()),
                        );
                        at = end;
                    }
                }
            }
            return (found, at + 1);
        }
        let start = at;
        while chars
            .get(at)
            .is_some_and(|&c| c.is_alphanumeric() || c == '_' || c == '$' || c == '*')
        {
            at += 1;
        }
        if at == start {
            return (vec![prefix], at);
        }
        prefix.push(chars[start..at].iter().collect());
        if chars.get(at) == Some(&':') && chars.get(at + 1) == Some(&':') {
            at += 2;
        } else {
            return (vec![prefix], at);
        }
    }
}

/// Whether `word` starts at `at`, not inside a longer identifier.
fn word_at(chars: &[char], at: usize, word: &str) -> bool {
    let before = at.checked_sub(1).map(|i| chars[i]);
    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
        && chars[at..]
            .iter()
            .take(word.len())
            .copied()
            .eq(word.chars())
}

/// Every path a file names that starts at `crate`, `$crate`, `super`, or (in a `use`) at a
/// child module; and, apart, the paths its `pub use`s re-export, by the name they take.
fn named(
    module: &str,
    file: &File,
    modules: &BTreeMap<String, File>,
) -> (Vec<String>, Vec<(String, String)>) {
    let chars: Vec<char> = file.text.chars().collect();
    let here: Vec<&str> = module.split("::").filter(|p| !p.is_empty()).collect();
    let parent = if file.is_mod {
        here.clone()
    } else {
        here[..here.len().saturating_sub(1)].to_vec()
    };
    let absolute = |path: &[String]| -> Option<String> {
        let mut base: Vec<String> = parent.iter().map(|s| (*s).to_owned()).collect();
        let mut rest = path;
        match rest.first().map(String::as_str) {
            Some("crate" | "$crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("super") => {
                let ups = rest.iter().take_while(|s| *s == "super").count();
                base.truncate(base.len().saturating_sub(ups - 1));
                rest = &rest[ups..];
            }
            Some("self") => {
                base = here.iter().map(|s| (*s).to_owned()).collect();
                rest = &rest[1..];
            }
            Some(first) => {
                let child = [here.clone(), vec![first]].concat().join("::");
                if !modules.contains_key(&child) {
                    return None;
                }
                base = here.iter().map(|s| (*s).to_owned()).collect();
            }
            None => return None,
        }
        // A macro's own input (`super::$codec`) names the caller's items, not this file's.
        if rest.iter().any(|s| s.starts_with('$')) {
            return None;
        }
        Some([base, rest.to_vec()].concat().join("::"))
    };
    let (mut paths, mut reexports) = (Vec::new(), Vec::new());
    for at in 0..chars.len() {
        let is_use = word_at(&chars, at, "use ");
        let is_path = ["crate::", "$crate::", "super::"]
            .iter()
            .any(|w| word_at(&chars, at, w))
            && !(at > 0 && chars[at - 1] == '$');
        if !is_use && !is_path {
            continue;
        }
        let (found, _) = trees(&chars, if is_use { at + 4 } else { at });
        let public = is_use && {
            let line_start = chars[..at]
                .iter()
                .rposition(|&c| c == '\n')
                .map_or(0, |i| i + 1);
            chars[line_start..at]
                .iter()
                .collect::<String>()
                .trim_start()
                .starts_with("pub")
        };
        for path in found {
            let Some(full) = absolute(&path) else {
                continue;
            };
            // A re-export is followed to where the name is defined. A module's re-export of
            // its own child's item is where users find it, not a use of it; any other is both.
            let own_child = !module.is_empty() && full.starts_with(&format!("{module}::"))
                || module.is_empty() && file.is_mod && public;
            if public {
                let name = path.last().cloned().unwrap_or_default();
                reexports.push((name, full.clone()));
            }
            if !(public && own_child) {
                paths.push(full);
            }
        }
    }
    (paths, reexports)
}

/// The module a path lands in: its longest prefix that is a module, followed through that
/// module's re-exports (a few at most: `sql::Db` is `sql::db`'s).
fn resolve(
    path: &str,
    modules: &BTreeMap<String, File>,
    reexports: &Reexports,
    hops: u8,
) -> String {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let n = (0..=segments.len())
        .rev()
        .find(|&n| modules.contains_key(&segments[..n].join("::")))
        .unwrap_or(0);
    let module = segments[..n].join("::");
    let target = segments
        .get(n)
        .and_then(|name| reexports.get(&(module.clone(), (*name).to_owned())));
    match target {
        Some(target) if hops > 0 && target != path => {
            let rest = segments[n + 1..].iter().map(|s| format!("::{s}"));
            resolve(
                &format!("{target}{}", rest.collect::<String>()),
                modules,
                reexports,
                hops - 1,
            )
        }
        _ => module,
    }
}

/// Each module's re-exports: (module, name) to the path it names.
type Reexports = BTreeMap<(String, String), String>;

/// Each module's edges to the other modules it names.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    modules(&src, &[], &mut texts);
    let files: BTreeMap<String, File> = texts
        .into_iter()
        .map(|(module, text)| {
            let is_mod =
                module.is_empty() || src.join(module.replace("::", "/")).join("mod.rs").exists();
            (module, File { is_mod, text })
        })
        .collect();
    let mut reexports = Reexports::new();
    let mut uses = BTreeMap::new();
    for (module, file) in &files {
        let (paths, exported) = named(module, file, &files);
        for (name, path) in exported {
            reexports.insert((module.clone(), name), path);
        }
        uses.insert(module, paths);
    }
    uses.iter()
        .map(|(module, paths)| {
            let targets = paths
                .iter()
                .map(|path| resolve(path, &files, &reexports, 8))
                .filter(|target| target != *module && !target.is_empty())
                .collect();
            ((*module).clone(), targets)
        })
        .collect()
}

#[test]
fn no_module_names_a_module_of_a_higher_layer() {
    let upward: Vec<String> = edges()
        .iter()
        .flat_map(|(from, targets)| {
            targets
                .iter()
                .filter(|to| layer(to) > layer(from))
                .map(move |to| format!("{from} ({:?}) -> {to} ({:?})", layer(from), layer(to)))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports that go up a layer:\n{}",
        upward.join("\n")
    );
}

/// Whether `to` is reachable from `from` along the edges.
fn reaches(edges: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut next = vec![from];
    while let Some(module) = next.pop() {
        if module == to {
            return true;
        }
        if seen.insert(module) {
            next.extend(edges.get(module).into_iter().flatten().map(String::as_str));
        }
    }
    false
}

#[test]
fn no_module_imports_its_caller() {
    let edges = edges();
    let cycles: Vec<String> = edges
        .iter()
        .flat_map(|(from, targets)| {
            targets
                .iter()
                .filter(|to| reaches(&edges, to, from))
                .map(move |to| format!("{from} -> {to}"))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that name a module which names them back, directly or through others:\n{}",
        cycles.join("\n")
    );
}
