//! The `generic` provider, the seed contract (contract §2): HMAC-SHA256 of the raw body in
//! `X-Agent-Signature` (`sha256=<hex>` or bare hex), a JSON body with `deliveryId`, `jobId`,
//! `state`, `seq`, and a status API at `GET {base_url}/jobs/{jobId}` with a Bearer key.
//!
//! Optional fields of both the payload and the status answer: `finishedAt`, `label`, `error`,
//! `createdAt` (RFC 3339): when the job started on the sender's side, `kind` (what kind of job it
//! is: jobs of one kind make its expected duration), and `result`
//! (`{"text", "urls", "image"}`, each optional): what the job produced, kept bounded. The SLA is measured from
//! `createdAt` when it is given; without it, from when NeverMiss first heard of the job (a job
//! first heard of already finished, with no `createdAt`, is counted apart from the SLA).

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use sha2::Sha256;

use super::{FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::{parse_rfc3339, JobEvent, JobState};
use crate::SecretKind;

pub const NAME: &str = "generic";
pub const SIGNATURE_HEADER: &str = "x-agent-signature";

pub struct Generic {
    ctx: ProviderContext,
}

impl Generic {
    pub fn new(ctx: ProviderContext) -> Generic {
        Generic { ctx }
    }
}

/// `sha256=<lower-case hex of HMAC-SHA256(secret, body)>`, as a sender writes it.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// What NeverMiss delivers to its own generic hook (the test delivery, the tunnel's self-test):
/// the delivery, signed with `secret` as a sender would.
pub struct OwnDelivery<'a> {
    pub delivery_id: &'a str,
    pub job_id: &'a str,
    pub state: JobState,
    pub seq: i64,
    pub label: &'a str,
    /// Unix milliseconds, when the delivery says the job finished.
    pub finished_at: Option<i64>,
}

impl OwnDelivery<'_> {
    /// The JSON body and its `X-Agent-Signature`.
    pub fn signed(&self, secret: &str) -> (Vec<u8>, String) {
        let mut body = serde_json::json!({
            "deliveryId": self.delivery_id,
            "jobId": self.job_id,
            "state": self.state,
            "seq": self.seq,
            "label": self.label,
        });
        if let Some(at) = self.finished_at {
            body["finishedAt"] = crate::job::rfc3339(at).into();
        }
        let body = serde_json::to_vec(&body).expect("a JSON value serializes");
        let signature = sign(secret.as_bytes(), &body);
        (body, signature)
    }
}

/// Checks a `sha256=<hex>` or bare-hex HMAC-SHA256 signature in constant time.
pub fn verify_signature(secret: &[u8], body: &[u8], header: &str) -> Result<(), VerifyError> {
    let hex_part = header.trim();
    let hex_part = hex_part.strip_prefix("sha256=").unwrap_or(hex_part);
    let mut expected = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut expected).map_err(|_| VerifyError::Invalid)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    mac.verify_slice(&expected).map_err(|_| VerifyError::Invalid)
}

/// What a delivery and a status answer both say about the job.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobFields {
    state: String,
    seq: i64,
    #[serde(default)]
    finished_at: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// The job's group (a sweep, a batch per shard), optional.
    #[serde(default)]
    group: Option<String>,
    /// What the job produced (`{"text", "urls", "image"}`, each optional).
    #[serde(default)]
    result: Option<serde_json::Value>,
    /// What kind of job it is (e.g. `nightly-crawl`), optional: jobs of one kind make its
    /// expected duration (the engine's `expected`), as `generic/<kind>`.
    #[serde(default)]
    kind: Option<String>,
}

impl JobFields {
    /// The job event these fields describe, or why they cannot be one.
    fn event(self, job_id: String) -> Result<JobEvent, String> {
        let state = contract_state(&self.state)
            .ok_or_else(|| format!("unknown state {:?} (expected queued, running, succeeded, failed or canceled)", self.state))?;
        Ok(JobEvent {
            provider: NAME.into(),
            job_id,
            state,
            seq: self.seq,
            label: self.label.filter(|l| !l.is_empty()),
            finished_at: optional_time(self.finished_at.as_deref(), "finishedAt")?,
            started_at: optional_time(self.created_at.as_deref(), "createdAt")?,
            error: self.error,
            detail: None,
            group: match self.group.as_deref().map(str::trim).filter(|g| !g.is_empty()) {
                Some(group) => Some(crate::store::groups::valid_name(group).map_err(|e| format!("group: {e}"))?.to_owned()),
                None => None,
            },
            result: self.result.as_ref().and_then(crate::result::generic),
            provider_url: None,
            kind: self.kind.as_deref().map(str::trim).filter(|k| !k.is_empty()).map(|k| super::job_kind::of(NAME, k, None)),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payload {
    delivery_id: String,
    job_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusAnswer {
    job_id: Option<String>,
}

/// Reads the ids (`T`) and the job's fields of one JSON body: two passes over the bytes, each
/// skipping what it does not name (`#[serde(flatten)]` would instead buffer every unknown field,
/// recursively: a deeply nested extra field would then be refused).
fn read_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<(T, JobFields), serde_json::Error> {
    Ok((serde_json::from_slice(body)?, serde_json::from_slice(body)?))
}

/// A contract state (`unknown` and `ended` are NeverMiss's own, never sent: `ended` is what
/// NeverMiss concludes when a provider no longer keeps a job).
fn contract_state(s: &str) -> Option<JobState> {
    JobState::parse(s).filter(|st| !matches!(st, JobState::Unknown | JobState::Ended))
}

fn optional_time(value: Option<&str>, field: &str) -> Result<Option<i64>, String> {
    match value {
        None => Ok(None),
        Some(s) => parse_rfc3339(s).map(Some).ok_or_else(|| format!("{field} is not an RFC 3339 time: {s:?}")),
    }
}

#[async_trait]
impl Provider for Generic {
    fn name(&self) -> &'static str {
        NAME
    }

    fn webhook_expected(&self, _job_id: &str) -> bool {
        self.ctx.has_webhook_secret(NAME)
    }

    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let secret = self.ctx.secrets.get(NAME, SecretKind::WebhookSecret).ok_or(VerifyError::NotConfigured(NAME))?;
        let header =
            headers.get(SIGNATURE_HEADER).ok_or(VerifyError::Missing("X-Agent-Signature"))?.to_str().map_err(|_| VerifyError::Invalid)?;
        verify_signature(secret.as_bytes(), body, header)
    }

    fn parse(&self, _headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        parse_payload(body)
    }

    fn sender_is_users_own(&self) -> bool {
        true
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        self.fetch(job).await
    }
}

/// Parses a verified generic payload (the body alone says everything): the delivery, or why not
/// with whatever ids it still names. Public for the fuzz targets.
pub fn parse_payload(body: &[u8]) -> Result<ParsedDelivery, ParseError> {
    let reject = |reason: String| {
        // Keep whatever ids a broken payload still names.
        let loose: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let field =
            |name: &str| loose.as_ref().and_then(|v| v.get(name)).and_then(|v| v.as_str()).filter(|s| !s.is_empty()).map(str::to_owned);
        ParseError::malformed(reason, field("deliveryId"), field("jobId"))
    };
    let (p, fields): (Payload, JobFields) = read_body(body).map_err(|e| reject(format!("invalid payload: {e}")))?;
    if p.delivery_id.is_empty() {
        return Err(reject("deliveryId is empty".into()));
    }
    if p.job_id.is_empty() {
        return Err(reject("jobId is empty".into()));
    }
    Ok(ParsedDelivery { delivery_id: p.delivery_id, event: fields.event(p.job_id).map_err(reject)? })
}

impl Generic {
    async fn fetch(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        let job_id = job.job_id.as_str();
        let base = self
            .ctx
            .settings
            .base_url(NAME)
            .ok_or_else(|| FetchError::NotConfigured("no status API base URL (NEVERMISS_GENERIC_BASE_URL)".into()))?;
        // `ctx.get`: the `provider_timeout_secs` setting bounds the whole request, body included.
        let mut request = self.ctx.get(&format!("{base}/jobs/{}", urlencode_segment(job_id)));
        if let Some(key) = self.ctx.secrets.get(NAME, SecretKind::ApiKey) {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(FetchError::from_reqwest)?;
        if !response.status().is_success() {
            return Err(FetchError::from_status(&response));
        }
        let bytes = super::read_answer(response).await?;
        let (answer, fields): (StatusAnswer, JobFields) = read_body(&bytes).map_err(|e| FetchError::Malformed(e.to_string()))?;
        if answer.job_id.as_deref().is_some_and(|id| id != job_id) {
            return Err(FetchError::Malformed(format!("asked for {job_id}, the answer is about {}", answer.job_id.unwrap_or_default())));
        }
        fields.event(job_id.to_owned()).map_err(FetchError::Malformed)
    }
}

/// Percent-encodes one URL path segment.
pub fn urlencode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_round_trip_and_forms() {
        let sig = sign(b"s3cret", b"{}");
        assert!(verify_signature(b"s3cret", b"{}", &sig).is_ok());
        assert!(verify_signature(b"s3cret", b"{}", sig.trim_start_matches("sha256=")).is_ok());
        assert_eq!(verify_signature(b"other", b"{}", &sig), Err(VerifyError::Invalid));
        assert_eq!(verify_signature(b"s3cret", b"{ }", &sig), Err(VerifyError::Invalid));
        assert_eq!(verify_signature(b"s3cret", b"{}", &sig[..sig.len() - 2]), Err(VerifyError::Invalid));
        assert_eq!(verify_signature(b"s3cret", b"{}", ""), Err(VerifyError::Invalid));
    }

    #[test]
    fn segment_encoding() {
        assert_eq!(urlencode_segment("job-42"), "job-42");
        assert_eq!(urlencode_segment("a/b c"), "a%2Fb%20c");
    }
}
