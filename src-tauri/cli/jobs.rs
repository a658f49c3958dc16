//! `nevermiss track` and `nevermiss jobs`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};

use nevermiss_engine::api::jobs::TrackAnswer;
use nevermiss_engine::metrics::Metrics;
use nevermiss_engine::provider_health::{HealthStatus, ProviderHealth};
use nevermiss_engine::store::job::Job;
use nevermiss_engine::store::jobs::JobPage;

use super::client::{encode, Client};

/// What `track` may say of a job besides its id.
pub(super) struct TrackOptions {
    pub label: Option<String>,
    pub status_url: Option<String>,
    pub group: Option<String>,
}

pub(super) async fn track(client: &Client, provider: String, job_id: String, with: TrackOptions, json: bool) -> anyhow::Result<()> {
    let TrackOptions { label, status_url, group } = with;
    let body = serde_json::json!({ "provider": provider, "job_id": job_id, "label": label, "status_url": status_url, "group": group });
    let (status, body) = client.send(client.http.post(format!("{}/api/jobs?first_poll=wait", client.base)).json(&body)).await?;
    let answer: TrackAnswer = serde_json::from_value(body.clone()).context("unexpected answer from the API")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
    } else {
        let verb = if status == 201 { "now tracking" } else { "already tracking" };
        println!("{verb} {} {} ({})", answer.job.provider, answer.job.job_id, answer.job.state);
    }
    if let Some(problem) = &answer.poll_problem {
        eprintln!("warning: {problem}");
    }
    Ok(())
}

pub(super) async fn untrack(client: &Client, provider: &str, job_id: &str, json: bool) -> anyhow::Result<()> {
    let path = format!("{}/api/jobs/{}/{}/untrack", client.base, encode(provider), encode(job_id));
    let (_, body) = client.send(client.http.post(path)).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let job: Job = serde_json::from_value(body).context("unexpected answer from the API")?;
    println!("untracked {} {} (it was {}; its timeline and notifications are gone)", job.provider, job.job_id, job.state);
    Ok(())
}

pub(super) async fn jobs(client: &Client, json: bool, state: Option<String>, provider: Option<String>, limit: u32) -> anyhow::Result<()> {
    if let Some(provider) = &provider {
        // A provider the instance does not have is a mistake to say, not an empty list.
        let (_, body) = client.send(client.http.get(format!("{}/api/providers", client.base))).await?;
        let list: nevermiss_engine::api::providers::ProviderList =
            serde_json::from_value(body).context("unexpected answer from the API")?;
        if !list.providers.iter().any(|p| &p.name == provider) {
            let known: Vec<&str> = list.providers.iter().map(|p| p.name.as_str()).collect();
            bail!("no provider is named {provider:?} (known: {})", known.join(", "));
        }
    }
    let filtered = state.is_some() || provider.is_some();
    let mut query = vec![("limit", limit.to_string())];
    if let Some(state) = state {
        query.push(("state", state));
    }
    if let Some(provider) = provider {
        query.push(("provider", provider));
    }
    let request = client.http.get(format!("{}/api/jobs", client.base)).query(&query);
    let (_, body) = client.send(request).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let page: JobPage = serde_json::from_value(body).context("unexpected answer from the API")?;
    if page.jobs.is_empty() && filtered {
        println!("no jobs match (--state, --provider)");
        return Ok(());
    }
    if page.jobs.is_empty() {
        println!("no jobs yet: `nevermiss track PROVIDER JOB_ID`, or point a provider's webhook at `nevermiss url`");
        return Ok(());
    }
    let health = client.get("/api/metrics").await.ok().and_then(|m| serde_json::from_value::<Metrics>(m).ok()).map(|m| m.providers);
    let problems = problems(&page.jobs, &health.unwrap_or_default());
    println!("{:<10} {:<10} {:<36} {:<5} {:<26} LABEL", "STATE", "PROVIDER", "JOB", "BY", "UPDATED");
    for job in page.jobs {
        let by = job.terminal_source.map(|s| s.as_str()).unwrap_or("-");
        println!(
            "{:<10} {:<10} {:<36} {:<5} {:<26} {}",
            job.state.as_str(),
            job.provider,
            job.job_id,
            by,
            local_time(&job.updated_at),
            job.label.unwrap_or_default()
        );
    }
    if page.next_cursor.is_some() {
        println!("(more: --limit or --state/--provider to narrow)");
    }
    for problem in problems {
        println!("! {problem}");
    }
    Ok(())
}

/// What keeps unfinished jobs of the list from being watched: their provider cannot be polled
/// (no API key, a refused key, no status API), or polling gave up on them; one line each.
fn problems(jobs: &[Job], health: &BTreeMap<String, ProviderHealth>) -> Vec<String> {
    let unfinished = || jobs.iter().filter(|j| !j.state.is_terminal());
    let mut lines = Vec::new();
    let mut by_provider: BTreeMap<&str, usize> = BTreeMap::new();
    for job in unfinished() {
        *by_provider.entry(job.provider.as_str()).or_default() += 1;
    }
    for (provider, count) in by_provider {
        let Some(h) = health.get(provider) else { continue };
        let why = match h.status {
            HealthStatus::NotConfigured | HealthStatus::Misconfigured | HealthStatus::NoStatusApi => {
                h.message.as_deref().unwrap_or(h.status.as_str())
            }
            _ => continue,
        };
        let jobs = if count == 1 { "1 unfinished job" } else { &format!("{count} unfinished jobs") };
        lines
            .push(format!("{provider}: {jobs} above cannot be polled ({why}); only a webhook ends them. Set it up in Settings, Providers"));
    }
    let abandoned = unfinished().filter(|j| j.abandoned_at.is_some()).count();
    if abandoned > 0 {
        lines.push(format!("{abandoned} unfinished job(s) above are no longer polled (polling gave up: `nevermiss jobs --json` says why); a webhook still ends them"));
    }
    lines
}

/// An instant as the API writes it (RFC 3339, UTC) in the local time zone, to the second, with
/// its offset; as it came when it is not one.
pub(super) fn local_time(at: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(at) {
        Ok(at) => at.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M:%S %:z").to_string(),
        Err(_) => at.to_owned(),
    }
}
