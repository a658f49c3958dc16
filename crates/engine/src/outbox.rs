//! The outbox dispatcher: delivers the side effects the merge point enqueued (one row per job and
//! kind) to a `Notifier`, marks them delivered, and retries failures with backoff. Rows left
//! pending by a crash go out at the next start; the notification carries the job's identity so a
//! repeat replaces rather than stacks. Exactly once in the record, at least once in delivery.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tracing::Instrument;
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::job::{now_ms, rfc3339, JobState};
use crate::store::{self, jobs, Store};

pub use crate::store::outbox::{Kind, Subject};

/// One notification, with what a person needs to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub kind: Kind,
    pub subject: Subject,
    pub label: Option<String>,
    pub state: JobState,
    pub error: Option<String>,
    /// From the job's creation to its end, when known.
    pub duration_ms: Option<i64>,
}

impl Notification {
    /// A stable identity for the platform (one per subject and kind), so a repeat replaces.
    pub fn identity(&self) -> String {
        match &self.subject {
            Subject::Job { provider, job_id } => format!("nevermiss:{provider}:{job_id}:{}", self.kind.as_str()),
            Subject::Tunnel { tunnel, down_since } => format!("nevermiss:tunnel:{tunnel}@{down_since}:{}", self.kind.as_str()),
        }
    }

    /// The job's provider and id, when the notification is about a job.
    pub fn job(&self) -> Option<(&str, &str)> {
        match &self.subject {
            Subject::Job { provider, job_id } => Some((provider, job_id)),
            Subject::Tunnel { .. } => None,
        }
    }

    pub fn title(&self) -> String {
        let name = self.label.as_deref().or(self.job().map(|(_, job_id)| job_id)).unwrap_or_default();
        match self.kind {
            Kind::Stuck => format!("Stuck: {name}"),
            Kind::TunnelDown => "Tunnel down: providers cannot reach NeverMiss".to_owned(),
            Kind::Terminal => match self.state {
                JobState::Succeeded => format!("Succeeded: {name}"),
                JobState::Failed => format!("Failed: {name}"),
                JobState::Canceled => format!("Canceled: {name}"),
                JobState::NeedsInput => format!("Needs input: {name}"),
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
            Subject::Job { provider, job_id } => (provider, job_id),
        };
        let mut body = format!("{provider} · {job_id}");
        if let Some(ms) = self.duration_ms {
            body.push_str(&format!(" · {}", human_duration(ms)));
        }
        if let Some(error) = &self.error {
            body.push_str(&format!("\n{error}"));
        }
        body
    }
}

pub fn human_duration(ms: i64) -> String {
    let s = (ms / 1000).max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        _ => format!("{}h {}m", s / 3600, (s % 3600) / 60),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotifyError(pub String);

/// Where side effects go. Implementations must be safe to call twice for one notification.
#[async_trait]
pub trait Notifier: Send + Sync {
    async fn notify(&self, notification: &Notification) -> Result<(), NotifyError>;
}

/// Writes each notification to the log. Always available.
pub struct LogNotifier;

#[async_trait]
impl Notifier for LogNotifier {
    async fn notify(&self, n: &Notification) -> Result<(), NotifyError> {
        tracing::info!(target: "nevermiss::notification", identity = %n.identity(), title = %n.title(), body = %n.body(), "notification");
        Ok(())
    }
}

/// What to do when the user clicks a notification (or its "Open" action): set by the desktop
/// shell once its window exists; called with the job's provider and id.
#[derive(Default)]
pub struct OpenJob(std::sync::OnceLock<Box<dyn Fn(&str, &str) + Send + Sync>>);

impl OpenJob {
    pub fn set(&self, open: impl Fn(&str, &str) + Send + Sync + 'static) {
        let _ = self.0.set(Box::new(open));
    }

    fn open(&self, provider: &str, job_id: &str) {
        if let Some(open) = self.0.get() {
            open(provider, job_id);
        }
    }
}

/// A native desktop notification (freedesktop notifications over the D-Bus session bus). The
/// job's identity is its stack tag, so a repeat after a crash replaces the first instead of
/// stacking (on servers that honour the tag, such as dunst and GNOME's).
#[derive(Default)]
pub struct DesktopNotifier {
    pub open_job: Arc<OpenJob>,
}

#[async_trait]
impl Notifier for DesktopNotifier {
    async fn notify(&self, n: &Notification) -> Result<(), NotifyError> {
        let (title, body, identity) = (n.title(), n.body(), n.identity());
        let job = n.job().map(|(provider, job_id)| (provider.to_owned(), job_id.to_owned()));
        let open_job = self.open_job.clone();
        let clickable = open_job.0.get().is_some() && job.is_some();
        tokio::task::spawn_blocking(move || {
            let mut notification = notify_rust::Notification::new();
            notification
                .appname("NeverMiss")
                .summary(&title)
                .body(&body)
                .hint(notify_rust::Hint::Custom("x-dunst-stack-tag".into(), identity.clone()))
                .hint(notify_rust::Hint::Custom("x-canonical-private-synchronous".into(), identity));
            if clickable {
                notification.action("default", "Open").action("open", "Open");
            }
            let shown = notification.show().map_err(|e| NotifyError(e.to_string()))?;
            if clickable {
                // Waits (off the async threads) until the notification is clicked or closed.
                std::thread::spawn(move || {
                    shown.wait_for_action(|action| {
                        if let (true, Some((provider, job_id))) = (action == "default" || action == "open", &job) {
                            open_job.open(provider, job_id);
                        }
                    })
                });
            }
            Ok(())
        })
        .await
        .map_err(|e| NotifyError(e.to_string()))?
    }
}

/// Every notifier in turn; delivered only when all of them succeeded.
pub struct AllNotifiers(pub Vec<Arc<dyn Notifier>>);

#[async_trait]
impl Notifier for AllNotifiers {
    async fn notify(&self, n: &Notification) -> Result<(), NotifyError> {
        for notifier in &self.0 {
            notifier.notify(n).await?;
        }
        Ok(())
    }
}

/// The log, plus the desktop when a D-Bus session bus is there to take it.
pub fn default_notifier() -> Arc<dyn Notifier> {
    desktop_notifier(Arc::default())
}

/// As `default_notifier`, with what a click on a notification does.
pub fn desktop_notifier(open_job: Arc<OpenJob>) -> Arc<dyn Notifier> {
    let mut notifiers: Vec<Arc<dyn Notifier>> = vec![Arc::new(LogNotifier)];
    if cfg!(not(target_os = "linux")) || std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some() {
        notifiers.push(Arc::new(DesktopNotifier { open_job }));
    }
    Arc::new(AllNotifiers(notifiers))
}

/// Delay before the next attempt after `attempts` failures: 2 s doubling, at most 10 minutes.
pub fn backoff(attempts: i64) -> Duration {
    let secs = 2u64.saturating_pow(attempts.clamp(1, 20) as u32).min(600);
    Duration::from_secs(secs)
}

struct Pending {
    id: i64,
    notification: Notification,
    attempts: i64,
}

impl Pending {
    fn from_due(due: store::outbox::Due, now: i64) -> Pending {
        let duration_ms = match (due.kind, due.job_created_at, due.job_finished_at) {
            (Kind::Terminal, Some(created), Some(finished)) => Some(finished - created),
            (Kind::Stuck, Some(created), _) => Some(now - created),
            _ => None,
        };
        Pending {
            id: due.id,
            attempts: due.attempts,
            notification: Notification {
                kind: due.kind,
                subject: due.subject,
                label: due.label,
                state: due.state.unwrap_or(JobState::Unknown),
                error: due.error,
                duration_ms,
            },
        }
    }
}

pub struct Outbox {
    store: Store,
    notifier: Arc<dyn Notifier>,
    settings: Arc<crate::settings::Settings>,
    changes: Arc<Changes>,
    wake: Notify,
}

impl Outbox {
    pub fn new(store: Store, notifier: Arc<dyn Notifier>, settings: Arc<crate::settings::Settings>, changes: Arc<Changes>) -> Arc<Outbox> {
        Arc::new(Outbox {
            store,
            notifier,
            settings,
            changes,
            wake: Notify::new(),
        })
    }

    /// Something was enqueued: deliver it now rather than at the next sweep.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Delivers pending rows until `shutdown`, starting with whatever a previous run left.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let next_due = match self.deliver_due().await {
                Ok(next_due) => next_due,
                Err(e) => {
                    tracing::error!(error = %e, "outbox: cannot read pending notifications");
                    Some(Duration::from_secs(5))
                }
            };
            let sleep = next_due.unwrap_or(Duration::from_secs(60));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Delivers every due row; returns how long until the next one is due, if any is pending.
    async fn deliver_due(&self) -> Result<Option<Duration>, crate::store::StoreError> {
        loop {
            let now = now_ms();
            let due = self.store.read(move |conn| store::outbox::due(conn, now, 100)).await?;
            let due: Vec<Pending> = due.into_iter().map(|row| Pending::from_due(row, now)).collect();
            if due.is_empty() {
                break;
            }
            self.deliver(due).await?;
        }
        let next = self.store.read(store::outbox::next_due_at).await?;
        Ok(next.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64)))
    }

    /// Delivers a batch of due rows, then marks the delivered ones in one write: one durable
    /// commit per batch rather than per notification, so a burst of finished jobs is not
    /// notified one fsync at a time. A crash between the calls and the mark repeats those
    /// notifications at the next start (at least once in delivery; the identity replaces).
    async fn deliver(&self, batch: Vec<Pending>) -> Result<(), crate::store::StoreError> {
        let mut delivered = Vec::new();
        for Pending { id, notification, attempts } in batch {
            let what = match notification.kind {
                Kind::Stuck => "stuck",
                Kind::TunnelDown => "tunnel_down",
                Kind::Terminal => notification.state.as_str(),
            };
            // Not announced (Settings: notify on), yet delivered in the record: exactly one side
            // effect per job either way.
            let span = tracing::debug_span!("deliver", identity = %notification.identity(), attempts);
            let announced = async {
                if self.settings.notifies(what) {
                    self.notifier.notify(&notification).await
                } else {
                    Ok(())
                }
            }
            .instrument(span.clone())
            .await;
            span.in_scope(|| tracing::debug!(ok = announced.is_ok(), "delivered"));
            match announced {
                Ok(()) => delivered.push((id, notification.kind, notification.subject)),
                Err(e) => {
                    let attempts = attempts + 1;
                    let delay = backoff(attempts);
                    tracing::warn!(identity = %notification.identity(), attempts, retry_in = ?delay, error = %e, "notification failed; will retry");
                    let reason = e.0;
                    self.store
                        .write(move |tx| store::outbox::attempt_failed(tx, id, attempts, now_ms() + delay.as_millis() as i64, &reason))
                        .await?;
                    self.changes.metrics_changed();
                }
            }
        }
        if delivered.is_empty() {
            return Ok(());
        }
        let jobs = self
            .store
            .write(move |tx| {
                let now = now_ms();
                let mut changed = Vec::with_capacity(delivered.len());
                for (id, kind, subject) in &delivered {
                    store::outbox::mark_delivered(tx, *id, now)?;
                    if let Subject::Job { provider, job_id } = subject {
                        if *kind == Kind::Terminal {
                            jobs::mark_notified(tx, provider, job_id, now)?;
                        }
                        changed.push(jobs::job(tx, provider, job_id)?);
                    }
                }
                Ok(changed)
            })
            .await?;
        for job in jobs.into_iter().flatten() {
            self.changes.job_changed(job);
        }
        Ok(())
    }
}
