//! The outbox dispatcher: delivers the side effects the merge point enqueued (one row per job and
//! kind) to a `Notifier`, marks them delivered, and retries failures with backoff. Rows left
//! pending by a crash go out at the next start; the notification carries the job's identity so a
//! repeat replaces rather than stacks. Exactly once in the record, at least once in delivery.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::params;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::job::{now_ms, JobState};
use crate::store::{queries, Store};

/// What kind of side effect a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The job reached a terminal state.
    Terminal,
    /// The job has been unfinished for longer than the stuck threshold.
    Stuck,
    /// The tunnel has been down past its alert threshold (one per down period; `job_id` says
    /// which tunnel, since when and why).
    TunnelDown,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Terminal => "terminal",
            Kind::Stuck => "stuck",
            Kind::TunnelDown => "tunnel_down",
        }
    }

    fn parse(s: &str) -> Kind {
        match s {
            "stuck" => Kind::Stuck,
            "tunnel_down" => Kind::TunnelDown,
            _ => Kind::Terminal,
        }
    }
}

/// One notification, with what a person needs to read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub kind: Kind,
    pub provider: String,
    pub job_id: String,
    pub label: Option<String>,
    pub state: JobState,
    pub error: Option<String>,
    /// From the job's creation to its end, when known.
    pub duration_ms: Option<i64>,
}

impl Notification {
    /// A stable identity for the platform (one per job and kind), so a repeat replaces.
    pub fn identity(&self) -> String {
        format!("nevermiss:{}:{}:{}", self.provider, self.job_id, self.kind.as_str())
    }

    pub fn title(&self) -> String {
        let name = self.label.as_deref().unwrap_or(&self.job_id);
        match self.kind {
            Kind::Stuck => format!("Stuck: {name}"),
            Kind::TunnelDown => "Tunnel down: providers cannot reach NeverMiss".to_owned(),
            Kind::Terminal => match self.state {
                JobState::Succeeded => format!("Succeeded: {name}"),
                JobState::Failed => format!("Failed: {name}"),
                JobState::Canceled => format!("Canceled: {name}"),
                other => format!("{other}: {name}"),
            },
        }
    }

    pub fn body(&self) -> String {
        if self.kind == Kind::TunnelDown {
            return format!("{}\nWebhooks are lost until it is back; polling goes on.", self.job_id);
        }
        let mut body = format!("{} · {}", self.provider, self.job_id);
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
        let (provider, job_id) = (n.provider.clone(), n.job_id.clone());
        let open_job = self.open_job.clone();
        let clickable = open_job.0.get().is_some();
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
                        if action == "default" || action == "open" {
                            open_job.open(&provider, &job_id);
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
            let due = self.store.read(move |conn| read_due(conn, now, 100)).await?;
            if due.is_empty() {
                break;
            }
            self.deliver(due).await?;
        }
        let next: Option<i64> = self
            .store
            .read(|conn| {
                conn.query_row("SELECT min(next_attempt_at) FROM outbox WHERE delivered_at IS NULL", [], |r| r.get(0))
            })
            .await?;
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
            let announced = if self.settings.notifies(what) { self.notifier.notify(&notification).await } else { Ok(()) };
            match announced {
                Ok(()) => delivered.push((id, notification.provider, notification.job_id, notification.kind == Kind::Terminal)),
                Err(e) => {
                    let attempts = attempts + 1;
                    let delay = backoff(attempts);
                    tracing::warn!(identity = %notification.identity(), attempts, retry_in = ?delay, error = %e, "notification failed; will retry");
                    let reason = e.0;
                    self.store
                        .write(move |conn| {
                            conn.prepare_cached("UPDATE outbox SET attempts = ?2, next_attempt_at = ?3, last_error = ?4 WHERE id = ?1")?
                                .execute(params![id, attempts, now_ms() + delay.as_millis() as i64, reason])
                        })
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
            .write(move |conn| {
                let now = now_ms();
                let mut jobs = Vec::with_capacity(delivered.len());
                for (id, provider, job_id, is_terminal) in &delivered {
                    let marked = conn
                        .prepare_cached("UPDATE outbox SET delivered_at = ?2, attempts = attempts + 1 WHERE id = ?1 AND delivered_at IS NULL")?
                        .execute(params![id, now])?;
                    queries::bump(conn, "notifications_delivered", marked as i64)?;
                    if *is_terminal {
                        conn.prepare_cached("UPDATE jobs SET notified_at = ?3 WHERE provider = ?1 AND job_id = ?2 AND notified_at IS NULL")?
                            .execute(params![provider, job_id, now])?;
                    }
                    jobs.push(queries::job(conn, provider, job_id)?);
                }
                Ok(jobs)
            })
            .await?;
        for job in jobs.into_iter().flatten() {
            self.changes.job_changed(job);
        }
        Ok(())
    }
}

fn read_due(conn: &rusqlite::Connection, now: i64, limit: i64) -> rusqlite::Result<Vec<Pending>> {
    let mut stmt = conn.prepare_cached(
        "SELECT o.id, o.kind, o.provider, o.job_id, o.state, o.attempts, j.label, j.error, j.created_at, j.finished_at
         FROM outbox o LEFT JOIN jobs j ON j.provider = o.provider AND j.job_id = o.job_id
         WHERE o.delivered_at IS NULL AND o.next_attempt_at <= ?1
         ORDER BY o.next_attempt_at, o.id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now, limit], |row| {
        let kind: String = row.get(1)?;
        let state: Option<String> = row.get(4)?;
        let created_at: Option<i64> = row.get(8)?;
        let finished_at: Option<i64> = row.get(9)?;
        let kind = Kind::parse(&kind);
        let duration_ms = match (kind, created_at, finished_at) {
            (Kind::Terminal, Some(c), Some(f)) => Some(f - c),
            (Kind::Stuck, Some(c), _) => Some(now - c),
            _ => None,
        };
        Ok(Pending {
            id: row.get(0)?,
            attempts: row.get(5)?,
            notification: Notification {
                kind,
                provider: row.get(2)?,
                job_id: row.get(3)?,
                label: row.get(6)?,
                state: state.as_deref().and_then(JobState::parse).unwrap_or(JobState::Unknown),
                error: row.get(7)?,
                duration_ms,
            },
        })
    })?;
    rows.collect()
}
