//! Channels: every place a notification goes (contract section 5). A channel is a named row of
//! the `channels` table (its kind, whether it is on, which outcomes it announces, its quiet hours,
//! how many due notifications at once become one summary, and its kind's non-secret fields);
//! its secrets live in the secret store. The merge point enqueues one outbox row per finished job
//! and channel (`store::outbox::enqueue`); the dispatcher (`crate::outbox`) sends each channel's
//! rows through its sender: this desktop, a hub's device, ntfy, a signed outgoing webhook, Slack,
//! Discord or e-mail.
//!
//! Each sender answers what the channel answered (`Answer`: the status and an excerpt of the
//! body), so that "Send test" and the channel's last error say exactly what happened.

// The senders (one module per kind of service).
pub mod chat;
pub mod email;
pub mod ntfy;
pub mod senders;
pub mod webhook;

use std::collections::BTreeMap;

use crate::closed_set::closed_set;
pub use crate::store::channels::{Announce, ChannelKind};
use crate::outbox::{Notification, NotifyError};

closed_set! {
    /// How an e-mail channel talks to its SMTP server.
    #[ts(export)]
    pub enum EmailTls {
        /// Plain SMTP (a local relay).
        None = "none",
        /// Plain, then upgraded with STARTTLS (submission, port 587).
        Starttls = "starttls",
        /// TLS from the first byte (port 465).
        Tls = "tls",
    }
}

/// What one send carries.
#[derive(Debug, Clone, Copy)]
pub enum Message<'a> {
    /// One notification (a finished job, a stuck or abandoned one, the tunnel down).
    One(&'a Notification),
    /// Several due at once, as one message.
    Summary(&'a Summary),
    /// "Send test": proves the channel works, names the channel.
    Test { channel: &'a str },
}

/// Many notifications due at once for one channel, sent as one ("12 jobs finished while you
/// were away: 10 succeeded, 2 failed"); every row it covers is marked delivered with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The first covered row's id: the summary's stable identity (e.g. its `webhook-id`).
    pub outbox_id: i64,
    /// How many notifications it covers.
    pub count: usize,
    /// How many of them per state (`succeeded`, `failed`, ..., `stuck`, `tunnel_down`).
    pub by_state: BTreeMap<String, i64>,
    /// The covered notifications, oldest first.
    pub notifications: Vec<Notification>,
}

impl Summary {
    pub fn new(notifications: Vec<Notification>) -> Summary {
        let mut by_state = BTreeMap::new();
        for n in &notifications {
            *by_state.entry(n.what().to_owned()).or_insert(0) += 1;
        }
        Summary {
            outbox_id: notifications.iter().map(|n| n.outbox_id).min().unwrap_or_default(),
            count: notifications.len(),
            by_state,
            notifications,
        }
    }

    /// "12 jobs finished while you were away".
    pub fn title(&self) -> String {
        let finished = self.notifications.iter().all(|n| n.kind == crate::outbox::Kind::Terminal);
        match (self.count, finished) {
            (1, true) => "1 job finished while you were away".to_owned(),
            (n, true) => format!("{n} jobs finished while you were away"),
            (1, false) => "1 notification while you were away".to_owned(),
            (n, false) => format!("{n} notifications while you were away"),
        }
    }

    /// "10 succeeded, 2 failed" (the most frequent first).
    pub fn body(&self) -> String {
        let mut counts: Vec<(&String, &i64)> = self.by_state.iter().collect();
        counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        counts.iter().map(|(state, n)| format!("{n} {}", state.replace('_', " "))).collect::<Vec<_>>().join(", ")
    }
}

impl Message<'_> {
    /// Who it is about, stable across attempts: a notification's identity, a summary's first row.
    pub fn identity(&self) -> String {
        match self {
            Message::One(n) => n.identity(),
            Message::Summary(s) => format!("nevermiss:summary:{}", s.outbox_id),
            Message::Test { channel } => format!("nevermiss:test:{channel}"),
        }
    }

    /// The tag a notification server that replaces on it keys on (the outbox row), so a repeat
    /// after a crash replaces the first instead of stacking.
    pub fn tag(&self) -> String {
        match self {
            Message::One(n) => n.tag(),
            Message::Summary(s) => format!("nevermiss:outbox:summary:{}", s.outbox_id),
            Message::Test { channel } => format!("nevermiss:test:{channel}"),
        }
    }

    /// The message's title (a notification's, a summary's, the test's).
    pub fn title(&self) -> String {
        match self {
            Message::One(n) => n.title(),
            Message::Summary(s) => s.title(),
            Message::Test { .. } => "NeverMiss test notification".to_owned(),
        }
    }

    /// The message's text.
    pub fn body(&self) -> String {
        match self {
            Message::One(n) => n.body(),
            Message::Summary(s) => s.body(),
            Message::Test { channel } => format!("The channel \"{channel}\" works: finished jobs will be announced here."),
        }
    }

    /// Whether it needs attention: a failed job, a summary with failures, a stuck job, the
    /// tunnel down (ntfy's high priority, a red colour in chat).
    pub fn is_urgent(&self) -> bool {
        match self {
            Message::One(n) => n.is_urgent(),
            Message::Summary(s) => s.notifications.iter().any(Notification::is_urgent),
            Message::Test { .. } => false,
        }
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
/// `Retry-After`, in seconds). A request that gets no answer is an error naming `service`,
/// never the URL: a chat webhook's URL is its secret, and errors are shown and stored as the
/// channel's last error. Shared by the ntfy, webhook, Slack and Discord senders.
pub async fn post(service: &str, request: reqwest::RequestBuilder) -> Result<Answer, NotifyError> {
    let response = request.timeout(HTTP_TIMEOUT).send().await.map_err(|e| NotifyError(format!("{service}: {}", e.without_url())))?;
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
        return Err(NotifyError(format!("HTTP {status} ({wait}): {body}")));
    }
    Err(NotifyError(format!("HTTP {status}: {body}")))
}

/// A finished job's notification for the senders' unit tests.
#[cfg(test)]
pub(crate) fn finished_for_test(outbox_id: i64, subject: (&str, &str), state: crate::job::JobState, label: &str, error: Option<&str>, duration_ms: i64) -> Notification {
    Notification {
        outbox_id,
        kind: crate::outbox::Kind::Terminal,
        subject: crate::outbox::Subject::job(subject.0, subject.1),
        label: Some(label.to_owned()),
        state,
        error: error.map(str::to_owned),
        duration_ms: Some(duration_ms),
        job: None,
    }
}
