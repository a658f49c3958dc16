//! `POST /api/jobs/{provider}/{job_id}/cancel` (contract §6): asks the provider to cancel a
//! job with its own cancel call. A cancel never writes a state: once the provider accepted, the
//! job is polled at once and its end comes through the merge point like any other. Each request
//! that reached the provider is on the job's timeline (outcome `requested`, with the provider's
//! answer) and counted (`cancel_requests`). A hub's devices may call it only while the owner
//! allows it (`devices_may_cancel`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, ErrorBody, Routes};
use crate::providers::CancelError;
use crate::store::counters::Counter;
use crate::store::job::{now_ms, Job, JobKey, JobRef, JobState};
use crate::store::{jobs, timeline};

pub fn router() -> Routes {
    Routes::new().devices_when_allowed("/jobs/{provider}/{job_id}/cancel", post(cancel), |s| s.devices_may_cancel())
}

/// The answer of a cancel the provider accepted (202).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct CancelAnswer {
    /// Always true: the provider accepted the request (the job is not canceled yet).
    pub requested: bool,
    /// What the provider answered.
    pub answer: String,
}

/// Why a cancel is not sent to the provider at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSent {
    /// NeverMiss does not know the job (404).
    UnknownJob,
    /// NeverMiss knows the job is finished (409): the provider is not asked.
    Finished(JobState),
}

impl NotSent {
    fn into_response(self) -> Response {
        match self {
            NotSent::UnknownJob => ApiError::NotFound("no such job".into()).into_response(),
            NotSent::Finished(state) => {
                (StatusCode::CONFLICT, Json(ErrorBody::new(format!("the job is already finished ({})", state.as_str())))).into_response()
            }
        }
    }
}

/// Whether a cancel of this job may be sent: it must be known, and not finished.
pub fn may_send(job: Option<&Job>) -> Result<(), NotSent> {
    let job = job.ok_or(NotSent::UnknownJob)?;
    if job.state.is_terminal() {
        return Err(NotSent::Finished(job.state));
    }
    Ok(())
}

/// How a provider's answer is written on the job's timeline.
pub fn timeline_text(answer: &Result<String, CancelError>) -> String {
    match answer {
        Ok(answer) => format!("cancel requested: {answer}"),
        Err(e) => format!("cancel refused: {e}"),
    }
}

/// What the API answers for a provider's answer.
pub fn response(answer: Result<String, CancelError>) -> Response {
    match answer {
        Ok(answer) => (StatusCode::ACCEPTED, Json(CancelAnswer { requested: true, answer })).into_response(),
        Err(e @ CancelError::NoCancel(_)) => (StatusCode::NOT_IMPLEMENTED, Json(ErrorBody::new(e.to_string()))).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, Json(ErrorBody::new(e.to_string()))).into_response(),
    }
}

#[utoipa::path(
    post, path = "/api/jobs/{provider}/{job_id}/cancel", operation_id = "cancel_job", tag = "jobs",
    summary = "Ask the provider to cancel a job",
    description = "The provider's own cancel call. A cancel never writes a state: once the provider accepted, the job is polled at once and its end comes through the merge point. Each request that reached the provider is on the job's timeline as `requested` with the answer, and counted in `cancel_requests`. A hub's device may call it only while the owner allows it (`devices_may_cancel`).",
    params(super::jobs::JobPath),
    responses(
        (status = 202, description = "The provider accepted the request (the job is not canceled yet)", body = CancelAnswer),
        (status = 404, description = "No such job", body = super::ErrorBody),
        (status = 409, description = "NeverMiss knows the job is finished: the provider is not asked", body = super::ErrorBody),
        (status = 501, description = "No cancel for this kind of job (the generic contract, videos)", body = super::ErrorBody),
        (status = 502, description = "The provider refused, in its own words", body = super::ErrorBody),
    )
)]
async fn cancel(State(ctx): State<Arc<ApiContext>>, Path((provider, job_id)): Path<(String, String)>) -> Result<Response, ApiError> {
    let services = &ctx.services;
    let Some(adapter) = services.providers.get(&provider) else {
        return Ok(NotSent::UnknownJob.into_response());
    };
    let key = JobKey::new(&provider, &job_id);
    let (job, target) = services.store.read(move |conn| Ok((jobs::job(conn, &key)?, jobs::poll_target(conn, &key)?))).await?;
    if let Err(not_sent) = may_send(job.as_ref()) {
        return Ok(not_sent.into_response());
    }
    let state = job.map(|j| j.state).unwrap_or(JobState::Running);
    let job_ref = target.map(|(r, _)| r).unwrap_or_else(|| JobRef::new(job_id.clone()));
    let answer = match crate::providers::job_id::is_a_name(&job_ref.job_id) {
        Ok(()) => adapter.cancel(&job_ref).await,
        Err(why) => Err(CancelError::NotAsked(crate::providers::FetchError::Unpollable(why.to_string()))),
    };
    if matches!(answer, Err(CancelError::NoCancel(_))) {
        return Ok(response(answer));
    }
    let text = timeline_text(&answer);
    tracing::info!(provider, job_id, answer = %text, "cancel request");
    let key = JobKey::new(&provider, &job_id);
    services
        .store
        .write(move |tx| {
            timeline::record_request(tx, &key, state, &text, now_ms())?;
            tx.count(Counter::CancelRequests, 1);
            Ok(())
        })
        .await?;
    if answer.is_ok() {
        // The end is learned as any other: by asking the provider now, through the merge point.
        let reconciler = services.reconciler.clone();
        tokio::spawn(async move {
            if let Err(reason) = reconciler.poll_job(&JobKey::new(provider.clone(), job_id.clone())).await {
                tracing::debug!(provider, job_id, %reason, "poll after a cancel request");
            }
        });
    }
    Ok(response(answer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::FetchError;

    fn job(state: JobState) -> Job {
        Job {
            provider: "replicate".into(),
            job_id: "p1".into(),
            label: None,
            state,
            seq: None,
            error: None,
            created_at: String::new(),
            updated_at: String::new(),
            finished_at: None,
            started_at: None,
            terminal_source: None,
            notified_at: None,
            detail: None,
            last_polled_at: None,
            poll_error: None,
            poll_error_kind: None,
            abandoned_at: None,
            abandoned_reason: None,
            group: None,
            result: None,
            provider_url: None,
            kind: None,
            expected_ms: None,
        }
    }

    #[test]
    fn only_a_known_unfinished_job_is_sent() {
        assert_eq!(may_send(None), Err(NotSent::UnknownJob));
        assert_eq!(may_send(Some(&job(JobState::Running))), Ok(()));
        assert_eq!(may_send(Some(&job(JobState::Queued))), Ok(()));
        for state in [JobState::Succeeded, JobState::Failed, JobState::Canceled, JobState::NeedsInput] {
            assert_eq!(may_send(Some(&job(state))), Err(NotSent::Finished(state)));
        }
    }

    #[test]
    fn each_answer_has_its_status() {
        assert_eq!(response(Ok("accepted".into())).status(), StatusCode::ACCEPTED);
        assert_eq!(response(Err(CancelError::no_cancel())).status(), StatusCode::NOT_IMPLEMENTED);
        let refused = Err(CancelError::Refused { status: 400, text: "Prediction has already completed".into() });
        assert_eq!(timeline_text(&refused), "cancel refused: the provider answered 400: Prediction has already completed");
        assert_eq!(response(refused).status(), StatusCode::BAD_GATEWAY);
        assert_eq!(response(Err(CancelError::NotAsked(FetchError::Timeout))).status(), StatusCode::BAD_GATEWAY);
    }
}
