//! `nevermiss wait PROVIDER JOB_ID [--timeout SECS]`: tracks the job if needed and blocks until it
//! is terminal (or `wait --group NAME`: until no job of the group runs), live through the instance's event stream (`GET /api/events`; no polling), then
//! prints the final state. Exit codes (contract §1): 0 succeeded, 10 failed, 11 canceled,
//! 124 timed out, 69 no running instance reachable (or it stopped while waiting).

use std::time::Duration;

use anyhow::Context;

use crate::cli::Client;
use nevermiss_engine::api::groups::GroupDetail;
use nevermiss_engine::api::jobs::TrackRequest;
use nevermiss_engine::changes::Change;
use nevermiss_engine::job::{Job, JobState};

/// How `wait` ended when it was not with success: the exit code, and a line for stderr.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Ended {
    pub code: u8,
    pub message: String,
}

pub const FAILED: u8 = 10;
pub const CANCELED: u8 = 11;
pub const TIMED_OUT: u8 = 124;
pub const UNREACHABLE: u8 = 69;

fn unreachable(e: impl std::fmt::Display) -> anyhow::Error {
    Ended { code: UNREACHABLE, message: one_line(&e.to_string()) }.into()
}

fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or("").to_owned()
}

pub async fn wait(client: &Client, provider: String, job_id: String, timeout: Option<Duration>) -> anyhow::Result<()> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    // The stream first, so a change between the track and the subscription cannot be missed.
    let mut events = client.events().await.map_err(unreachable)?;
    events.until_hello().await.map_err(unreachable)?;
    let request = TrackRequest { provider: provider.clone(), job_id: job_id.clone(), ..TrackRequest::default() };
    let (_, answer) = client.send(client.http.post(format!("{}/api/jobs", client.base)).json(&request)).await.map_err(|e| {
        if e.to_string().contains("no NeverMiss is running") {
            unreachable(e)
        } else {
            e
        }
    })?;
    let mut job: Job = serde_json::from_value(answer).context("unexpected answer from the API")?;
    while !job.state.is_terminal() {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    return Err(Ended { code: TIMED_OUT, message: format!("{provider} {job_id} is still {} (timed out)", job.state) }.into())
                }
            },
            None => events.next().await,
        };
        match next.map_err(unreachable)? {
            Some(Event::Change(change)) => {
                if let Change::Job { job: changed } = *change {
                    if changed.provider == provider && changed.job_id == job_id {
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
    println!("{}", job.state);
    match job.state {
        JobState::Succeeded => Ok(()),
        JobState::Canceled => Err(Ended { code: CANCELED, message: format!("{provider} {job_id} was canceled") }.into()),
        // An agent session's run that stopped to wait for the user: not a success.
        JobState::NeedsInput => Err(Ended { code: FAILED, message: format!("{provider} {job_id} needs input") }.into()),
        // The provider no longer keeps it: it ended, and nothing says it succeeded.
        JobState::Ended => {
            Err(Ended { code: FAILED, message: format!("{provider} {job_id} ended while unobserved; its outcome is unknown") }.into())
        }
        _ => Err(Ended {
            code: FAILED,
            message: format!("{provider} {job_id} failed{}", job.error.map(|e| format!(": {e}")).unwrap_or_default()),
        }
        .into()),
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
    let read = || async {
        client.get(&path).await.map_err(|e| if e.to_string().contains("no NeverMiss is running") { unreachable(e) } else { e })
    };
    let mut detail: GroupDetail = serde_json::from_value(read().await?).context("unexpected answer from the API")?;
    while detail.group.running > 0 {
        let next = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    let message =
                        format!("group {group}: {} of {} jobs still running (timed out)", detail.group.running, detail.group.total);
                    return Err(Ended { code: TIMED_OUT, message }.into());
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
            detail = serde_json::from_value(read().await?).context("unexpected answer from the API")?;
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
        return Err(Ended {
            code: FAILED,
            message: format!("group {group}: {failed} of {total} jobs failed, need input or ended unobserved"),
        }
        .into());
    }
    if canceled > 0 {
        return Err(Ended { code: CANCELED, message: format!("group {group}: {canceled} of {total} jobs were canceled") }.into());
    }
    Ok(())
}

/// A path segment, percent-encoded.
pub(crate) fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// One Server-Sent Event of the instance's stream, as `wait` needs it.
pub enum Event {
    Hello,
    /// Boxed: a change carries a whole job or the metrics, the other events nothing.
    Change(Box<Change>),
    Resync,
    Other,
}

/// The instance's event stream, read event by event from the response body.
pub struct Events {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Events {
    pub fn new(response: reqwest::Response) -> Events {
        Events { response, buffer: Vec::new() }
    }

    async fn until_hello(&mut self) -> anyhow::Result<()> {
        loop {
            match self.next().await? {
                Some(Event::Hello) => return Ok(()),
                Some(_) => continue,
                None => anyhow::bail!("the event stream ended before it began"),
            }
        }
    }

    /// The next event; `None` when the stream ended (the instance stopped).
    pub async fn next(&mut self) -> anyhow::Result<Option<Event>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_block(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
                continue;
            }
            match self.response.chunk().await.context("the event stream broke")? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(None),
            }
        }
    }
}

/// An event from one SSE block (`event:` and `data:` lines); `None` for a comment (keep-alive).
fn parse_block(block: &str) -> Option<Event> {
    let (mut name, mut data) = (None, String::new());
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = Some(value.trim().to_owned());
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    Some(match name?.as_str() {
        "hello" => Event::Hello,
        "resync" => Event::Resync,
        "job" | "metrics" => serde_json::from_str(&data).map(|change| Event::Change(Box::new(change))).unwrap_or(Event::Other),
        _ => Event::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_events() {
        assert!(matches!(parse_block("event: hello\ndata: {}\n"), Some(Event::Hello)));
        assert!(parse_block(": keep-alive\n").is_none());
        assert!(matches!(parse_block("event: resync\ndata: {\"missed\":3}\n"), Some(Event::Resync)));
        assert!(matches!(parse_block("event: mystery\ndata: 1\n"), Some(Event::Other)));
    }
}
