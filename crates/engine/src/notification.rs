//! What the dispatcher hands to the channels: a notification (one outbox row, with what a person
//! needs to read it), the message a channel sends (one notification, a summary of several, or a
//! test), and the interface of this machine's notifier. The dispatcher (`outbox`) and the
//! channels' senders (`channels`) both import them from here; neither imports the other's
//! types (the dispatcher uses the senders, the senders know nothing of the dispatcher).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::settings::Settings;
use crate::store;
use crate::store::groups::GroupSummary;
use crate::store::job::{rfc3339, Job, JobResult, JobState};
use crate::store::outbox::{Kind, Subject};

/// One notification, with what a person needs to read it (sent as is to a hub's devices).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Notification {
    /// The outbox row this notification delivers: its stable id, the same on every attempt and
    /// after a restart, so a notifier can dedupe or replace on it.
    pub outbox_id: i64,
    pub kind: Kind,
    pub subject: Subject,
    pub label: Option<String>,
    pub state: JobState,
    pub error: Option<String>,
    /// From the job's creation to its end, when known.
    pub duration_ms: Option<i64>,
    /// The job as it stood when the notification was sent (a webhook channel sends it whole).
    pub job: Option<Job>,
    /// A group's end: the group's progress as it stood when the notification was sent.
    pub group: Option<GroupSummary>,
    /// What the job produced, when known: shown, linked, its image attached.
    pub result: Option<JobResult>,
    /// The job's page on the provider's own site, when it has one.
    pub provider_url: Option<String>,
    /// The job's kind, when known (`replicate/prediction/stability-ai/sdxl`).
    pub job_kind: Option<String>,
    /// How long a job of its kind usually takes (ms), when it has the history: a slower-than-usual
    /// alert says it.
    pub expected_ms: Option<i64>,
    /// Whoever shows it may not cancel its job: set by a hub for its devices while its owner does
    /// not let devices cancel (`devices_may_cancel`), so a device offers no Cancel the hub would
    /// refuse. Absent (a hub from before it) means allowed.
    #[serde(default)]
    pub may_not_cancel: bool,
}

impl Notification {
    /// A stable identity for the platform (one per subject and kind), so a repeat replaces.
    pub fn identity(&self) -> String {
        match &self.subject {
            Subject::Job { provider, job_id } => format!("nevermiss:{provider}:{job_id}:{}", self.kind.as_str()),
            Subject::Tunnel { tunnel, down_since } => format!("nevermiss:tunnel:{tunnel}@{down_since}:{}", self.kind.as_str()),
            Subject::Group { group, total } => format!("nevermiss:group:{group}@{total}:{}", self.kind.as_str()),
        }
    }

    /// The tag a notification server that honours replacement keys on (the outbox row), so a
    /// repeat of this notification replaces the first instead of stacking.
    pub fn tag(&self) -> String {
        format!("nevermiss:outbox:{}", self.outbox_id)
    }

    /// The job's provider and id, when the notification is about a job.
    pub fn job(&self) -> Option<(&str, &str)> {
        match &self.subject {
            Subject::Job { provider, job_id } => Some((provider, job_id)),
            Subject::Tunnel { .. } | Subject::Group { .. } => None,
        }
    }

    /// The group's name, when the notification is a group's end.
    pub fn group_name(&self) -> Option<&str> {
        match &self.subject {
            Subject::Group { group, .. } => Some(group),
            Subject::Job { .. } | Subject::Tunnel { .. } => None,
        }
    }

    /// Whether a group that ended had a member fail or wait for input.
    fn group_failed(&self) -> bool {
        self.group.as_ref().is_some_and(|g| ["failed", "needs_input", "ended"].iter().any(|s| g.by_state.get(*s).is_some_and(|n| *n > 0)))
    }

    /// What it announces: a terminal state's name, `stuck`, `slow`, `abandoned` or `tunnel_down`
    /// (the names a summary's counts use).
    pub fn what(&self) -> &'static str {
        match self.kind {
            Kind::Stuck => "stuck",
            Kind::Slow => "slow",
            Kind::TunnelDown => "tunnel_down",
            Kind::Abandoned => "abandoned",
            Kind::GroupEnd => "group_end",
            Kind::Terminal => self.state.as_str(),
        }
    }

    /// Whether it needs attention: a failed job, one waiting for input, a stuck, slower than usual
    /// or abandoned one, the tunnel down.
    pub fn is_urgent(&self) -> bool {
        match self.kind {
            Kind::Terminal => self.state.is_urgent_end(),
            Kind::Stuck | Kind::Slow | Kind::TunnelDown | Kind::Abandoned => true,
            Kind::GroupEnd => self.group_failed(),
        }
    }

    /// What a person can do from this notification, in the order offered:
    /// open the job, open its result (when it has a result URL), open its page on the provider's
    /// site (when known), and cancel it when it is still running past what was expected
    /// (`offers_cancel`). A notification about no job (the tunnel, a group) offers none. Every
    /// channel that shows actions (the desktop, ntfy) reads them from here.
    pub fn actions(&self) -> Vec<Action> {
        if self.job().is_none() {
            return Vec::new();
        }
        let mut actions = vec![Action::Open];
        if self.result_url().is_some() {
            actions.push(Action::Result);
        }
        if self.provider_url.is_some() {
            actions.push(Action::Provider);
        }
        if self.offers_cancel() {
            actions.push(Action::Cancel);
        }
        actions
    }

    /// Whether the notification offers to cancel its job: a job still running past its stuck
    /// threshold, or slower than its kind usually is. A finished job has nothing to
    /// cancel; polling given up is not about the job taking long. Never a `generic` job: the
    /// generic contract has no cancel call (its sender serves only a status API). Never on a
    /// hub's device its owner does not let cancel (`may_not_cancel`).
    fn offers_cancel(&self) -> bool {
        let taking_long = match self.kind {
            Kind::Stuck | Kind::Slow => true,
            Kind::Terminal | Kind::Abandoned | Kind::TunnelDown | Kind::GroupEnd => false,
        };
        taking_long && !self.may_not_cancel && self.job().is_some_and(|(provider, _)| provider != crate::providers::generic::NAME)
    }

    /// The link to what the job produced: its first image, else its first output URL.
    pub fn result_url(&self) -> Option<&str> {
        let result = self.result.as_ref()?;
        result.image.as_deref().or(result.urls.first().map(String::as_str))
    }

    /// The result's first image, when it has one.
    pub fn image_url(&self) -> Option<&str> {
        self.result.as_ref()?.image.as_deref()
    }

    /// The result's text in one line (an excerpt already: see `crate::result`).
    pub fn result_line(&self) -> Option<String> {
        let text = self.result.as_ref()?.text.as_deref()?;
        Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    pub fn title(&self) -> String {
        let name = self.label.as_deref().or(self.job().map(|(_, job_id)| job_id)).unwrap_or_default();
        let name = crate::plain_text::one_line(name);
        match self.kind {
            Kind::Stuck => format!("Stuck: {name}"),
            Kind::Slow => format!("Slower than usual: {name}"),
            Kind::Abandoned => format!("No longer polled: {name}"),
            Kind::TunnelDown => "Tunnel down: providers cannot reach NeverMiss".to_owned(),
            Kind::GroupEnd => {
                let name = self.group_name().unwrap_or_default();
                match &self.group {
                    Some(group) => format!("{name} done: {}", group_counts(group)),
                    None => format!("{name} done"),
                }
            }
            Kind::Terminal => match self.state {
                JobState::Succeeded => format!("Succeeded: {name}"),
                JobState::Failed => format!("Failed: {name}"),
                JobState::Canceled => format!("Canceled: {name}"),
                JobState::NeedsInput => format!("Needs input: {name}"),
                JobState::Ended => format!("Ended, outcome unknown: {name}"),
                other => format!("{other}: {name}"),
            },
        }
    }

    pub fn body(&self) -> String {
        let (provider, job_id) = match &self.subject {
            Subject::Tunnel { tunnel, down_since } => {
                return format!(
                    "{tunnel} tunnel, down since {}\nWebhooks are lost until it is back; polling goes on.",
                    rfc3339(*down_since)
                )
            }
            Subject::Group { group, total } => {
                let mut body = format!("group {group} · {total} jobs");
                if let Some(ms) = self.group.as_ref().and_then(|g| g.duration_ms) {
                    body.push_str(&format!(" · {}", human_duration(ms)));
                }
                return body;
            }
            Subject::Job { provider, job_id } => (provider, job_id),
        };
        let mut body = format!("{provider} · {job_id}");
        if self.kind == Kind::Abandoned {
            body.push_str(&format!(" · {}", self.state));
            if let Some(reason) = &self.error {
                body.push_str(&format!("\n{reason}"));
            }
            body.push_str("\nPolling gave up on this job; a webhook still finishes it.");
            return body;
        }
        if self.kind == Kind::Slow {
            if let Some(line) = self.slower_than_usual() {
                body.push_str(&format!("\n{line}"));
            }
            return body;
        }
        if let Some(ms) = self.duration_ms {
            body.push_str(&format!(" · {}", human_duration(ms)));
        }
        if let Some(error) = &self.error {
            body.push_str(&format!("\n{error}"));
        }
        if let Some(line) = self.result_line() {
            body.push_str(&format!("\n{line}"));
        }
        body
    }

    /// "sdxl is slower than usual: 14m 0s, usually 4m 12s": what a slower-than-usual alert says,
    /// its kind named by the last part of its name (the model, the app, the agent).
    pub fn slower_than_usual(&self) -> Option<String> {
        let usual = human_duration(self.expected_ms?);
        let what = self.job_kind.as_deref().and_then(|kind| kind.rsplit('/').next()).filter(|s| !s.is_empty()).unwrap_or("this job");
        Some(match self.duration_ms {
            Some(ms) => format!("{what} is slower than usual: {}, usually {usual}", human_duration(ms)),
            None => format!("{what} is slower than usual: usually {usual}"),
        })
    }
}

/// An action a notification offers (`Notification::actions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open the job in NeverMiss (what a click does).
    Open,
    /// Open what the job produced (its result URL).
    Result,
    /// Open the job's page on the provider's site.
    Provider,
    /// Ask the provider to cancel the job (`POST /api/jobs/{provider}/{job_id}/cancel`).
    Cancel,
}

impl Action {
    /// Its key: the freedesktop action key the notification server sends back when it is chosen.
    pub fn key(self) -> &'static str {
        match self {
            Action::Open => "open",
            Action::Result => "result",
            Action::Provider => "provider",
            Action::Cancel => "cancel",
        }
    }

    /// What its button says.
    pub fn label(self) -> &'static str {
        match self {
            Action::Open => "Open",
            Action::Result => "Open result",
            Action::Provider => "Open on provider",
            Action::Cancel => "Cancel job",
        }
    }

    /// The action of a key the notification server sent back, if it is one of ours.
    pub fn from_key(key: &str) -> Option<Action> {
        [Action::Open, Action::Result, Action::Provider, Action::Cancel].into_iter().find(|a| a.key() == key)
    }
}

/// "38 succeeded, 2 failed, 41m 3s": a group's members by state (the most frequent first) and how
/// long it took from its first job's start to its last end.
fn group_counts(group: &GroupSummary) -> String {
    let mut counts: Vec<(&String, &i64)> = group.by_state.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut parts: Vec<String> = counts.iter().map(|(state, n)| format!("{n} {}", state.replace('_', " "))).collect();
    if let Some(ms) = group.duration_ms {
        parts.push(human_duration(ms));
    }
    parts.join(", ")
}

pub fn human_duration(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

/// A send that failed: why (shown and stored as the channel's last error), and whose failure it
/// is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotifyError(pub String, pub Fault);

/// Whose failure a failed send is: the dispatcher holds a failing channel's notifications
/// together (one backoff for the channel), and retries a refused message on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The channel cannot take anything now: no connection, no answer in time, a 5xx, a 429, an
    /// SMTP server that refuses the connection or the login, the channel's settings or secret
    /// missing.
    Channel,
    /// The channel answered and refused this one message (an HTTP 4xx other than 429, an SMTP
    /// server that refuses its recipient or its content); the channel's other messages go on.
    Message,
}

impl NotifyError {
    /// A failure of the channel.
    pub fn channel(reason: impl Into<String>) -> NotifyError {
        NotifyError(reason.into(), Fault::Channel)
    }

    /// A refusal of this one message by a channel that answered.
    pub fn refused(reason: impl Into<String>) -> NotifyError {
        NotifyError(reason.into(), Fault::Message)
    }
}

/// What the engine lends its notifier when it starts (`Notifier::attach`): its settings (the
/// desktop's sound per urgency) and its own admin API, which a notification's `cancel` action
/// asks exactly as the window's Cancel and `nevermiss cancel` do.
#[derive(Clone)]
pub struct EngineAccess {
    pub settings: Arc<Settings>,
    /// The admin API's base URL (`http://127.0.0.1:8788`).
    pub api_url: String,
    /// The owner's API token.
    pub token: String,
}

/// This machine's notifications (the `desktop` channel). The dispatcher calls it once per
/// message while the process lives; after a crash the message that was being shown may come
/// again: implementations that can should replace on `Message::tag`.
#[async_trait]
pub trait Notifier: Send + Sync {
    async fn notify(&self, message: &Message<'_>) -> Result<(), NotifyError>;

    /// The engine that sends through this notifier has started: what it lends, given once before
    /// anything is sent. A notifier that needs none of it ignores it.
    fn attach(&self, _engine: &EngineAccess) {}
}

impl Notification {
    /// A group's end that a job joined after it was enqueued (`GroupSummary::overtaken`): not
    /// sent, the new job's end announces the group again.
    pub fn overtaken(&self) -> bool {
        match (&self.subject, &self.group) {
            (Subject::Group { total, .. }, Some(group)) if self.kind == Kind::GroupEnd => group.overtaken(*total),
            _ => false,
        }
    }
}

/// Fills in the group's progress of every group's end among `due` (read as it stands now).
pub(crate) fn add_groups(db: &dyn store::sql::Db, due: &mut [Notification]) -> store::sql::Result<()> {
    for n in due.iter_mut().filter(|n| n.kind == Kind::GroupEnd) {
        if let Some(name) = n.group_name().map(str::to_owned) {
            n.group = store::groups::summary(db, &name)?;
        }
    }
    Ok(())
}

/// A due row, as the notification it delivers.
pub(crate) struct Pending {
    pub(crate) id: i64,
    pub(crate) channel: String,
    pub(crate) notification: Notification,
    pub(crate) attempts: i64,
}

impl Pending {
    pub(crate) fn from_due(due: store::outbox::Due, now: i64) -> Pending {
        let duration_ms = match (due.kind, due.job_created_at, due.job_finished_at) {
            // From the provider's own start when it said one (a job tracked late took longer
            // than NeverMiss has known of it).
            (Kind::Terminal, _, Some(finished)) => due.job_since.map(|since| (finished - since).max(0)),
            (Kind::Stuck, Some(created), _) => Some(now - created),
            // As its kind's durations are measured (`expected`): from the provider's start.
            (Kind::Slow, _, _) => due.job_since.map(|since| now - since),
            _ => None,
        };
        Pending {
            id: due.id,
            channel: due.channel,
            attempts: due.attempts,
            notification: Notification {
                outbox_id: due.id,
                kind: due.kind,
                subject: due.subject,
                label: due.label,
                state: due.state.unwrap_or(JobState::Unknown),
                error: due.error,
                duration_ms,
                job: None,
                group: None,
                result: due.result,
                provider_url: due.provider_url,
                job_kind: due.job_kind,
                expected_ms: None,
                may_not_cancel: false,
            },
        }
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
        let finished = self.notifications.iter().all(|n| n.kind == Kind::Terminal);
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

    /// The message's title (a notification's, a summary's, the test's), in one line whatever a
    /// label holds (`plain_text`: it becomes an e-mail's subject too).
    pub fn title(&self) -> String {
        let title = match self {
            Message::One(n) => n.title(),
            Message::Summary(s) => s.title(),
            Message::Test { .. } => "NeverMiss test notification".to_owned(),
        };
        crate::plain_text::one_line(&title)
    }

    /// The message's text, its line breaks kept and no other control of layout (`plain_text`).
    pub fn body(&self) -> String {
        let body = match self {
            Message::One(n) => n.body(),
            Message::Summary(s) => s.body(),
            Message::Test { channel } => format!("The channel \"{channel}\" works: finished jobs will be announced here."),
        };
        crate::plain_text::shown(&body)
    }

    /// The link to what its job produced (one notification's only).
    pub fn result_url(&self) -> Option<&str> {
        match self {
            Message::One(n) => n.result_url(),
            _ => None,
        }
    }

    /// Its job's first image (one notification's only).
    pub fn image_url(&self) -> Option<&str> {
        match self {
            Message::One(n) => n.image_url(),
            _ => None,
        }
    }

    /// What can be done from it (one notification's only: `Notification::actions`).
    pub fn actions(&self) -> Vec<Action> {
        match self {
            Message::One(n) => n.actions(),
            _ => Vec::new(),
        }
    }

    /// Its job's page on the provider's site (one notification's only).
    pub fn provider_url(&self) -> Option<&str> {
        match self {
            Message::One(n) => n.provider_url.as_deref(),
            _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn about(provider: &str, kind: Kind, state: JobState) -> Notification {
        Notification { kind, ..crate::channels::finished_for_test(1, (provider, "j-1"), state, "a job", None, 0) }
    }

    /// What each notification offers: a finished job its links, a stuck one the cancel too
    /// (unless its provider has no cancel call), one about no job nothing.
    #[test]
    fn each_kind_offers_its_actions() {
        let mut done = about("replicate", Kind::Terminal, JobState::Succeeded);
        assert_eq!(done.actions(), [Action::Open]);
        done.result = Some(JobResult { text: None, urls: vec!["https://files.example/a.png".into()], image: None });
        done.provider_url = Some("https://replicate.com/p/j-1".into());
        assert_eq!(done.actions(), [Action::Open, Action::Result, Action::Provider]);
        let mut stuck = about("replicate", Kind::Stuck, JobState::Running);
        stuck.provider_url = Some("https://replicate.com/p/j-1".into());
        assert_eq!(stuck.actions(), [Action::Open, Action::Provider, Action::Cancel]);
        let on_a_device_that_may_not = Notification { may_not_cancel: true, ..stuck.clone() };
        assert_eq!(on_a_device_that_may_not.actions(), [Action::Open, Action::Provider]);
        assert_eq!(about("generic", Kind::Stuck, JobState::Running).actions(), [Action::Open]);
        assert_eq!(about("openai", Kind::Slow, JobState::Running).actions(), [Action::Open, Action::Cancel]);
        assert_eq!(about("fal", Kind::Abandoned, JobState::Running).actions(), [Action::Open]);
        let tunnel = Notification {
            subject: Subject::Tunnel { tunnel: "bore".into(), down_since: 0 },
            ..about("", Kind::TunnelDown, JobState::Unknown)
        };
        assert!(tunnel.actions().is_empty());
        for action in [Action::Open, Action::Result, Action::Provider, Action::Cancel] {
            assert_eq!(Action::from_key(action.key()), Some(action));
        }
        assert_eq!(Action::from_key("default"), None);
    }
}
