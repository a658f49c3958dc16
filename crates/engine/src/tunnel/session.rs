//! What every kind of tunnel gives the supervisor: a start that ends with a public URL or a
//! one-line reason, and a running session that says when (and why) it has ended.

use async_trait::async_trait;

/// Why a start failed, and whether trying again by itself can help.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TunnelError {
    /// Waits for the user (a setting, a token, a binary to install): no retry until the
    /// configuration changes or a restart is asked for.
    #[error("{0}")]
    Setup(String),
    /// May pass (a refused connection, a crash, a slow start): retried with backoff.
    #[error("{0}")]
    Failed(String),
}

/// A running tunnel.
#[async_trait]
pub trait Session: Send {
    /// Resolves when the tunnel has died or stopped answering, with a one-line reason. The
    /// supervisor polls one call for the whole session (a health probe in flight is never
    /// dropped by its own periodic checks); cancel-safe all the same.
    async fn ended(&mut self) -> String;
    /// Stops it (ends the child process, closes the connection).
    async fn stop(self: Box<Self>);
    /// Whether a restart can change anything when the public URL stops answering (a manual URL
    /// is not ours to restart).
    fn restartable(&self) -> bool {
        true
    }
}

/// A started tunnel: its public base URL (no trailing slash) and the session to watch.
pub struct Opened {
    pub url: String,
    pub session: Box<dyn Session>,
}

/// The first line, trimmed and bounded: what the API and the UI show.
pub fn one_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("").to_owned();
    if line.chars().count() > 300 {
        let cut: String = line.chars().take(297).collect();
        format!("{cut}...")
    } else {
        line
    }
}
