//! Standard Webhooks (https://www.standardwebhooks.com), the signing scheme Replicate, OpenAI and
//! Anthropic share: `webhook-id`, `webhook-timestamp`, `webhook-signature` (space-separated
//! `v1,<base64>` entries); HMAC-SHA256 over `{id}.{timestamp}.{body}`; secrets `whsec_<base64>`.
//! Any one `v1` entry may match (key rotation), each compared in constant time; an empty signature
//! never matches; a timestamp more than 5 minutes away is refused (replays).

use axum::http::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use serde_json::Value;

use super::{ParseError, ProviderContext, VerifyError};
use crate::secrets::SecretKind;

pub const ID_HEADER: &str = "webhook-id";
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// The reference libraries' tolerance, in seconds, both ways.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// The key bytes of a secret: `whsec_` + base64, or (without the prefix) the raw bytes.
pub fn secret_key(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(encoded) => STANDARD.decode(encoded).unwrap_or_else(|_| secret.as_bytes().to_vec()),
        None => secret.as_bytes().to_vec(),
    }
}

/// `v1,<base64>` for a message, as a sender writes it.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac(key, id, timestamp, body).finalize().into_bytes()))
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, VerifyError> {
    headers
        .get(name)
        .ok_or(VerifyError::Missing(name))?
        .to_str()
        .map_err(|_| VerifyError::Invalid)
}

/// Verifies a request; returns its message id (the dedupe key: the same on every retry).
pub fn verify(key: &[u8], headers: &HeaderMap, body: &[u8], now_secs: i64) -> Result<String, VerifyError> {
    let id = header(headers, ID_HEADER)?;
    let timestamp: i64 = header(headers, TIMESTAMP_HEADER)?
        .trim()
        .parse()
        .map_err(|_| VerifyError::Invalid)?;
    let signatures = header(headers, SIGNATURE_HEADER)?;
    // abs_diff: any i64 the header may hold (i64::MIN too) without overflow.
    if now_secs.abs_diff(timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(VerifyError::Expired);
    }
    verify_signatures(key, id, timestamp, body, signatures)?;
    Ok(id.to_owned())
}

/// Verifies a request with `provider`'s stored webhook secret; none stored is `NotConfigured`.
pub fn verify_with_stored_secret(
    ctx: &ProviderContext,
    provider: &'static str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let secret = ctx
        .secrets
        .get(provider, SecretKind::WebhookSecret)
        .ok_or(VerifyError::NotConfigured(provider))?;
    verify(&secret_key(&secret), headers, body, chrono::Utc::now().timestamp()).map(|_| ())
}

/// What every Standard Webhooks payload shares: the message id (the dedupe key), the JSON body,
/// and the job id where the provider puts it. Its `reject` keeps both ids with a refusal.
pub struct Envelope {
    pub delivery_id: Option<String>,
    pub job_id: Option<String>,
    /// The body, when it is a JSON object.
    pub body: Option<Value>,
}

impl Envelope {
    /// Reads the `webhook-id` header and the body; `job_id_at` is a JSON pointer (`/data/id`).
    pub fn read(headers: &HeaderMap, body: &[u8], job_id_at: &str) -> Envelope {
        let delivery_id = headers
            .get(ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        let body: Option<Value> = serde_json::from_slice(body).ok().filter(Value::is_object);
        let job_id = body
            .as_ref()
            .and_then(|v| v.pointer(job_id_at))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Envelope { delivery_id, job_id, body }
    }

    pub fn reject(&self, reason: impl Into<String>) -> ParseError {
        ParseError {
            reason: reason.into(),
            delivery_id: self.delivery_id.clone(),
            job_id: self.job_id.clone(),
        }
    }

    /// The message id, the job id and the body, or the refusal naming the first one missing.
    pub fn require(&self, job_id_name: &str) -> Result<(String, String, &Value), ParseError> {
        let delivery_id = self.delivery_id.clone().ok_or_else(|| self.reject("no webhook-id header"))?;
        let body = self.body.as_ref().ok_or_else(|| self.reject("the body is not a JSON object"))?;
        let job_id = self.job_id.clone().ok_or_else(|| self.reject(format!("the event has no {job_id_name}")))?;
        Ok((delivery_id, job_id, body))
    }
}

/// Checks the signature list alone (no tolerance check).
pub fn verify_signatures(key: &[u8], id: &str, timestamp: i64, body: &[u8], signatures: &str) -> Result<(), VerifyError> {
    let expected = mac(key, id, timestamp, body);
    for entry in signatures.split(' ') {
        let Some(encoded) = entry.strip_prefix("v1,") else { continue };
        let Ok(candidate) = STANDARD.decode(encoded) else { continue };
        // `verify_slice` compares in constant time and refuses any length but the MAC's own,
        // so an empty `v1,` never matches.
        if !candidate.is_empty() && expected.clone().verify_slice(&candidate).is_ok() {
            return Ok(());
        }
    }
    Err(VerifyError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TS: i64 = 1649367553;
    const BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const EXPECTED: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn headers(sig: &str, ts: i64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ID_HEADER, ID.parse().unwrap());
        h.insert(TIMESTAMP_HEADER, ts.to_string().parse().unwrap());
        h.insert(SIGNATURE_HEADER, sig.parse().unwrap());
        h
    }

    #[test]
    fn reference_test_vector() {
        let key = secret_key(SECRET);
        assert_eq!(sign(&key, ID, TS, BODY), EXPECTED);
        assert_eq!(verify_signatures(&key, ID, TS, BODY, EXPECTED), Ok(()));
        assert_eq!(verify(&key, &headers(EXPECTED, TS), BODY, TS + 10), Ok(ID.to_owned()));
    }

    #[test]
    fn rotation_empty_and_tampering() {
        let key = secret_key(SECRET);
        let other = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let rotated = format!("{} {}", sign(&other, ID, TS, BODY), EXPECTED);
        assert_eq!(verify_signatures(&key, ID, TS, BODY, &rotated), Ok(()));
        assert_eq!(verify_signatures(&key, ID, TS, BODY, "v1,"), Err(VerifyError::Invalid));
        assert_eq!(verify_signatures(&key, ID, TS, BODY, ""), Err(VerifyError::Invalid));
        assert_eq!(verify_signatures(&key, ID, TS, BODY, "v1a,abcd v2,xyz"), Err(VerifyError::Invalid));
        assert_eq!(verify_signatures(&key, ID, TS, b"{}", EXPECTED), Err(VerifyError::Invalid));
        assert_eq!(verify_signatures(&key, ID, TS + 1, BODY, EXPECTED), Err(VerifyError::Invalid));
        let truncated = &EXPECTED[..EXPECTED.len() - 4];
        assert_eq!(verify_signatures(&key, ID, TS, BODY, truncated), Err(VerifyError::Invalid));
    }

    #[test]
    fn replay_outside_tolerance() {
        let key = secret_key(SECRET);
        assert_eq!(verify(&key, &headers(EXPECTED, TS), BODY, TS + TOLERANCE_SECS + 1), Err(VerifyError::Expired));
        assert_eq!(verify(&key, &headers(EXPECTED, TS), BODY, TS - TOLERANCE_SECS - 1), Err(VerifyError::Expired));
        assert!(verify(&key, &headers(EXPECTED, TS), BODY, TS + TOLERANCE_SECS).is_ok());
        // The extremes of the header's range are refused, without overflow.
        for extreme in [i64::MIN, i64::MAX] {
            assert_eq!(verify(&key, &headers(EXPECTED, extreme), BODY, TS), Err(VerifyError::Expired));
        }
    }

    #[test]
    fn secret_without_prefix_is_raw_bytes() {
        assert_eq!(secret_key("plain"), b"plain".to_vec());
    }
}
