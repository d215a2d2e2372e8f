//! What a command's failure means to the shell: exit codes, and the error
//! that is the user's to fix.

use std::process::ExitCode;

/// The command did what was asked.
pub(crate) const EXIT_OK: u8 = 0;
/// The command was understood but failed while running.
pub(crate) const EXIT_FAILED: u8 = 1;
/// Bad arguments, a bad scenario file or an impossible parameter.
pub(crate) const EXIT_USAGE: u8 = 2;

/// An error that is the user's to fix (exit code [`EXIT_USAGE`]), as
/// opposed to a failure while running.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) anyhow::Error);

impl UsageError {
    /// A usage error from any error or message.
    pub(crate) fn new(e: impl Into<anyhow::Error>) -> Self {
        Self(e.into())
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for UsageError {}

/// The exit code for a command's result, after printing its error (if
/// any) on stderr. A closed pipe (`groupwire sim list | head`) is success.
pub(crate) fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    use std::io::Write as _;
    match result {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) if is_broken_pipe(&e) => ExitCode::from(EXIT_OK),
        Err(e) => {
            let code = if e.downcast_ref::<UsageError>().is_some() {
                EXIT_USAGE
            } else {
                EXIT_FAILED
            };
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// `groupwire sim list | head` must not fail when `head` closes the pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
