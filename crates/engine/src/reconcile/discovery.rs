//! Discovery: a provider that lists its jobs, with `<provider>.discover` on, lists those created
//! since the last listing, and each goes through the merge point like a poll's answer. The first
//! listing after discovery is turned on also takes in the jobs of the week before still
//! unfinished (those running when the key was set), never the finished history (one notification
//! per old job).

use super::health::is_provider_wide;
use super::scheduler::ProviderRound;
use super::Reconciler;
use crate::after_merge;
use crate::merge_point;
use crate::providers::{FetchError, Provider};
use crate::settings;
use crate::store::counters::Counter;
use crate::store::job::{now_ms, JobEvent, Outcome};
use crate::store::{jobs, StoreError};

/// Most jobs one listing takes in (a provider's discovery, per round).
const DISCOVER_PER_PASS: usize = 2_000;
/// Each listing starts this far before the newest creation time the last one saw: a job that
/// shows up in the list a little late is still found (listing one twice changes nothing).
const DISCOVER_OVERLAP_MS: i64 = 60_000;
/// How far back the first listing after discovery is turned on looks for jobs still unfinished.
const FIRST_LISTING_LOOKBACK_MS: i64 = 7 * 86_400_000;

impl Reconciler {
    /// Whether `provider`'s list can be asked: one under the owner's account waits for it to be
    /// set (`<provider>.account`; Settings refuses discovery on before it).
    pub(super) fn discovery_ready(&self, provider: &dyn Provider) -> bool {
        let ready = !crate::owner_account::discovery_waits(&self.deps.settings, provider);
        if !ready {
            tracing::warn!(provider = provider.name(), "discovery is on and waits for the account: set {}.account", provider.name());
        }
        ready
    }

    /// Lists the provider's jobs created since the last listing and merges each (see the module's
    /// comment). A provider-wide failure (refused key, rate limit, ...) is handed back to pause
    /// the provider; any other failure of the listing is counted and polling goes on.
    pub(super) async fn discover(
        &self,
        provider: &dyn Provider,
        now: i64,
        tally: &mut ProviderRound,
    ) -> Result<Result<(), FetchError>, StoreError> {
        let name = provider.name();
        let watermark_key = format!("{name}.{}", settings::DISCOVERED_UNTIL);
        let turned_on_key = format!("{name}.{}", settings::DISCOVER_TURNED_ON);
        let watermark = self.deps.settings.get(&watermark_key).and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(now);
        let turned_on = self.deps.settings.get(&turned_on_key).and_then(|v| v.trim().parse::<i64>().ok());
        let since = turned_on.map_or(watermark, |at| watermark.min(at - FIRST_LISTING_LOOKBACK_MS));
        let found = match provider.discover(since, DISCOVER_PER_PASS).await {
            Ok(found) => found,
            Err(e) if is_provider_wide(&e) => return Ok(Err(e)),
            Err(e) => {
                tracing::warn!(provider = name, error = %e, "cannot list the provider's jobs; polling goes on");
                tally.counts.errors += 1;
                return Ok(Ok(()));
            }
        };
        if found.truncated {
            tracing::warn!(
                provider = name,
                limit = DISCOVER_PER_PASS,
                "the listing stopped before its end (its limit of jobs or pages, or a page named twice): older jobs of the window were not discovered"
            );
        }
        let events: Vec<(JobEvent, bool)> = found
            .events
            .into_iter()
            // Before the watermark (the first listing's look back): only what still runs.
            .filter(|listed| listed.created_ms >= watermark || !listed.event.state.is_terminal())
            .map(|listed| listed.event)
            .filter(|event| crate::providers::job_id::is_a_name(&event.job_id).is_ok())
            .map(JobEvent::bounded)
            .map(|event| {
                let webhook_expected = provider.webhook_expected(&event.job_id);
                (event, webhook_expected)
            })
            .collect();
        let expected: Vec<bool> = events.iter().map(|(_, expected)| *expected).collect();
        let merged = self
            .deps
            .store
            .write(move |tx| {
                let mut results = Vec::with_capacity(events.len());
                let mut new_jobs = 0;
                for (event, webhook_expected) in &events {
                    let known = jobs::exists(tx, &event.key())?;
                    new_jobs += i64::from(!known);
                    results.push(merge_point::accept_poll(tx, event, *webhook_expected, now_ms())?);
                }
                tx.count(Counter::JobsDiscovered, new_jobs);
                Ok((results, new_jobs))
            })
            .await?;
        let (results, new_jobs) = merged;
        for (result, webhook_expected) in results.into_iter().zip(expected) {
            tally.counts.checked += 1;
            if result.outcome == Outcome::Applied {
                tally.counts.applied += 1;
                tally.counts.rescues += u64::from(result.first_terminal && webhook_expected);
            }
            after_merge::after_commit(result, &self.deps.outbox, &self.deps.changes);
        }
        if new_jobs > 0 {
            tracing::info!(provider = name, new_jobs, "discovered jobs started elsewhere");
        }
        if let Some(newest) = found.newest_created_ms {
            let until = (newest - DISCOVER_OVERLAP_MS).max(watermark);
            self.deps.settings.set(&watermark_key, &until.to_string()).await?;
        }
        if turned_on.is_some() {
            self.deps.settings.set(&turned_on_key, "").await?;
        }
        Ok(Ok(()))
    }
}
