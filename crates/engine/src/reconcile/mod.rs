//! Reconciliation, the path that never drops: each provider is asked for the state of every
//! unfinished job that is due, and each answer goes through the merge point; an end first learned
//! this way is a "reconcile rescue" (a webhook went missing). Its rooms:
//! - `scheduler`: each provider's own poller (its task, its timer, its round's budget), and the
//!   pass `POST /api/reconcile` asks for;
//! - `polling`: one job asked and merged, or its failure kept on the job with a backoff;
//! - `health`: each provider's polling health, and the pauses a refused key or a 429 cause;
//! - `discovery`: the provider's own list of jobs, read at the start of a round when turned on;
//! - `abandonment`: giving up on a job that can never be polled, with one alert;
//! - `stuck`: the stuck and slower-than-usual alerts, on their own timer;
//! - `lease`: in a fleet, one process at a time polls a provider.

mod abandonment;
mod discovery;
mod health;
mod lease;
mod polling;
mod scheduler;
mod stuck;

pub use abandonment::ABANDON_AFTER_NOT_FOUND;
pub use polling::{PollNowError, PolledNow};
pub use scheduler::{PassReport, ProviderRound, RoundOutcome, ANSWER_WITHIN, CONCURRENCY};

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::outbox::Outbox;
use crate::provider_health::ProviderHealth;
use crate::providers::Providers;
use crate::settings::{self, Settings};
use crate::store::Store;
use scheduler::Poller;

/// What the reconciler works with, as the engine gives it.
pub struct ReconcilerDeps {
    pub store: Store,
    pub providers: Providers,
    pub settings: Arc<Settings>,
    pub changes: Arc<Changes>,
    pub outbox: Arc<Outbox>,
    /// `--poll-interval` (or its variable): beats the setting.
    pub interval_override: Option<u64>,
}

pub struct Reconciler {
    deps: ReconcilerDeps,
    /// One per provider, added when a recipe appears (`providers_changed`).
    pollers: RwLock<BTreeMap<&'static str, Arc<Poller>>>,
    /// The engine's shutdown, once `run` started: a poller added later stops with the others.
    shutdown: std::sync::OnceLock<CancellationToken>,
    /// Bumped when the interval setting changes: every timer starts its new wait.
    interval_version: watch::Sender<u64>,
    health: RwLock<BTreeMap<String, ProviderHealth>>,
}

impl Reconciler {
    pub fn new(deps: ReconcilerDeps) -> Arc<Reconciler> {
        let pollers = deps.providers.names().into_iter().map(|name| (name, Poller::new(name))).collect();
        Arc::new(Reconciler {
            deps,
            pollers: RwLock::new(pollers),
            shutdown: std::sync::OnceLock::new(),
            interval_version: watch::Sender::new(0),
            health: RwLock::new(BTreeMap::new()),
        })
    }

    /// The providers changed (the user's recipes were loaded again): a provider that is new gets
    /// its poller, started at once when the reconciler runs; a removed one's poller ends at its
    /// next wake.
    pub fn providers_changed(self: &Arc<Self>) {
        let mut added = Vec::new();
        {
            let mut pollers = self.pollers.write().unwrap();
            for name in self.deps.providers.names() {
                if !pollers.contains_key(name) {
                    let poller = Poller::new(name);
                    pollers.insert(name, poller.clone());
                    added.push(poller);
                }
            }
        }
        if let Some(shutdown) = self.shutdown.get() {
            for poller in added {
                poller.trigger.notify_one();
                tokio::spawn(self.clone().run_poller(poller, shutdown.clone()));
            }
        }
    }

    fn pollers(&self) -> Vec<(&'static str, Arc<Poller>)> {
        self.pollers.read().unwrap().iter().map(|(name, poller)| (*name, poller.clone())).collect()
    }

    /// The polling interval in force: `--poll-interval`/variable, else the setting, else 60 s.
    pub fn interval(&self) -> Duration {
        let stored = self.deps.settings.snapshot().poll_interval;
        let interval = self.deps.interval_override.map(Duration::from_secs).or(stored);
        interval
            .unwrap_or(Duration::from_secs(settings::DEFAULT_POLL_INTERVAL_SECS))
            .max(Duration::from_secs(settings::MIN_POLL_INTERVAL_SECS))
    }

    /// How long a round may start new requests: one interval.
    fn round_budget(&self) -> Duration {
        self.interval()
    }

    /// Whether `--poll-interval` / `NEVERMISS_POLL_INTERVAL` overrides the stored setting.
    pub fn interval_overridden(&self) -> bool {
        self.deps.interval_override.is_some()
    }

    /// The interval setting changed: every timer starts its new wait now.
    pub fn interval_changed(&self) {
        self.interval_version.send_modify(|v| *v += 1);
    }
}
