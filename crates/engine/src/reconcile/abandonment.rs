//! Abandonment: polling gives up on a job that can never be polled, with one alert.
//!
//! **Abandoned jobs.** Polling gives up on an unfinished job that can never be polled: at once
//! when it cannot be polled at all (no status URL known, an id of a kind with no status endpoint
//! such as an OpenAI eval run, a provider with no status API), and after `ABANDON_AFTER_NOT_FOUND`
//! 404s in a row spanning at least the `abandon_after_secs` setting (3 days by default) for a job
//! its provider does not know. Other failures (timeouts, 5xx, unreadable answers) are passing by
//! nature: they back off (at most an hour) but never abandon. An abandoned job shows why, raises
//! one alert (outbox kind `abandoned`), is never due again, and is still finished by a webhook
//! (the merge point ignores abandonment). Tracking it again, or a successful "poll now", takes it
//! back.

use super::Reconciler;
use crate::providers::FetchError;
use crate::store::job::{now_ms, AbandonReason, JobKey, PollErrorKind};
use crate::store::outbox::{self as store_outbox, Kind, Subject};
use crate::store::{jobs, StoreError, Tx};

/// 404s in a row (spanning at least the `abandon_after_secs` setting) after which polling gives
/// up on a job its provider does not know.
pub const ABANDON_AFTER_NOT_FOUND: i64 = 3;

impl Reconciler {
    /// Gives up on these jobs of a provider that has no status API (`error` is why); returns how
    /// many were abandoned now.
    pub(super) async fn abandon_all(&self, provider: &'static str, ids: Vec<String>, error: &FetchError) -> Result<u64, StoreError> {
        let reason = error.to_string();
        let changed = self
            .deps
            .store
            .write(move |tx| {
                let now = now_ms();
                let mut changed = Vec::new();
                for id in &ids {
                    jobs::poll_failed(tx, &JobKey::new(provider, id), now, PollErrorKind::Unpollable, &reason, 1, now)?;
                    if abandon(tx, &JobKey::new(provider, id.as_str()), AbandonReason::NoStatusApi, now)? {
                        changed.extend(jobs::job(tx, &JobKey::new(provider, id))?);
                    }
                }
                Ok(changed)
            })
            .await?;
        let abandoned = changed.len() as u64;
        if abandoned > 0 {
            self.deps.outbox.wake();
            tracing::warn!(provider, abandoned, "polling gave up on the jobs of a provider with no status API");
        }
        for job in changed {
            self.deps.changes.job_changed(job);
        }
        Ok(abandoned)
    }
}

/// Polling gives up on a job: marks it abandoned and enqueues its one alert, in the same
/// transaction. Returns whether it was abandoned now (not finished, not abandoned before).
pub(super) fn abandon(tx: &mut Tx<'_>, key: &JobKey, reason: AbandonReason, now: i64) -> crate::store::sql::Result<bool> {
    let Some(state) = jobs::abandon(tx, key, reason, now)? else {
        return Ok(false);
    };
    store_outbox::enqueue(tx, Kind::Abandoned, &Subject::job(&key.provider, &key.id), Some(state), now)?;
    Ok(true)
}
