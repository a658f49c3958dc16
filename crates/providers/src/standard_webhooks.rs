//! Standard Webhooks (https://www.standardwebhooks.com), the signing scheme Replicate, OpenAI and
//! Anthropic share: `webhook-id`, `webhook-timestamp`, `webhook-signature` (space-separated
//! `v1,<base64>` entries); HMAC-SHA256 over `{id}.{timestamp}.{body}`; secrets `whsec_<base64>`.
//! Any one `v1` entry may match (key rotation), each compared in constant time; an empty signature
//! never matches; a timestamp more than 5 minutes away is refused (replays).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use reqwest::header::HeaderMap;
use sha2::Sha256;

use serde_json::Value;

use super::{ParseError, ProviderContext, VerifyError};
use crate::SecretKind;

pub const ID_HEADER: &str = "webhook-id";
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const SIGNATURE_HEADER: &str = "webhook-signature";
/// The reference libraries' tolerance, in seconds, both ways.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// How a provider's SDK reads its webhook secret (providers.md: the SDKs differ without the
/// `whsec_` prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretFormat {
    /// OpenAI's SDK: `whsec_` + base64; without the prefix, the string's own bytes.
    PrefixedBase64OrRaw,
    /// The Standard Webhooks libraries (which Anthropic's SDK uses) and Replicate's
    /// `validateWebhook`: base64, with or without the `whsec_` prefix.
    Base64,
}

/// Standard base64, padded or not (the SDKs' decoders accept both).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// Which entries of a `webhook-signature` list a provider's SDK reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureEntries {
    /// `v1,<base64>` only (the Standard Webhooks libraries, Replicate's `validateWebhook`).
    V1,
    /// `v1,<base64>`, or a bare `<base64>` (openai-python's `lib/_webhooks.py` strips a `v1,`
    /// prefix when there is one and compares the entry as it is otherwise).
    V1OrBare,
}

/// Why a webhook secret cannot be a key of its format (`SecretFormat::key`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadWebhookSecret {
    #[error("it is empty after the whsec_ prefix")]
    EmptyAfterPrefix,
    #[error("the text after whsec_ is not base64: {0}")]
    NotBase64AfterPrefix(base64::DecodeError),
    #[error("it is not base64 (with or without whsec_): {0}")]
    NotBase64(base64::DecodeError),
    #[error("its base64 decodes to no bytes")]
    NoBytes,
}

impl SecretFormat {
    /// The signature entries the SDK that reads secrets this way accepts: OpenAI's reads bare
    /// entries too.
    pub fn entries(self) -> SignatureEntries {
        match self {
            SecretFormat::PrefixedBase64OrRaw => SignatureEntries::V1OrBare,
            SecretFormat::Base64 => SignatureEntries::V1,
        }
    }

    /// The key bytes of `secret`, or why it cannot be a secret of this format (said next to the
    /// field when it is saved).
    pub fn key(self, secret: &str) -> Result<Vec<u8>, BadWebhookSecret> {
        let (encoded, prefixed) = match secret.strip_prefix("whsec_") {
            Some(rest) => (rest, true),
            None => (secret, false),
        };
        if encoded.is_empty() {
            return Err(BadWebhookSecret::EmptyAfterPrefix);
        }
        if !prefixed && self == SecretFormat::PrefixedBase64OrRaw {
            return Ok(secret.as_bytes().to_vec());
        }
        match BASE64.decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(key),
            Ok(_) => Err(BadWebhookSecret::NoBytes),
            Err(e) if prefixed => Err(BadWebhookSecret::NotBase64AfterPrefix(e)),
            Err(e) => Err(BadWebhookSecret::NotBase64(e)),
        }
    }

    /// How this format reads a secret, in words.
    pub fn describe(self) -> &'static str {
        match self {
            SecretFormat::PrefixedBase64OrRaw => "whsec_ and base64 decoded, else the text's own bytes",
            SecretFormat::Base64 => "base64 decoded, with or without whsec_",
        }
    }

    /// The keys the same text gives when read in the other ways senders write secrets, each
    /// with how it was read: a signature that matches one of them means the secret is right but
    /// written in a form this provider does not read that way.
    pub fn other_readings(self, secret: &str) -> Vec<(&'static str, Vec<u8>)> {
        let own = self.key(secret).ok();
        let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
        let mut readings: Vec<(&'static str, Vec<u8>)> =
            vec![("the whole text as bytes", secret.as_bytes().to_vec()), ("the text after whsec_ as bytes", encoded.as_bytes().to_vec())];
        if let Ok(key) = BASE64.decode(encoded) {
            readings.push(("base64 decoded", key));
        }
        readings.retain(|(_, key)| !key.is_empty() && Some(key) != own.as_ref());
        readings.dedup_by(|a, b| a.1 == b.1);
        readings
    }
}

/// The key bytes of a secret the way a sender of the reference test vector writes it: `whsec_`
/// followed by base64, or (without the prefix) the raw bytes. Verification reads secrets per provider
/// (`SecretFormat`); this is for signing test requests.
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
    headers.get(name).ok_or(VerifyError::Missing(name))?.to_str().map_err(|_| VerifyError::Invalid)
}

/// Verifies a request; returns its message id (the dedupe key: the same on every retry).
pub fn verify(key: &[u8], headers: &HeaderMap, body: &[u8], now_secs: i64) -> Result<String, VerifyError> {
    verify_as(key, headers, body, now_secs, SignatureEntries::V1)
}

/// `verify`, reading the signature entries as `entries` says.
pub fn verify_as(key: &[u8], headers: &HeaderMap, body: &[u8], now_secs: i64, entries: SignatureEntries) -> Result<String, VerifyError> {
    let id = header(headers, ID_HEADER)?;
    let timestamp: i64 = header(headers, TIMESTAMP_HEADER)?.trim().parse().map_err(|_| VerifyError::Invalid)?;
    let signatures = header(headers, SIGNATURE_HEADER)?;
    // abs_diff: any i64 the header may hold (i64::MIN too) without overflow.
    if now_secs.abs_diff(timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(VerifyError::Expired);
    }
    verify_signatures_as(key, id, timestamp, body, signatures, entries)?;
    Ok(id.to_owned())
}

/// Verifies a request with `provider`'s stored webhook secret, read as `format`; none stored is
/// `NotConfigured`, one that cannot be of that format is `BadSecret`.
pub fn verify_with_stored_secret(
    ctx: &ProviderContext,
    provider: &'static str,
    format: SecretFormat,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let secret = ctx.secrets.get(provider, SecretKind::WebhookSecret).ok_or(VerifyError::NotConfigured(provider))?;
    verify_with_secret(provider, format, &secret, headers, body)
}

/// Verifies a request with `secret` read as `format` (`BadSecret` when it cannot be).
pub fn verify_with_secret(
    provider: &'static str,
    format: SecretFormat,
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let key = format.key(secret).map_err(|reason| VerifyError::BadSecret { provider, reason: reason.to_string() })?;
    verify_as(&key, headers, body, chrono::Utc::now().timestamp(), format.entries()).map(|_| ())
}

/// What every Standard Webhooks payload shares: the message id (the dedupe key), the JSON body,
/// and the job id where the provider puts it. Its `reject` keeps both ids with a refusal.
pub struct Envelope {
    pub delivery_id: Option<String>,
    pub job_id: Option<String>,
    /// The body, when it is a JSON object.
    pub body: Option<Value>,
    /// Where the event's type is in the body (a JSON pointer), for a provider whose events are
    /// typed (`read_typed`).
    type_at: Option<&'static str>,
}

impl Envelope {
    /// Reads the `webhook-id` header and the body; `job_id_at` is a JSON pointer (`/data/id`).
    pub fn read(headers: &HeaderMap, body: &[u8], job_id_at: &str) -> Envelope {
        let delivery_id = headers.get(ID_HEADER).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()).map(str::to_owned);
        let body: Option<Value> = serde_json::from_slice(body).ok().filter(Value::is_object);
        let job_id = body.as_ref().and_then(|v| v.pointer(job_id_at)).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        Envelope { delivery_id, job_id, body, type_at: None }
    }

    /// `read`, for a provider whose events say their type at `type_at` (`/type`, `/data/type`).
    pub fn read_typed(headers: &HeaderMap, body: &[u8], job_id_at: &str, type_at: &'static str) -> Envelope {
        Envelope { type_at: Some(type_at), ..Envelope::read(headers, body, job_id_at) }
    }

    /// The event's type (at the `type_at` it was read with) once the delivery has an id: what
    /// decides, before anything else in the body, whether the event is acted on or ignored.
    pub fn event_type(&self) -> Option<&str> {
        self.body.as_ref()?.pointer(self.type_at?)?.as_str().filter(|_| self.delivery_id.is_some())
    }

    pub fn reject(&self, reason: impl Into<String>) -> ParseError {
        ParseError::malformed(reason, self.delivery_id.clone(), self.job_id.clone())
    }

    /// A well-formed event of a kind NeverMiss does not act on (answered `ignored`).
    pub fn ignore(&self, reason: impl Into<String>) -> ParseError {
        self.reject(reason).unhandled()
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
    verify_signatures_as(key, id, timestamp, body, signatures, SignatureEntries::V1)
}

/// `verify_signatures`, reading the entries as `entries` says.
pub fn verify_signatures_as(
    key: &[u8],
    id: &str,
    timestamp: i64,
    body: &[u8],
    signatures: &str,
    entries: SignatureEntries,
) -> Result<(), VerifyError> {
    let expected = mac(key, id, timestamp, body);
    for entry in signatures.split(' ') {
        let encoded = match (entry.strip_prefix("v1,"), entries) {
            (Some(encoded), _) => encoded,
            // Another version's entry (`v1a,`) is not a bare signature.
            (None, SignatureEntries::V1OrBare) if !entry.contains(',') => entry,
            (None, _) => continue,
        };
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

    /// Each SDK's reading: OpenAI's takes an unprefixed secret's bytes, the Standard Webhooks
    /// libraries (Anthropic) and Replicate decode base64 with or without the prefix; a secret
    /// no SDK could read is refused with a reason.
    #[test]
    fn secrets_as_each_sdk_reads_them() {
        let decoded = STANDARD.decode("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        for format in [SecretFormat::PrefixedBase64OrRaw, SecretFormat::Base64] {
            assert_eq!(format.key(SECRET).unwrap(), decoded, "{format:?}");
            assert!(format.key("whsec_").is_err());
            assert!(format.key("whsec_not base64!").unwrap_err().to_string().contains("base64"), "{format:?}");
            assert!(format.key("whsec_the-real-secret").is_err(), "{format:?}");
        }
        assert_eq!(
            SecretFormat::PrefixedBase64OrRaw.key("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap(),
            b"C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_vec()
        );
        assert_eq!(SecretFormat::PrefixedBase64OrRaw.key("my own secret").unwrap(), b"my own secret".to_vec());
        assert_eq!(SecretFormat::Base64.key("C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap(), decoded);
        assert!(SecretFormat::Base64.key("my own secret").is_err());
        // Unpadded base64 is read as padded.
        assert_eq!(SecretFormat::Base64.key("whsec_YWJjZA").unwrap(), b"abcd".to_vec());
        // The other readings leave out the format's own.
        let other = SecretFormat::PrefixedBase64OrRaw.other_readings("C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
        assert!(other.iter().any(|(how, key)| *how == "base64 decoded" && *key == decoded), "{other:?}");
        assert!(!other.iter().any(|(_, key)| key.as_slice() == b"C2FVsBQIhrscChlQIMV+b5sSYspob7oD"));
    }
}
