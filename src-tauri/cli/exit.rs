//! The exit codes, one per cause and the same for every command (written in `--help` and on the
//! book's command line page), and the error that carries one.

/// Refused or failed: the reason on one line (any error without a code of its own).
pub const REFUSED: u8 = 1;
/// A usage error (clap's: an unknown option, a missing or malformed argument).
pub const USAGE: u8 = 2;
/// `wait`: a job failed, needs input or ended unobserved.
pub const FAILED: u8 = 10;
/// `wait`: a job was canceled (and none failed).
pub const CANCELED: u8 = 11;
/// No running instance reachable (or it stopped while the command talked to it): sysexits'
/// EX_UNAVAILABLE.
pub const UNREACHABLE: u8 = 69;
/// `wait --timeout`: still running when the time was up (as `timeout(1)`).
pub const TIMED_OUT: u8 = 124;

/// How a command ended when not with success: its exit code, and a line for stderr.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Ended {
    pub code: u8,
    pub message: String,
}

/// The error that ends a command with `code`, saying `message`.
pub fn ended(code: u8, message: impl Into<String>) -> anyhow::Error {
    Ended { code, message: message.into() }.into()
}

/// No running instance reachable: `e` says why.
pub fn unreachable(e: impl std::fmt::Display) -> anyhow::Error {
    ended(UNREACHABLE, one_line(&e.to_string()))
}

/// An error's causes on one line, each said once.
pub fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The exit code of a command's error, and the line to print for it.
pub fn code_and_line(e: &anyhow::Error) -> (u8, String) {
    if let Some(ended) = e.downcast_ref::<Ended>() {
        return (ended.code, ended.message.clone());
    }
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        // An error's message often includes its source already: say each cause once.
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    (REFUSED, one_line(&line))
}
