//! The fuzz targets' checks (fuzz/checks.rs) on the stable toolchain, so `make test` runs them
//! without cargo-fuzz: thousands of byte strings and header values per target, from a seeded
//! generator (random bytes, mutations of valid signed inputs, JSON token soup), fed to the
//! signature verifiers and payload parsers; any panic or inconsistent answer fails the test with
//! the input that caused it. `NEVERMISS_FUZZ_ITERATIONS` (default 20,000 per target) and
//! `NEVERMISS_FUZZ_SEED` lengthen or vary the run (`make soak`); the coverage-guided run is
//! `cargo +nightly fuzz run <target>` in fuzz/ (see BENCHMARKS.md).

#[path = "../../fuzz/checks.rs"]
mod checks;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn iterations() -> usize {
    std::env::var("NEVERMISS_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000)
}

fn seed() -> u64 {
    std::env::var("NEVERMISS_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x6e65_7665_726d)
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "null",
    "true",
    "false",
    "0",
    "-1",
    "1e400",
    "9223372036854775808",
    "\"deliveryId\"",
    "\"jobId\"",
    "\"state\"",
    "\"seq\"",
    "\"finishedAt\"",
    "\"label\"",
    "\"error\"",
    "\"running\"",
    "\"succeeded\"",
    "\"queued\"",
    "\"failed\"",
    "\"canceled\"",
    "\"unknown\"",
    "\"2026-11-30T10:00:00Z\"",
    "\"request_id\"",
    "\"status\"",
    "\"OK\"",
    "\"ERROR\"",
    "\"payload\"",
    "\"data\"",
    "\"id\"",
    "\"type\"",
    "\\u0000",
    "\\ud800",
    "é",
    "\u{0}",
    " ",
    "\n",
    "\u{ff}",
];

/// One input: random bytes, a mutation of a valid seed, or JSON token soup.
fn input(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    match rng.random_range(0..3) {
        0 => {
            let len = rng.random_range(0..600);
            (0..len).map(|_| if rng.random_bool(0.03) { 0xff } else { rng.random() }).collect()
        }
        1 => {
            let mut bytes = seeds[rng.random_range(0..seeds.len())].clone();
            for _ in 0..rng.random_range(1..6) {
                if bytes.is_empty() {
                    break;
                }
                let at = rng.random_range(0..bytes.len());
                match rng.random_range(0..5) {
                    0 => bytes[at] ^= 1 << rng.random_range(0..8),
                    1 => bytes.truncate(at),
                    2 => bytes.insert(at, rng.random()),
                    3 => {
                        let end = rng.random_range(at..bytes.len().min(at + 32) + 1).min(bytes.len());
                        let copy = bytes[at..end].to_vec();
                        bytes.splice(at..at, copy);
                    }
                    _ => {
                        let token = TOKENS[rng.random_range(0..TOKENS.len())];
                        bytes.splice(at..at, token.bytes());
                    }
                }
            }
            bytes
        }
        _ => {
            let mut bytes = Vec::new();
            for _ in 0..rng.random_range(0..60) {
                if rng.random_bool(0.05) {
                    bytes.push(0xff);
                }
                bytes.extend_from_slice(TOKENS[rng.random_range(0..TOKENS.len())].as_bytes());
            }
            bytes
        }
    }
}

fn join(parts: &[&[u8]]) -> Vec<u8> {
    parts.join(&0xffu8)
}

fn run(name: &str, seeds: Vec<Vec<u8>>, check: fn(&[u8])) {
    let mut rng = StdRng::seed_from_u64(seed() ^ name.len() as u64);
    // The seeds themselves first: the valid inputs must pass.
    for s in &seeds {
        check(s);
    }
    for i in 0..iterations() {
        let data = input(&mut rng, &seeds);
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            let message = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("{name}: input {i} failed ({message:?}): {:?}", String::from_utf8_lossy(&data));
        }
    }
}

#[test]
fn generic_signature_and_payload() {
    let body = br#"{"deliveryId":"d-1","jobId":"job-42","state":"succeeded","seq":7,"finishedAt":"2026-11-30T10:00:00Z","label":"nightly","error":null}"#;
    let signature = nevermiss_engine::providers::generic::sign(b"fuzz-secret", body);
    run(
        "generic",
        vec![
            join(&[signature.as_bytes(), body]),
            join(&[signature.trim_start_matches("sha256=").as_bytes(), body]),
            join(&[b"sha256=00", br#"{"deliveryId":"d","jobId":"j","state":"running","seq":1}"#]),
        ],
        checks::generic,
    );
}

#[test]
fn standard_webhooks_verify_and_envelope() {
    use nevermiss_engine::providers::standard_webhooks;
    let key = standard_webhooks::secret_key("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
    let body = br#"{"type":"response.completed","data":{"id":"resp_1"}}"#;
    let now = 1_700_000_000;
    let signature = standard_webhooks::sign(&key, "msg_1", now, body);
    run(
        "standard_webhooks",
        vec![
            join(&[b"msg_1", now.to_string().as_bytes(), signature.as_bytes(), body]),
            join(&[b"msg_2", (now - 400).to_string().as_bytes(), b"v1,AAAA v1,", body]),
        ],
        checks::standard_webhooks,
    );
}

#[test]
fn fal_signature_form_webhook_and_key_set() {
    let body = br#"{"request_id":"req-1","gateway_request_id":"req-1","status":"OK","payload":{"images":[]}}"#;
    let error = br#"{"request_id":"req-2","status":"ERROR","error":"Invalid status code: 422","payload":{"detail":[{"msg":"bad"}]}}"#;
    let jwks = br#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
    let sig = "ab".repeat(64);
    run(
        "fal",
        vec![
            join(&[b"req-1", b"user-1", b"1700000000", sig.as_bytes(), body]),
            join(&[b"req-2", b"user-1", b"1700000100", sig.as_bytes(), error]),
            join(&[b"", b"", b"", b"", jwks]),
        ],
        checks::fal,
    );
}
