//! The faults every provider suite plays against its stand-in (`stand_in`), written once, the
//! provider's own jobs, answers and pauses given as parameters:
//! - `refused_key_until_fixed`: the API key refused (401) pauses the whole provider, never a job;
//! - `rate_limited`: a 429 pauses the provider for the wait its headers ask, and a paused provider
//!   is not asked;
//! - `JobFaults`: one job unknown, one answered with garbage, one with a server error, one too
//!   slow; each keeps its own reason and the others go on.

use std::time::Duration;

use nevermiss_engine::provider_health::HealthStatus;
use nevermiss_engine::reconcile::PassReport;
use nevermiss_engine::store::job::{JobState, Source};
use serde_json::Value;

use super::api::{pause_of, ApiClient, JobDetail};
use super::app::TestApp;
use super::stand_in::{Answer, StandIn, NOT_FOUND};

/// The API key of `provider` is refused (401): a pass says so, the provider is paused as
/// misconfigured with that reason, and `job_id` stays `unfinished` without a poll error of its own
/// (a key problem is the provider's, not the job's). Then the user fixes it (`fixed`: the API key
/// and webhook secret to configure): a pass on demand tries again at once and polls the provider
/// fine, whose health is ok again. Returns that pass.
pub async fn refused_key_until_fixed(
    app: &TestApp,
    provider: &str,
    url: &str,
    job_id: &str,
    unfinished: JobState,
    fixed: (Option<&str>, Option<&str>),
) -> PassReport {
    let refused = "refused the API key (401)";
    let report = app.api.reconcile().await;
    assert!(report.pass.providers[provider].as_str().contains(refused), "{report:?}");
    let health = app.api.wait_for_health(provider, HealthStatus::Misconfigured).await;
    assert!(health.message.as_deref().unwrap_or_default().contains(refused), "{health:?}");
    assert!(health.paused_until.is_some(), "{health:?}");
    let job = app.api.job_now(provider, job_id).await;
    assert_eq!(job.job.state, unfinished, "{job:?}");
    assert!(job.job.poll_error.is_none(), "a key problem is the provider's, not the job's: {job:?}");

    let (api_key, webhook_secret) = fixed;
    app.configure(provider, url, api_key, webhook_secret).await;
    let report = app.api.reconcile().await;
    assert_eq!(report.pass.providers[provider], "ok", "{report:?}");
    app.api.wait_for_health(provider, HealthStatus::Ok).await;
    report
}

/// The stand-in answers everything 429 (with the provider's retry headers): the provider is
/// paused as rate limited for `pause` (from its latest 429); a pass while it is paused says so and asks the
/// stand-in nothing, and `jobs` keep no poll error (the wait is the provider's). `pass_first`: a
/// pass on demand meets the 429 first (else the engine met it polling a job at once). Returns
/// how many requests the stand-in saw.
pub async fn rate_limited(app: &TestApp, stand: &StandIn, provider: &str, pause: Duration, pass_first: bool, jobs: &[&str]) -> usize {
    if pass_first {
        let report = app.api.reconcile().await;
        assert!(report.pass.providers[provider].as_str().contains("rate limited"), "{report:?}");
    }
    let health = app.api.wait_for_health(provider, HealthStatus::RateLimited).await;
    // Measured from `since`, the first 429; a second one met a moment later (a pass right after
    // a poll) pauses from its own time, a few milliseconds on.
    let paused = pause_of(&health);
    assert!(paused >= pause && paused < pause + Duration::from_secs(1), "paused {paused:?}, not {pause:?}: {health:?}");
    let asked = stand.count("");
    assert!(asked >= 1);

    // Paused: the next pass, even on demand, does not ask at all.
    let report = app.api.reconcile().await;
    let entry = report.pass.providers[provider].as_str();
    assert!(entry.starts_with("paused until") && entry.contains("rate limited"), "{report:?}");
    assert_eq!(stand.count(""), asked);
    for id in jobs {
        let job = app.api.job_now(provider, id).await;
        assert!(job.job.poll_error.is_none(), "{job:?}");
    }
    asked
}

/// The per-job faults every provider suite plays against its stand-in: one job the provider
/// does not know (404), one answered with garbage, one with a server error, one too slow, and
/// one that is fine. Each failing job keeps its own reason; the others go on.
pub struct JobFaults<'a> {
    pub gone: &'a str,
    pub bad: &'a str,
    pub broken: &'a str,
    pub slow: &'a str,
    pub fine: &'a str,
    /// The server error `broken` is answered with.
    pub status: u16,
}

impl JobFaults<'_> {
    pub fn ids(&self) -> [&str; 5] {
        [self.gone, self.bad, self.broken, self.slow, self.fine]
    }

    /// Sets the stand-in's answers (`gone` is left unknown); `slow` comes after `SLOW`.
    pub fn arrange(&self, stand: &StandIn, slow: Value, fine: Value) {
        stand.set(self.bad, Answer::Garbage);
        stand.set(self.broken, Answer::Status(self.status));
        stand.set(self.slow, Answer::Slow(slow));
        stand.json(self.fine, fine);
    }

    /// Each failing job keeps its reason and stays `unfinished`.
    pub async fn check_failing(&self, api: &ApiClient, provider: &str, unfinished: JobState) {
        let answered = format!("the provider answered {}", self.status);
        let late = "the provider did not answer in time";
        for (id, reason) in [(self.gone, NOT_FOUND), (self.bad, "malformed"), (self.broken, answered.as_str()), (self.slow, late)] {
            api.wait_for_poll_error(provider, id, reason).await;
        }
        let error = |job: JobDetail| job.job.poll_error;
        assert_eq!(error(api.job_now(provider, self.gone).await).as_deref(), Some(NOT_FOUND));
        assert!(error(api.job_now(provider, self.bad).await).unwrap().contains("malformed"));
        assert_eq!(error(api.job_now(provider, self.broken).await), Some(answered));
        assert_eq!(error(api.job_now(provider, self.slow).await).as_deref(), Some(late));
        for id in [self.gone, self.bad, self.broken, self.slow] {
            assert_eq!(api.job_now(provider, id).await.job.state, unfinished, "{id}");
        }
    }

    /// `check_failing`, and the fine one ended by polling.
    pub async fn check_jobs(&self, api: &ApiClient, provider: &str, unfinished: JobState) {
        self.check_failing(api, provider, unfinished).await;
        let fine = api.wait_for_state(provider, self.fine, JobState::Succeeded).await;
        assert_eq!(fine.job.terminal_source, Some(Source::Pull));
    }
}
