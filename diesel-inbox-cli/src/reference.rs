//! `docs/cli.md`, the command's reference: below its marker, every command's and subcommand's
//! long help, rendered from the clap definition, so the page cannot drift from `--help`. The
//! hand-written text above the marker is kept as it is.

use std::fmt::Write as _;

use clap::CommandFactory;

/// Where the generated part of the page begins.
const MARKER: &str = "<!-- Generated below this line from the clap definition (diesel-inbox-cli/src/reference.rs): edit the help texts, not this page. -->";

/// The page, relative to this package.
const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md");

/// Every command's long help, depth first, each under a heading naming the command line.
fn render(command: &mut clap::Command, line: &str, out: &mut String) {
    let help = command.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    write!(
        out,
        "\n## `{line}`\n\n```text\n{}\n```\n",
        help.join("\n").trim_end()
    )
    .expect("writing to a String cannot fail");
    for sub in command.get_subcommands_mut() {
        if sub.get_name() == "help" {
            continue;
        }
        let line = format!("{line} {}", sub.get_name());
        render(sub, &line, out);
    }
}

/// The generated part of the page.
fn reference() -> String {
    let mut command = crate::Cli::command();
    command.build();
    let mut out = String::new();
    render(&mut command, "diesel-inbox", &mut out);
    out
}

#[test]
fn docs_cli_md_is_the_help_of_every_command() {
    let page = std::fs::read_to_string(PAGE).expect("docs/cli.md is readable");
    let head = page
        .find(MARKER)
        .map_or(page.as_str(), |at| &page[..at])
        .trim_end();
    let expected = format!("{head}\n\n{MARKER}\n{}", reference());
    if page == expected {
        return;
    }
    if std::env::var_os("UPDATE_CLI_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(PAGE, expected).expect("docs/cli.md is writable");
        return;
    }
    let line = page
        .lines()
        .zip(expected.lines())
        .position(|(found, wanted)| found != wanted)
        .map_or_else(|| "its end".to_owned(), |n| format!("line {}", n + 1));
    panic!(
        "docs/cli.md differs from the CLI's help (first at {line}); regenerate it with \
         `UPDATE_CLI_DOCS=1 cargo test -p diesel-inbox-cli --bin diesel-inbox reference` \
         and commit it"
    );
}
