//! Channels: every place a notification goes (contract §5). A channel is a named row of
//! the `channels` table (its kind, whether it is on, which outcomes it announces, its quiet hours,
//! how many due notifications at once become one summary, and its kind's non-secret fields);
//! its secrets live in the secret store. The merge point enqueues one outbox row per finished job
//! and channel (`store::outbox::enqueue`); the dispatcher (`outbox`) sends each channel's
//! rows through its sender (`senders::Channels`): this desktop, a hub's device, ntfy, a signed
//! outgoing webhook, Slack, Discord or e-mail. A channel's fields are typed by kind (`config`).
//!
//! Each sender answers what the channel answered (`Answer`: the status and an excerpt of the
//! body), so that "Send test" and the channel's last error say exactly what happened.

// The senders (one module per kind of service).
pub mod chat;
pub mod config;
pub mod desktop;
pub mod email;
pub mod ntfy;
pub mod senders;
pub mod webhook;

use crate::closed_set::closed_set;
use crate::notification::{Action, NotifyError};

use crate::notification::Message;

closed_set! {
    /// How an e-mail channel talks to its SMTP server.
    #[ts(export)]
    #[derive(Default)]
    pub enum EmailTls {
        /// Plain SMTP (a local relay).
        None = "none",
        /// Plain, then upgraded with STARTTLS (submission, port 587): the default.
        #[default]
        Starttls = "starttls",
        /// TLS from the first byte (port 465).
        Tls = "tls",
    }
}

impl EmailTls {
    /// The SMTP port a channel uses when it names none: the one this way of talking is served on.
    pub fn default_port(self) -> u16 {
        match self {
            EmailTls::None => 25,
            EmailTls::Starttls => 587,
            EmailTls::Tls => 465,
        }
    }
}

/// How a link for an action is labelled on the channels that show links (ntfy's buttons, chat,
/// e-mail). A cancel link opens the job with the question asked, hence the ellipsis (the desktop's
/// button asks the provider at once: `Action::label`).
pub fn link_label(action: Action) -> &'static str {
    match action {
        Action::Open => "Open in NeverMiss",
        Action::Result => "Open result",
        Action::Provider => "Open on provider",
        Action::Cancel => "Cancel…",
    }
}

/// Where links in a message point: the web UI's address as the user reaches it (the hub's public
/// URL, or this machine's admin API). No base, no links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Links {
    pub base: Option<String>,
}

impl Links {
    /// The job's page in the web UI.
    pub fn job(&self, provider: &str, job_id: &str) -> Option<String> {
        let base = self.base.as_deref()?.trim_end_matches('/');
        Some(format!("{base}/#/jobs/{}/{}", percent_encode(provider), percent_encode(job_id)))
    }

    /// The job's page with the cancel's question already asked (a notification's "Cancel"
    /// button: the window asks before anything is sent, and no credential is in the link).
    pub fn job_cancel(&self, provider: &str, job_id: &str) -> Option<String> {
        Some(format!("{}?ask=cancel", self.job(provider, job_id)?))
    }

    /// Where one of a message's actions leads, when known: the job in NeverMiss (a summary's:
    /// the list), what it produced, its page on the provider's site, or the job with the cancel's
    /// question asked. Every channel that shows links for the actions reads them from here.
    pub fn of_action(&self, message: &Message<'_>, action: Action) -> Option<String> {
        match action {
            Action::Open => self.of(message),
            Action::Result => message.result_url().map(str::to_owned),
            Action::Provider => message.provider_url().map(str::to_owned),
            Action::Cancel => match message {
                Message::One(n) => n.job().and_then(|(provider, job_id)| self.job_cancel(provider, job_id)),
                _ => None,
            },
        }
    }

    /// A message's links, in the order of its actions (`Notification::actions`), each with its
    /// label as a link shows it; a message with no actions (a summary, a notification about no
    /// job) links to where `of` points. `with_open`: whether the link to NeverMiss is among them
    /// (Discord puts it on the embed's title instead).
    pub fn for_actions(&self, message: &Message<'_>, with_open: bool) -> Vec<(&'static str, String)> {
        let mut actions = message.actions();
        if actions.is_empty() {
            actions.push(Action::Open);
        }
        actions
            .into_iter()
            .filter(|action| with_open || *action != Action::Open)
            .filter_map(|action| self.of_action(message, action).map(|url| (link_label(action), url)))
            .collect()
    }

    /// The list of jobs (a summary's link).
    pub fn jobs(&self) -> Option<String> {
        let base = self.base.as_deref()?.trim_end_matches('/');
        Some(format!("{base}/#/jobs"))
    }

    /// The link a message points to: its job's page, or the list for a summary.
    pub fn of(&self, message: &Message<'_>) -> Option<String> {
        match message {
            Message::One(n) => match n.job() {
                Some((provider, job_id)) => self.job(provider, job_id),
                None => self.jobs(),
            },
            Message::Summary(_) => self.jobs(),
            Message::Test { .. } => self.jobs(),
        }
    }
}

/// As JavaScript's `encodeURIComponent` (what the UI's routes decode).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// What a channel answered to a send: its status and the start of its body, one line
/// ("HTTP 200 OK: {\"id\":\"...\"}", "250 2.0.0 Ok: queued as ...").
pub type Answer = String;

/// The first `max` characters of a channel's answer, on one line.
pub fn excerpt(text: &str, max: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// How long one HTTP channel's request may take.
const HTTP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Sends an HTTP channel's request and reads what the service answered: `HTTP <status>: <the
/// start of its body>`, an error when it is not a success, and for a 429 when to try again (its
/// `Retry-After`, in seconds). Whose failure it is (`Fault`): a 4xx refuses this message (400,
/// 413, 422: the channel's other messages go on), except those that every message would get: no
/// answer, a 5xx, 429 (rate limited), 408 (timed out), 401 and 403 (the token or secret), 404 and
/// 410 (the address) are the channel's. A request that gets no answer is an error naming `service`,
/// never the URL: a chat webhook's URL is its secret, and errors are shown and stored as the
/// channel's last error. Shared by the ntfy, webhook, Slack and Discord senders.
pub async fn post(service: &str, request: reqwest::RequestBuilder) -> Result<Answer, NotifyError> {
    let response =
        request.timeout(HTTP_TIMEOUT).send().await.map_err(|e| NotifyError::channel(format!("{service}: {}", e.without_url())))?;
    let status = response.status();
    let retry_after = response.headers().get(reqwest::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = excerpt(&response.text().await.unwrap_or_default(), 300);
    if status.is_success() {
        return Ok(format!("HTTP {status}: {body}"));
    }
    if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
        let wait = match retry_after {
            Some(after) => format!("rate limited, Retry-After: {after} s"),
            None => "rate limited, no Retry-After".to_owned(),
        };
        return Err(NotifyError::channel(format!("HTTP {status} ({wait}): {body}")));
    }
    let reason = format!("HTTP {status}: {body}");
    if refuses_the_message(status) {
        return Err(NotifyError::refused(reason));
    }
    Err(NotifyError::channel(reason))
}

/// Whether an HTTP channel's answer refuses this one message (`post`), rather than saying what
/// every message would get.
fn refuses_the_message(status: reqwest::StatusCode) -> bool {
    use reqwest::StatusCode as S;
    status.is_client_error()
        && ![S::UNAUTHORIZED, S::FORBIDDEN, S::NOT_FOUND, S::REQUEST_TIMEOUT, S::GONE, S::TOO_MANY_REQUESTS].contains(&status)
}

/// A finished job's notification for the senders' unit tests.
#[cfg(test)]
pub(crate) fn finished_for_test(
    outbox_id: i64,
    subject: (&str, &str),
    state: crate::store::job::JobState,
    label: &str,
    error: Option<&str>,
    duration_ms: i64,
) -> crate::notification::Notification {
    crate::notification::Notification {
        outbox_id,
        kind: crate::store::outbox::Kind::Terminal,
        subject: crate::store::outbox::Subject::job(subject.0, subject.1),
        label: Some(label.to_owned()),
        state,
        error: error.map(str::to_owned),
        duration_ms: Some(duration_ms),
        job: None,
        group: None,
        result: None,
        provider_url: None,
        job_kind: None,
        expected_ms: None,
        may_not_cancel: false,
    }
}
