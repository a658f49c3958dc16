//! The desktop sender: this machine's notifications, through the `Notifier` the host gives the
//! engine (`desktop_notifier`: the log, plus native notifications when the session can show them),
//! and what a click on a native one does.
//!
//! On freedesktop desktops (Linux, the BSDs) each notification is a `Notify` call over one D-Bus
//! connection kept for the process, and one task on it receives the clicks and closes of every
//! notification (`CLICKABLE_KEPT` are kept clickable). Each carries its outbox row as a stack tag
//! (`Notification::tag`), so the one repeat a crash can cause replaces the first. Its buttons are
//! `Notification::actions` (open, result, provider page, and cancel for a stuck or slow job, sent
//! through the engine's own admin API: `cancel_action`); its hints say its urgency
//! (`Notification::is_urgent`), its sound when one is set, and its first image (`image_cache`).
//!
//! Elsewhere (macOS, Windows) notifications go through notify-rust, without a click action.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;

use super::Answer;
use crate::notification::{EngineAccess, Message, Notification, Notifier, NotifyError};

/// Shows `message` on this desktop with `notifier` (the one the host gave the engine).
pub async fn send(notifier: &dyn Notifier, message: &Message<'_>) -> Result<Answer, NotifyError> {
    notifier.notify(message).await.map(|()| "shown on this desktop".to_owned())
}

/// The log, plus the desktop when this session can show notifications (`can_show`: a
/// D-Bus session bus on Linux, a toast notifier on Windows). Without one (`serve` on a machine
/// without a desktop, or a session that has none) the desktop channel is the log alone, said once
/// at start, on every OS alike: never a channel that fails forever at something it cannot do.
pub fn default_notifier() -> Arc<dyn Notifier> {
    desktop_notifier(Arc::default())
}

/// As `default_notifier`, with what a click on a notification does.
pub fn desktop_notifier(open_job: Arc<OpenJob>) -> Arc<dyn Notifier> {
    let mut notifiers: Vec<Arc<dyn Notifier>> = vec![Arc::new(LogNotifier)];
    match can_show() {
        Ok(()) => notifiers.push(Arc::new(DesktopNotifier::new(open_job))),
        Err(why) => notifiers.push(Arc::new(NoDesktop(why))),
    }
    Arc::new(AllNotifiers(notifiers))
}

/// The desktop where this session has none (`can_show` said why): nothing to show, said
/// once in the log when the engine has started (not before: a start that fails is one line).
struct NoDesktop(String);

#[async_trait]
impl Notifier for NoDesktop {
    async fn notify(&self, _m: &Message<'_>) -> Result<(), NotifyError> {
        Ok(())
    }

    fn attach(&self, _engine: &EngineAccess) {
        tracing::info!(reason = %self.0, "no desktop notifications in this session: the desktop channel writes to the log only");
    }
}

/// Writes each notification to the log. Always available.
pub struct LogNotifier;

#[async_trait]
impl Notifier for LogNotifier {
    async fn notify(&self, m: &Message<'_>) -> Result<(), NotifyError> {
        match m {
            // A summary names the notifications it stands for.
            Message::Summary(s) => {
                let covers: Vec<String> = s.notifications.iter().map(Notification::identity).collect();
                tracing::info!(target: "nevermiss::notification", identity = %m.identity(), tag = %m.tag(), covers = %covers.join(","), title = %m.title(), body = %m.body(), "notification");
            }
            _ => {
                let actions: Vec<&str> = m.actions().iter().map(|a| a.key()).collect();
                tracing::info!(target: "nevermiss::notification", identity = %m.identity(), tag = %m.tag(), title = %m.title(), body = %m.body(), actions = %actions.join(","), "notification")
            }
        }
        Ok(())
    }
}

/// Every notifier in turn; delivered only when all of them succeeded.
pub struct AllNotifiers(pub Vec<Arc<dyn Notifier>>);

#[async_trait]
impl Notifier for AllNotifiers {
    async fn notify(&self, m: &Message<'_>) -> Result<(), NotifyError> {
        for notifier in &self.0 {
            notifier.notify(m).await?;
        }
        Ok(())
    }

    fn attach(&self, engine: &EngineAccess) {
        for notifier in &self.0 {
            notifier.attach(engine);
        }
    }
}

/// Whether this session can show desktop notifications at all, and if not, why: on Linux and
/// the BSDs a D-Bus session bus (`DBUS_SESSION_BUS_ADDRESS`), on Windows a toast notifier (the
/// WinRT class `ToastNotificationManager` makes one for the app id notify-rust shows toasts as;
/// a session without it, such as a service's or Wine's, answers `REGDB_E_CLASSNOTREG`). macOS:
/// always, in a build with the `macos-notifications` feature (the default).
pub fn can_show() -> Result<(), String> {
    if cfg!(all(target_os = "macos", not(feature = "macos-notifications"))) {
        return Err("this build has no macOS notifications (built without the macos-notifications feature)".into());
    }
    #[cfg(all(unix, not(target_os = "macos")))]
    {
        if std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none() {
            return Err("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)".into());
        }
    }
    #[cfg(windows)]
    {
        use windows::core::HSTRING;
        use windows::UI::Notifications::ToastNotificationManager;
        /// notify-rust's toasts go out as PowerShell's app id when none is given (its default).
        const POWERSHELL_APP_ID: &str = "{1AC14E77-02E7-4E5D-B744-2EB1AE5198B7}\\WindowsPowerShell\\v1.0\\powershell.exe";
        ToastNotificationManager::CreateToastNotifierWithId(&HSTRING::from(POWERSHELL_APP_ID))
            .map_err(|e| format!("no toast notifier in this session ({e})"))?;
    }
    Ok(())
}

/// What to do when the user clicks a notification (or its "Open" action): set by the desktop
/// shell once its window exists; called with the job's provider and id. Notifications shown
/// before it is set have no action, which is why the shell opens the outbox's gate only after
/// setting it. Its URL opener (the system's browser) opens a result or a provider's page.
#[derive(Default)]
pub struct OpenJob {
    job: OnceLock<Box<OpenJobFn>>,
    url: OnceLock<Box<OpenUrlFn>>,
}

/// Opens the window at a job: called with its provider and id.
type OpenJobFn = dyn Fn(&str, &str) + Send + Sync;
/// Opens a URL (a job's result, its page on the provider's site).
type OpenUrlFn = dyn Fn(&str) + Send + Sync;

impl OpenJob {
    pub fn set(&self, open: impl Fn(&str, &str) + Send + Sync + 'static) {
        let _ = self.job.set(Box::new(open));
    }

    /// How a result's or a provider's URL is opened (the shell: the system's browser).
    pub fn set_url_opener(&self, open: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.url.set(Box::new(open));
    }

    pub fn is_set(&self) -> bool {
        self.job.get().is_some()
    }

    /// Whether URLs can be opened (the `result` and `provider` actions are offered).
    pub fn opens_urls(&self) -> bool {
        self.url.get().is_some()
    }

    #[cfg_attr(not(all(unix, not(target_os = "macos"))), allow(dead_code))]
    fn open(&self, provider: &str, job_id: &str) {
        if let Some(open) = self.job.get() {
            open(provider, job_id);
        }
    }

    #[cfg_attr(not(all(unix, not(target_os = "macos"))), allow(dead_code))]
    fn open_url(&self, url: &str) {
        if let Some(open) = self.url.get() {
            open(url);
        }
    }
}

/// A native desktop notification; clickable (it opens its job) once `open_job` is set.
pub struct DesktopNotifier {
    #[cfg_attr(not(all(unix, not(target_os = "macos"))), allow(dead_code))]
    open_job: Arc<OpenJob>,
    /// The engine's settings and admin API, once it started (`Notifier::attach`).
    #[cfg_attr(not(all(unix, not(target_os = "macos"))), allow(dead_code))]
    engine: Arc<OnceLock<EngineAccess>>,
    #[cfg(all(unix, not(target_os = "macos")))]
    bus: tokio::sync::Mutex<Option<Arc<freedesktop::Bus>>>,
    #[cfg(all(unix, not(target_os = "macos")))]
    images: image_cache::ImageCache,
}

impl DesktopNotifier {
    pub fn new(open_job: Arc<OpenJob>) -> DesktopNotifier {
        DesktopNotifier {
            open_job,
            engine: Arc::default(),
            #[cfg(all(unix, not(target_os = "macos")))]
            bus: tokio::sync::Mutex::new(None),
            #[cfg(all(unix, not(target_os = "macos")))]
            images: image_cache::ImageCache::in_user_cache_dir(),
        }
    }
}

impl Default for DesktopNotifier {
    fn default() -> Self {
        DesktopNotifier::new(Arc::default())
    }
}

#[cfg(all(unix, not(target_os = "macos")))]
pub use freedesktop::{CLICKABLE_KEPT, URGENCY_CRITICAL, URGENCY_NORMAL};

#[cfg(all(unix, not(target_os = "macos")))]
mod cancel_action;
#[cfg(all(unix, not(target_os = "macos")))]
mod image_cache;

#[cfg(all(unix, not(target_os = "macos")))]
mod freedesktop {
    use std::collections::{HashMap, VecDeque};
    use std::num::NonZeroUsize;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures_util::StreamExt;
    use zbus::message::Type;
    use zbus::{Connection, MatchRule, MessageStream, Variant};

    use super::*;
    use crate::notification::Action;

    const NAME: &str = "org.freedesktop.Notifications";
    const PATH: &str = "/org/freedesktop/Notifications";
    const INTERFACE: &str = "org.freedesktop.Notifications";
    /// How many recent notifications stay clickable.
    pub const CLICKABLE_KEPT: usize = 1024;
    /// A notification server that does not answer `Notify` in this time has failed the attempt.
    const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);
    /// Signals queued for the listener before the oldest are dropped.
    const SIGNALS_QUEUED: usize = 256;
    /// The freedesktop `urgency` hint's levels (a byte): normal, and critical for urgent ones.
    pub const URGENCY_NORMAL: u8 = 1;
    pub const URGENCY_CRITICAL: u8 = 2;

    /// What a clickable notification's actions open: its job, and the URLs of its result and of
    /// its provider's page when it offers them.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) struct Target {
        job: (String, String),
        result: Option<String>,
        provider: Option<String>,
        /// Whether it offers `cancel`; then the name its answer shows and the tag it replaces.
        cancel: Option<CancelTarget>,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(super) struct CancelTarget {
        name: String,
        tag: String,
    }

    /// The targets of the clickable notifications shown, by the server's notification id; the
    /// newest `CLICKABLE_KEPT`.
    #[derive(Default)]
    pub(super) struct Clicks {
        jobs: HashMap<u32, Target>,
        order: VecDeque<u32>,
    }

    impl Clicks {
        fn insert(&mut self, id: u32, job: Target) {
            self.jobs.insert(id, job);
            self.order.push_back(id);
            while self.order.len() > CLICKABLE_KEPT {
                if let Some(oldest) = self.order.pop_front() {
                    self.jobs.remove(&oldest);
                }
            }
        }

        fn take(&mut self, id: u32) -> Option<Target> {
            self.jobs.remove(&id)
        }

        pub(super) fn len(&self) -> usize {
            self.jobs.len()
        }
    }

    /// The one session-bus connection, and its listener (stopped when this is dropped).
    pub(super) struct Bus {
        connection: Connection,
        pub(super) clicks: Arc<Mutex<Clicks>>,
        listener: tokio::task::AbortHandle,
    }

    impl Drop for Bus {
        fn drop(&mut self) {
            self.listener.abort();
        }
    }

    impl Bus {
        async fn connect(host: Host) -> zbus::Result<Bus> {
            let connection = Connection::session().await?;
            let rule = MatchRule::builder().msg_type(Type::Signal).interface(INTERFACE).path(PATH).build()?;
            let signals = MessageStream::for_match_rule(rule, &connection, NonZeroUsize::new(SIGNALS_QUEUED)).await?;
            let clicks = Arc::new(Mutex::new(Clicks::default()));
            let listener = tokio::spawn(listen(signals, clicks.clone(), host, connection.clone())).abort_handle();
            tracing::debug!(unique_name = ?connection.unique_name(), "notifications: connected to the session bus");
            Ok(Bus { connection, clicks, listener })
        }
    }

    /// What the listener acts with: the shell's openers, and the engine once attached.
    #[derive(Clone)]
    pub(super) struct Host {
        open_job: Arc<OpenJob>,
        engine: Arc<OnceLock<EngineAccess>>,
    }

    /// The one listener: a click ("default", or the "open" action) opens its job, the "result"
    /// and "provider" actions open their URLs, "cancel" asks for the cancel and shows the answer;
    /// a closed notification is forgotten.
    async fn listen(mut signals: MessageStream, clicks: Arc<Mutex<Clicks>>, host: Host, connection: Connection) {
        while let Some(message) = signals.next().await {
            let Ok(message) = message else { continue };
            let header = message.header();
            match header.member().map(|m| m.as_str()) {
                Some("ActionInvoked") => {
                    let Ok((id, key)) = message.body().deserialize::<(u32, String)>() else { continue };
                    let action = if key == "default" { Some(Action::Open) } else { Action::from_key(&key) };
                    let Some(action) = action else { continue };
                    let Some(target) = clicks.lock().unwrap().take(id) else {
                        tracing::debug!(notification = id, "a click on a notification not ours, or too old to open");
                        continue;
                    };
                    let (provider, job_id) = &target.job;
                    match (action, &target.result, &target.provider, &target.cancel) {
                        (Action::Result, Some(url), _, _) | (Action::Provider, _, Some(url), _) => {
                            tracing::debug!(notification = id, %provider, %job_id, key, "notification action: opening its URL");
                            host.open_job.open_url(url);
                        }
                        (Action::Cancel, _, _, Some(cancel)) => match host.engine.get().cloned() {
                            Some(engine) => {
                                tracing::info!(notification = id, %provider, %job_id, "notification action: cancel");
                                let answer = Answer { replaces: id, target: target.clone(), cancel: cancel.clone() };
                                tokio::spawn(answer.cancel_and_say(engine, connection.clone(), clicks.clone()));
                            }
                            None => host.open_job.open(provider, job_id),
                        },
                        _ => {
                            tracing::debug!(notification = id, %provider, %job_id, "notification clicked: opening its job");
                            host.open_job.open(provider, job_id);
                        }
                    }
                }
                Some("NotificationClosed") => {
                    if let Ok((id, _reason)) = message.body().deserialize::<(u32, u32)>() {
                        clicks.lock().unwrap().take(id);
                    }
                }
                _ => {}
            }
        }
        tracing::debug!("notifications: the session bus connection closed; the listener stops");
    }

    /// The `cancel` action of one notification: asked, then answered in its place.
    struct Answer {
        /// The notification the action was chosen on (its id is the `replaces_id`).
        replaces: u32,
        target: Target,
        cancel: CancelTarget,
    }

    impl Answer {
        /// Asks the engine's admin API to cancel the job, then shows what it answered in a
        /// notification that replaces the one acted on (same id, same stack tag); a click on
        /// it opens the job.
        async fn cancel_and_say(self, engine: EngineAccess, connection: Connection, clicks: Arc<Mutex<Clicks>>) {
            let (provider, job_id) = &self.target.job;
            let answered = cancel_action::request(&engine, provider, job_id).await;
            let (title, body) = answered.said(provider, job_id, &self.cancel.name);
            let tag = self.cancel.tag.as_str();
            let hints: HashMap<&str, Variant<'_>> = HashMap::from([
                ("x-dunst-stack-tag", Variant::from(tag)),
                ("x-canonical-private-synchronous", Variant::from(tag)),
                ("urgency", Variant::from(URGENCY_NORMAL)),
            ]);
            let actions = vec!["default", "Open", Action::Open.key(), Action::Open.label()];
            let args = ("NeverMiss", self.replaces, "", title.as_str(), body.as_str(), actions, hints, -1i32);
            let call = connection.call_method(Some(NAME), PATH, Some(INTERFACE), "Notify", &args);
            match tokio::time::timeout(NOTIFY_TIMEOUT, call).await {
                Ok(Ok(reply)) => {
                    if let Ok(id) = reply.body().deserialize::<u32>() {
                        let opens = Target { cancel: None, result: None, provider: None, ..self.target };
                        clicks.lock().unwrap().insert(id, opens);
                        tracing::debug!(notification = id, title, "the cancel's answer shown");
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot show the cancel's answer"),
                Err(_) => tracing::warn!("the notification server did not answer in time: the cancel's answer is not shown"),
            }
        }
    }

    impl DesktopNotifier {
        /// The connection, made at the first notification and again after one failed.
        pub(super) async fn bus(&self) -> Result<Arc<Bus>, NotifyError> {
            let mut bus = self.bus.lock().await;
            if let Some(bus) = bus.as_ref() {
                return Ok(bus.clone());
            }
            let host = Host { open_job: self.open_job.clone(), engine: self.engine.clone() };
            let connected =
                Arc::new(Bus::connect(host).await.map_err(|e| NotifyError::channel(format!("cannot reach the session bus: {e}")))?);
            *bus = Some(connected.clone());
            Ok(connected)
        }

        async fn forget(&self, failed: &Arc<Bus>) {
            let mut bus = self.bus.lock().await;
            if bus.as_ref().is_some_and(|b| Arc::ptr_eq(b, failed)) {
                *bus = None;
            }
        }

        /// How many notifications are clickable now (bounded by `CLICKABLE_KEPT`).
        pub async fn clickable(&self) -> usize {
            match self.bus.lock().await.as_ref() {
                Some(bus) => bus.clicks.lock().unwrap().len(),
                None => 0,
            }
        }
    }

    #[async_trait]
    impl Notifier for DesktopNotifier {
        async fn notify(&self, n: &Message<'_>) -> Result<(), NotifyError> {
            let bus = self.bus().await?;
            // Only a job's own notification opens it; a summary or a test opens nothing.
            let job = match n {
                Message::One(one) => one.job().map(|(provider, job_id)| (provider.to_owned(), job_id.to_owned())),
                _ => None,
            };
            let clickable = self.open_job.is_set() && job.is_some();
            let opens_urls = clickable && self.open_job.opens_urls();
            let engine = self.engine.get();
            // What can be done from it, of what this host can do: URLs need the shell's opener,
            // a cancel the engine's API.
            let offered: Vec<Action> = n
                .actions()
                .into_iter()
                .filter(|a| match a {
                    Action::Open => clickable,
                    Action::Result | Action::Provider => opens_urls,
                    Action::Cancel => clickable && engine.is_some(),
                })
                .collect();
            let (title, body, tag) = (n.title(), crate::plain_text::shown(&n.body()), n.tag());
            let target = job.map(|job| Target {
                job,
                result: n.result_url().filter(|_| offered.contains(&Action::Result)).map(str::to_owned),
                provider: n.provider_url().filter(|_| offered.contains(&Action::Provider)).map(str::to_owned),
                cancel: offered.contains(&Action::Cancel).then(|| CancelTarget { name: name_of(n), tag: tag.clone() }),
            });
            let mut actions: Vec<&str> = Vec::new();
            if !offered.is_empty() {
                actions.extend(["default", "Open"]);
            }
            for action in &offered {
                actions.extend([action.key(), action.label()]);
            }
            let urgency: u8 = if n.is_urgent() { URGENCY_CRITICAL } else { URGENCY_NORMAL };
            let sound = engine.and_then(|e| e.settings.desktop_sound(n.is_urgent()));
            let image = match n.image_url() {
                Some(url) => {
                    // The user's own configuration is the one exception to "public https only":
                    // the job's provider's configured base URL (`image_cache`).
                    let configured = match n {
                        Message::One(one) => one.job().and_then(|(provider, _)| match engine {
                            Some(engine) => engine.settings.base_url(provider),
                            None => crate::settings::env_base_url(provider),
                        }),
                        _ => None,
                    }
                    .and_then(|base| image_cache::ConfiguredOrigin::of(&base));
                    self.images.local_copy(url, configured.as_ref()).await.map(|path| format!("file://{}", path.display()))
                }
                None => None,
            };
            let mut hints: HashMap<&str, Variant<'_>> = HashMap::from([
                ("x-dunst-stack-tag", Variant::from(tag.as_str())),
                ("x-canonical-private-synchronous", Variant::from(tag.as_str())),
                ("urgency", Variant::from(urgency)),
            ]);
            if let Some(image) = image.as_deref() {
                hints.insert("image-path", Variant::from(image));
            }
            if let Some(sound) = sound.as_deref() {
                hints.insert("sound-name", Variant::from(sound));
            }
            // app name, replaces_id (none), icon, summary, body, actions, hints, timeout (server's)
            let args = ("NeverMiss", 0u32, "", title.as_str(), body.as_str(), actions, hints, -1i32);
            let call = bus.connection.call_method(Some(NAME), PATH, Some(INTERFACE), "Notify", &args);
            let answer = match tokio::time::timeout(NOTIFY_TIMEOUT, call).await {
                Ok(answer) => answer,
                Err(_) => {
                    self.forget(&bus).await;
                    return Err(NotifyError::channel(format!("the notification server did not answer in {NOTIFY_TIMEOUT:?}")));
                }
            };
            let id: u32 = match answer.and_then(|reply| reply.body().deserialize()) {
                Ok(id) => id,
                Err(e) => {
                    // The server answered with an error: the connection is fine. Anything else
                    // (the bus went away): connect again at the next attempt.
                    if !matches!(e, zbus::Error::MethodError(..) | zbus::Error::FDO(_)) {
                        self.forget(&bus).await;
                    }
                    return Err(NotifyError::channel(format!("the notification server refused: {e}")));
                }
            };
            if let (true, Some(target)) = (clickable, target) {
                bus.clicks.lock().unwrap().insert(id, target);
            }
            tracing::debug!(notification = id, tag, clickable, urgency, ?sound, image = image.is_some(), "shown");
            Ok(())
        }

        fn attach(&self, engine: &EngineAccess) {
            let _ = self.engine.set(engine.clone());
        }
    }

    /// How the cancel's answer names the job: its label, else its id.
    fn name_of(message: &Message<'_>) -> String {
        match message {
            Message::One(n) => n.label.clone().or_else(|| n.job().map(|(_, id)| id.to_owned())).unwrap_or_default(),
            _ => String::new(),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_clickable_map_keeps_only_the_newest() {
            let mut clicks = Clicks::default();
            let target = |job_id: String| Target { job: ("generic".into(), job_id), result: None, provider: None, cancel: None };
            for id in 0..(CLICKABLE_KEPT as u32 + 500) {
                clicks.insert(id, target(format!("job-{id}")));
            }
            assert_eq!(clicks.len(), CLICKABLE_KEPT);
            assert_eq!(clicks.order.len(), CLICKABLE_KEPT);
            assert!(clicks.take(0).is_none(), "the oldest was let go");
            assert_eq!(clicks.take(CLICKABLE_KEPT as u32 + 499), Some(target(format!("job-{}", CLICKABLE_KEPT + 499))));
            // Closed or clicked notifications leave the map at once; the order is bounded too.
            for id in 0..10_000u32 {
                clicks.insert(100_000 + id, target("x".into()));
                clicks.take(100_000 + id);
            }
            assert_eq!(clicks.len(), 0);
            assert!(clicks.order.len() <= CLICKABLE_KEPT);
        }
    }
}

#[cfg(any(windows, all(target_os = "macos", feature = "macos-notifications")))]
#[async_trait]
impl Notifier for DesktopNotifier {
    async fn notify(&self, n: &Message<'_>) -> Result<(), NotifyError> {
        let (title, body) = (n.title(), crate::plain_text::shown(&n.body()));
        tokio::task::spawn_blocking(move || {
            notify_rust::Notification::new()
                .appname("NeverMiss")
                .summary(&title)
                .body(&body)
                .show()
                .map(|_| ())
                .map_err(|e| NotifyError::channel(e.to_string()))
        })
        .await
        .map_err(|e| NotifyError::channel(e.to_string()))?
    }
}

/// A build without a native notifier for this OS (macOS without `macos-notifications`): never
/// chosen, `can_show` says why.
#[cfg(not(any(all(unix, not(target_os = "macos")), windows, all(target_os = "macos", feature = "macos-notifications"))))]
#[async_trait]
impl Notifier for DesktopNotifier {
    async fn notify(&self, _: &Message<'_>) -> Result<(), NotifyError> {
        Err(NotifyError::channel(can_show().err().unwrap_or_default()))
    }
}
