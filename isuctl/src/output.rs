//! A command's result on stdout: JSON with `--json`, else a human rendering of the same value.
//! Progress and diagnostics go to stderr, so stdout stays machine-readable.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// Prints `value` as pretty JSON, or as `human(value)` (which should end without a newline).
pub fn emit<T: Serialize>(format: Format, value: &T, human: impl FnOnce(&T) -> String) -> anyhow::Result<()> {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Format::Human => println!("{}", human(value)),
    }
    Ok(())
}
