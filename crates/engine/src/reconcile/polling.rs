//! Polling one job: the provider asked, its answer merged, a failure kept on the job with its
//! backoff (or, for a job that can never be polled, the job abandoned).

use std::time::Duration;

use super::abandonment::{abandon, ABANDON_AFTER_NOT_FOUND};
use super::health::is_provider_wide;
use super::Reconciler;
use crate::after_merge;
use crate::merge_point;
use crate::providers::{FetchError, Provider};
use crate::store::job::JobRef;
use crate::store::job::{now_ms, AbandonReason, JobEvent, JobKey, Outcome, PollErrorKind};
use crate::store::{jobs, StoreError};

/// Longest wait between polls of a failing job.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// Why a job could not be polled now (`Reconciler::poll_job`).
#[derive(Debug, thiserror::Error)]
pub enum PollNowError {
    #[error("unknown provider {0:?}")]
    UnknownProvider(String),
    /// The provider is paused (rate limited): when it may be asked again.
    #[error("{0}")]
    Paused(String),
    #[error("no job {} of {}", .0.id, .0.provider)]
    NoSuchJob(JobKey),
    /// What the provider answered instead of a state, or why it could not be asked.
    #[error(transparent)]
    Fetch(FetchError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What polling one job gave.
pub(super) enum Polled {
    Applied {
        rescue: bool,
    },
    Unchanged,
    /// A failure of this job alone; it backs off, or polling gave up on it (`abandoned`).
    JobFailed {
        error: FetchError,
        abandoned: bool,
    },
    /// A failure of the whole provider (key, rate limit, no API); the rest of its jobs wait.
    ProviderError(FetchError),
    Skipped,
    /// Not asked: the round's budget ran out.
    Deferred,
}

/// What a poll asked for now found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolledNow {
    /// The provider's answer moved the job (or filled it in).
    Applied,
    /// The provider's answer changed nothing.
    Unchanged,
}

impl Reconciler {
    /// Polls one job now (after `track`, a hint, or "poll now" in the UI), rate limits permitting.
    pub async fn poll_job(&self, key: &JobKey) -> Result<PolledNow, PollNowError> {
        let Some(provider) = self.deps.providers.get(&key.provider) else {
            return Err(PollNowError::UnknownProvider(key.provider.clone()));
        };
        if let Some(reason) = self.paused(provider.name(), now_ms(), true) {
            return Err(PollNowError::Paused(reason));
        }
        let (name, id) = (provider.name(), key.id.clone());
        let (job, failures) = self
            .deps
            .store
            .read(move |conn| jobs::poll_target(conn, &JobKey::new(name, &id)))
            .await?
            .ok_or_else(|| PollNowError::NoSuchJob(key.clone()))?;
        match self.poll(provider.as_ref(), &job, failures).await? {
            Polled::ProviderError(e) => {
                self.set_health(provider.name(), &e, now_ms());
                Err(PollNowError::Fetch(e))
            }
            Polled::JobFailed { error, .. } => Err(PollNowError::Fetch(error)),
            Polled::Applied { .. } => Ok(PolledNow::Applied),
            _ => Ok(PolledNow::Unchanged),
        }
    }

    #[tracing::instrument(name = "poll", level = "debug", skip_all, fields(provider = provider.name(), job_id = %job.job_id))]
    pub(super) async fn poll(&self, provider: &dyn Provider, job: &JobRef, failures: i64) -> Result<Polled, StoreError> {
        // An id that is no name (kept by an older build) is never put into a URL.
        let answer = match crate::providers::job_id::is_a_name(&job.job_id) {
            Ok(()) => provider.fetch_statuses(job).await.map(|mut answer| {
                answer.events = answer.events.into_iter().map(JobEvent::bounded).collect();
                answer
            }),
            Err(why) => Err(FetchError::Unpollable(why.to_string())),
        };
        match answer {
            Ok(answer) => {
                // The asked job's event and those of the jobs that belong with it (a session's
                // runs), merged in one transaction.
                let (name, asked) = (provider.name(), job.job_id.clone());
                let expected: Vec<bool> = answer.events.iter().map(|event| provider.webhook_expected(&event.job_id)).collect();
                let expected_in_tx = expected.clone();
                let results = self
                    .deps
                    .store
                    .write(move |tx| {
                        if let Some(poll_url) = answer.poll_url.as_deref() {
                            jobs::remember_poll_url(tx, &JobKey::new(name, &asked), poll_url)?;
                        }
                        let now = now_ms();
                        let results = answer
                            .events
                            .iter()
                            .zip(&expected_in_tx)
                            .map(|(event, webhook_expected)| merge_point::accept_poll(tx, event, *webhook_expected, now))
                            .collect::<Result<Vec<_>, _>>()?;
                        // A value NeverMiss does not know is counted once: when the job whose
                        // state it decided moved (not at every poll that meets it again).
                        for unknown in &answer.unknown {
                            let applied = answer
                                .events
                                .iter()
                                .zip(&results)
                                .any(|(event, result)| event.job_id == unknown.job_id && result.outcome == Outcome::Applied);
                            if applied {
                                tx.count_unknown_value(unknown.provider, unknown.field, &unknown.value);
                            }
                        }
                        Ok(results)
                    })
                    .await?;
                let (mut applied, mut rescue) = (false, false);
                for (result, webhook_expected) in results.into_iter().zip(expected) {
                    rescue |= result.first_terminal && webhook_expected;
                    applied |= result.outcome == Outcome::Applied;
                    after_merge::after_commit(result, &self.deps.outbox, &self.deps.changes);
                }
                if !applied {
                    return Ok(Polled::Unchanged);
                }
                Ok(Polled::Applied { rescue })
            }
            Err(e) if is_provider_wide(&e) => Ok(Polled::ProviderError(e)),
            Err(e) => {
                let failures = failures + 1;
                let delay = self.backoff(failures);
                let (name, key, reason) = (provider.name(), JobKey::new(provider.name(), job.job_id.as_str()), e.to_string());
                let kind = e.job_error_kind().unwrap_or(PollErrorKind::Transport);
                let abandon_after_ms = self.deps.settings.abandon_after().as_millis() as i64;
                let (job, abandoned) = self
                    .deps
                    .store
                    .write(move |tx| {
                        let now = now_ms();
                        let failing_since = jobs::poll_failed(tx, &key, now, kind, &reason, failures, now + delay.as_millis() as i64)?;
                        let give_up = match kind {
                            PollErrorKind::Unpollable => Some(AbandonReason::Unpollable),
                            PollErrorKind::NotFound if failures >= ABANDON_AFTER_NOT_FOUND && now - failing_since >= abandon_after_ms => {
                                Some(AbandonReason::NotFound)
                            }
                            _ => None,
                        };
                        let abandoned = match give_up {
                            Some(why) => abandon(tx, &key, why, now)?,
                            None => false,
                        };
                        Ok((jobs::job(tx, &key)?, abandoned))
                    })
                    .await?;
                if abandoned {
                    self.deps.outbox.wake();
                    tracing::warn!(provider = name, job_id = %job.as_ref().map(|j| j.job_id.as_str()).unwrap_or_default(), error = %e, "polling gave up on the job (abandoned)");
                }
                if let Some(job) = job {
                    self.deps.changes.job_changed(job);
                }
                Ok(Polled::JobFailed { error: e, abandoned })
            }
        }
    }

    /// Wait before polling a job again after `failures` failures in a row: the interval doubled
    /// each time, at most an hour.
    pub(super) fn backoff(&self, failures: i64) -> Duration {
        let factor = 2u32.saturating_pow(failures.clamp(0, 12) as u32);
        (self.interval() * factor).min(MAX_BACKOFF)
    }
}
