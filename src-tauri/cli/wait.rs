//! `nevermiss wait PROVIDER JOB_ID [--timeout SECS]`: tracks the job if needed and blocks until it
//! is terminal (or `wait --group NAME`: until no job of the group runs), live through the instance's event stream (`GET /api/events`; no polling), then
//! prints the final state (stdout; what it waits for and each change of state on stderr). Exit
//! codes (`exit`): 0 succeeded, 10 failed, 11 canceled, 124 timed out, 69 no running instance
//! reachable (or it stopped while waiting).

use std::time::Duration;

use anyhow::Context;

use super::client::{encode, Client};
use super::events::Event;
use super::exit::{ended, unreachable, CANCELED, FAILED, REFUSED, TIMED_OUT};
use nevermiss_engine::api::groups::GroupDetail;
use nevermiss_engine::api::jobs::{TrackAnswer, TrackRequest};
use nevermiss_engine::changes::Change;
use nevermiss_engine::store::job::{Job, JobState};

pub async fn wait(client: &Client, provider: String, job_id: String, timeout: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // The stream first, so a change between the track and the subscription cannot be missed.
    let mut events = client.events().await.map_err(unreachable)?;
    events.until_hello().await.map_err(unreachable)?;
    let request = TrackRequest { provider: provider.clone(), job_id: job_id.clone(), ..TrackRequest::default() };
    let (_, answer) = client.send(client.http.post(format!("{}/api/jobs?first_poll=wait", client.base)).json(&request)).await?;
    let TrackAnswer { mut job, poll_problem } = serde_json::from_value(answer).context("unexpected answer from the API")?;
    if let Some(problem) = poll_problem {
        eprintln!("warning: {problem}");
    }
    if !job.state.is_terminal() {
        eprintln!("waiting for {provider} {job_id}: {} (Ctrl-C stops waiting, not the job)", state_said(&job));
    }
    while !job.state.is_terminal() {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&job)?);
                    }
                    return Err(ended(TIMED_OUT, format!("{provider} {job_id} is still {} (timed out)", job.state)));
                }
            },
            None => events.next().await,
        };
        match next.map_err(unreachable)? {
            Some(Event::Change(change)) => {
                if let Change::Untracked { provider: p, job_id: j } = &*change {
                    if *p == provider && *j == job_id {
                        return Err(ended(REFUSED, format!("{provider} {job_id} was untracked while waited for")));
                    }
                }
                if let Change::Job { job: changed } = *change {
                    if changed.provider == provider && changed.job_id == job_id {
                        if changed.state != job.state && !changed.state.is_terminal() {
                            eprintln!("{provider} {job_id}: {}", state_said(&changed));
                        }
                        job = changed;
                    }
                }
            }
            Some(Event::Resync) => {
                let path = format!("/api/jobs/{}/{}", encode(&provider), encode(&job_id));
                job = serde_json::from_value(client.get(&path).await?).context("unexpected answer from the API")?;
            }
            Some(_) => {}
            None => return Err(unreachable("the NeverMiss instance stopped while waiting")),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&job)?);
    } else {
        println!("{}", job.state);
    }
    match job.state {
        JobState::Succeeded => Ok(()),
        JobState::Canceled => Err(ended(CANCELED, format!("{provider} {job_id} was canceled"))),
        // An agent session's run that stopped to wait for the user: not a success.
        JobState::NeedsInput => Err(ended(FAILED, format!("{provider} {job_id} needs input"))),
        // The provider no longer keeps it: it ended, and nothing says it succeeded.
        JobState::Ended => Err(ended(FAILED, format!("{provider} {job_id} ended while unobserved; its outcome is unknown"))),
        _ => Err(ended(FAILED, format!("{provider} {job_id} failed{}", job.error.map(|e| format!(": {e}")).unwrap_or_default()))),
    }
}

/// A job's state as the waiting user reads it.
fn state_said(job: &Job) -> String {
    match job.state {
        JobState::Unknown => "no webhook or poll has said its state yet".to_owned(),
        state => format!("{state}"),
    }
}

/// `nevermiss wait --group NAME`: blocks until no job of the group is running, live through the
/// event stream (each change to one of its jobs reads the group again), then prints one line per
/// job (or the group as JSON). Exit 0 when every job succeeded, 10 when any failed or needs
/// input, 11 when any was canceled and none failed, 124 on timeout, 69 unreachable.
pub async fn wait_group(client: &Client, group: String, timeout: Option<Duration>, json: bool) -> anyhow::Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut events = client.events().await.map_err(unreachable)?;
    events.until_hello().await.map_err(unreachable)?;
    let path = format!("/api/groups/{}", encode(&group));
    let read = || client.get(&path);
    let mut detail: GroupDetail = serde_json::from_value(read().await?).context("unexpected answer from the API")?;
    if detail.group.running > 0 {
        eprintln!(
            "waiting for group {group}: {} of {} jobs running (Ctrl-C stops waiting, not the jobs)",
            detail.group.running, detail.group.total
        );
    }
    while detail.group.running > 0 {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let message =
                        format!("group {group}: {} of {} jobs still running (timed out)", detail.group.running, detail.group.total);
                    return Err(ended(TIMED_OUT, message));
                }
            },
            None => events.next().await,
        };
        let read_again = match next.map_err(unreachable)? {
            Some(Event::Change(change)) => matches!(*change, Change::Job { ref job } if job.group.as_deref() == Some(group.as_str())),
            Some(Event::Resync) => true,
            Some(_) => false,
            None => return Err(unreachable("the NeverMiss instance stopped while waiting")),
        };
        if read_again {
            let running = detail.group.running;
            detail = serde_json::from_value(read().await?).context("unexpected answer from the API")?;
            if detail.group.running != running && detail.group.running > 0 {
                eprintln!("group {group}: {} of {} jobs running", detail.group.running, detail.group.total);
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&detail)?);
    } else {
        for job in &detail.jobs {
            let label = job.label.as_deref().unwrap_or("");
            println!("{:<12} {:<10} {} {label}", job.state.as_str(), job.provider, job.job_id);
        }
    }
    let count = |states: &[JobState]| detail.jobs.iter().filter(|j| states.contains(&j.state)).count();
    let (failed, canceled, total) =
        (count(&[JobState::Failed, JobState::NeedsInput, JobState::Ended]), count(&[JobState::Canceled]), detail.jobs.len());
    if failed > 0 {
        return Err(ended(FAILED, format!("group {group}: {failed} of {total} jobs failed, need input or ended unobserved")));
    }
    if canceled > 0 {
        return Err(ended(CANCELED, format!("group {group}: {canceled} of {total} jobs were canceled")));
    }
    Ok(())
}
