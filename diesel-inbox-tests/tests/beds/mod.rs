//! The project's test beds (`scripts/galera`, `scripts/pg-standby`, `scripts/pgbouncer`), as the
//! test binaries that need one drive them.

use std::process::Command;

/// Runs the test-bed script `scripts/<script>` with `args` and returns what it printed; fails
/// the test if the script fails.
pub(crate) fn bed(script: &str, args: &[&str]) -> String {
    let path = format!("{}/../scripts/{script}", env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash").arg(&path).args(args).output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "scripts/{script} {args:?} failed: {printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    printed
}
