//! A desktop notification's `cancel` action: asks the engine's own admin API to cancel the job
//! (`POST /api/jobs/{provider}/{job_id}/cancel` with the owner's token), the one call the
//! window's Cancel and `nevermiss cancel` make too. So it is the same in every way: the provider's
//! own cancel call, the request on the job's timeline and counted, the job then polled and its end
//! coming through the merge point (never written by the cancel), a finished job answered 409
//! without asking anyone, and on a hub's device the call forwarded to the hub (which refuses it
//! unless its owner allows devices to cancel). What the API answered becomes the text of the
//! notification that takes the action's place.

use std::time::Duration;

use serde_json::Value;

use crate::notification::EngineAccess;

/// The longest the answer is waited for (the provider's own timeout is shorter).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// What the cancel came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answered {
    /// The provider accepted (202): its answer. The job is not canceled yet.
    Requested(String),
    /// Not canceled: the API's status (none when it could not be reached) and why, as answered
    /// (already finished, the provider's refusal in its own words, no cancel for this kind of job).
    NotCanceled(Option<u16>, String),
}

/// Asks the engine's admin API to cancel the job.
pub async fn request(engine: &EngineAccess, provider: &str, job_id: &str) -> Answered {
    let url = match reqwest::Url::parse(&engine.api_url) {
        Ok(mut url) => {
            if let Ok(mut path) = url.path_segments_mut() {
                path.pop_if_empty().extend(["api", "jobs", provider, job_id, "cancel"]);
            }
            url
        }
        Err(e) => return Answered::NotCanceled(None, format!("NeverMiss's API address is not a URL: {e}")),
    };
    let response = reqwest::Client::new().post(url).bearer_auth(&engine.token).timeout(ANSWER_WITHIN).send().await;
    let response = match response {
        Ok(response) => response,
        Err(e) => return Answered::NotCanceled(None, format!("NeverMiss's API did not answer: {}", e.without_url())),
    };
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let said = |field: &str| body.get(field).and_then(Value::as_str).unwrap_or("no reason given").to_owned();
    if status == 202 {
        Answered::Requested(said("answer"))
    } else {
        Answered::NotCanceled(Some(status), said("error"))
    }
}

impl Answered {
    /// The notification's title and text: what was asked of whom, and what came back.
    pub fn said(&self, provider: &str, job_id: &str, name: &str) -> (String, String) {
        match self {
            Answered::Requested(answer) => (
                format!("Cancel requested: {name}"),
                format!("{provider} · {job_id}\n{provider} answered: {answer}\nIts end comes as its own notification."),
            ),
            Answered::NotCanceled(Some(502), refusal) => {
                (format!("Not canceled: {name}"), format!("{provider} · {job_id}\n{provider} refused: {refusal}"))
            }
            Answered::NotCanceled(_, why) => (format!("Not canceled: {name}"), format!("{provider} · {job_id}\n{why}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_answer_says_what_came_back() {
        let (title, body) = Answered::Requested("accepted (status canceled)".into()).said("replicate", "p1", "sdxl");
        assert_eq!(title, "Cancel requested: sdxl");
        assert_eq!(body, "replicate · p1\nreplicate answered: accepted (status canceled)\nIts end comes as its own notification.");
        let refused = Answered::NotCanceled(Some(502), "the provider answered 400: Prediction has already completed".into());
        assert_eq!(
            refused.said("replicate", "p1", "sdxl").1,
            "replicate · p1\nreplicate refused: the provider answered 400: Prediction has already completed"
        );
        let finished = Answered::NotCanceled(Some(409), "the job is already finished (succeeded)".into());
        assert_eq!(
            finished.said("replicate", "p1", "sdxl"),
            ("Not canceled: sdxl".into(), "replicate · p1\nthe job is already finished (succeeded)".into())
        );
    }
}
