//! What each fuzz target checks, shared by the `cargo fuzz` targets (`fuzz_targets/*.rs`) and the
//! stable-toolchain run in `make test` (`tests/fuzz_parsers.rs`): the signature verifiers and
//! payload parsers never panic on any bytes or header values, and their answers are consistent
//! (deterministic, a correct signature always verifies, a verified one is the correct one).

#![allow(dead_code)]

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use nevermiss_engine::providers::{fal, generic, standard_webhooks};

/// Splits fuzz input into up to `N` parts at the 0xFF bytes (the last part takes the rest).
pub fn parts<const N: usize>(data: &[u8]) -> [&[u8]; N] {
    let mut out = [&data[..0]; N];
    let mut rest = data;
    for slot in out.iter_mut().take(N - 1) {
        match rest.iter().position(|&b| b == 0xff) {
            Some(at) => {
                *slot = &rest[..at];
                rest = &rest[at + 1..];
            }
            None => {
                *slot = rest;
                rest = &rest[rest.len()..];
            }
        }
    }
    out[N - 1] = rest;
    out
}

/// Headers from raw values; a value HTTP cannot carry is left out (as hyper would refuse it).
pub fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            map.append(HeaderName::from_static(name), value);
        }
    }
    map
}

/// The generic provider: `X-Agent-Signature` verification and the payload parser.
pub fn generic(data: &[u8]) {
    let [header, body] = parts::<2>(data);
    let secret = b"fuzz-secret";
    let header = String::from_utf8_lossy(header);
    let right = generic::sign(secret, body);
    assert!(generic::verify_signature(secret, body, &right).is_ok(), "the right signature verifies");
    if generic::verify_signature(secret, body, &header).is_ok() {
        let given = header.trim();
        let given = given.strip_prefix("sha256=").unwrap_or(given);
        assert!(given.eq_ignore_ascii_case(&right["sha256=".len()..]), "only the right signature verifies: {header:?}");
    }
    let parsed = generic::parse_payload(body);
    assert_eq!(parsed, generic::parse_payload(body), "the parser is deterministic");
    match parsed {
        Ok(delivery) => {
            assert!(!delivery.delivery_id.is_empty() && !delivery.event.job_id.is_empty());
            assert!(delivery.event.state.rank() >= 1, "a parsed event has a contract state");
        }
        Err(e) => assert!(!e.reason.is_empty(), "a refusal says why"),
    }
}

/// Standard Webhooks (Replicate, OpenAI, Anthropic): verification and the envelope.
pub fn standard_webhooks(data: &[u8]) {
    let [id, timestamp, signature, body] = parts::<4>(data);
    let key = standard_webhooks::secret_key("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
    let now = 1_700_000_000;
    let map = headers(&[
        (standard_webhooks::ID_HEADER, id),
        (standard_webhooks::TIMESTAMP_HEADER, timestamp),
        (standard_webhooks::SIGNATURE_HEADER, signature),
    ]);
    let verdict = standard_webhooks::verify(&key, &map, body, now);
    assert_eq!(verdict, standard_webhooks::verify(&key, &map, body, now), "deterministic");
    if let Ok(message_id) = &verdict {
        assert_eq!(message_id.as_bytes(), id, "the message id is the header's");
    }
    // A correct signature over the same id and body always verifies (for an id a header can
    // carry as text: visible ASCII, as the scheme's ids are; others are refused as invalid).
    if let Ok(id) = std::str::from_utf8(id) {
        if id.bytes().all(|b| (0x20..0x7f).contains(&b)) && HeaderValue::from_str(id).is_ok() {
            let right = standard_webhooks::sign(&key, id, now, body);
            let good = headers(&[
                (standard_webhooks::ID_HEADER, id.as_bytes()),
                (standard_webhooks::TIMESTAMP_HEADER, now.to_string().as_bytes()),
                (standard_webhooks::SIGNATURE_HEADER, format!("{} v1,AAAA", right).as_bytes()),
            ]);
            assert_eq!(standard_webhooks::verify(&key, &good, body, now), Ok(id.to_owned()));
        }
    }
    let _ = standard_webhooks::verify_signatures(&key, "x", 0, body, &String::from_utf8_lossy(signature));
    let envelope = standard_webhooks::Envelope::read(&map, body, "/data/id");
    let _ = envelope.require("data.id");
}

/// fal: the signature headers' form, the webhook parser, the key set parser.
pub fn fal(data: &[u8]) {
    let [request_id, user_id, timestamp, signature, body] = parts::<5>(data);
    let map = headers(&[
        (fal::REQUEST_ID_HEADER, request_id),
        (fal::USER_ID_HEADER, user_id),
        (fal::TIMESTAMP_HEADER, timestamp),
        (fal::SIGNATURE_HEADER, signature),
    ]);
    if let Ok(signed) = fal::signed_request(&map, body, 1_700_000_000) {
        assert!(!signed.verified_by_any(&[]), "no key verifies nothing");
    }
    let parsed = fal::parse_webhook(&map, body);
    assert_eq!(parsed, fal::parse_webhook(&map, body), "deterministic");
    if let Ok(delivery) = parsed {
        assert_eq!(delivery.delivery_id, delivery.event.job_id, "fal's request id is both");
        assert!(!delivery.delivery_id.is_empty());
    }
    let _ = fal::parse_jwks(body);
}
