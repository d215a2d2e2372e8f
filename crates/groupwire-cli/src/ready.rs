//! The machine-readable "ready" line of long-running commands
//! (`--ready-json`): one JSON object on stdout, written in one piece and
//! flushed once the command's sockets are bound, so a script or a test
//! reads the ports from the first line instead of scraping prose.
//!
//! Every object has `"ready"`: the command's name; the other keys are the
//! command's addresses and settings (see each command's `--help`).

use std::io::Write;

use anyhow::Context;
use serde::Serialize;

/// Writes `value` as one JSON line on stdout, tagged `"ready": command`.
pub(crate) fn announce<T: Serialize>(command: &str, value: &T) -> anyhow::Result<()> {
    let mut object = serde_json::to_value(value).context("ready line")?;
    let map = object
        .as_object_mut()
        .context("a ready line describes its fields as an object")?;
    map.insert("ready".into(), command.into());
    let mut line = serde_json::to_string(&object)?;
    line.push('\n');
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())?;
    out.flush()?;
    Ok(())
}
