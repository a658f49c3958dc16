//! Secrets as each provider writes them: a Standard Webhooks secret with or without `whsec_` is
//! read as that provider's own SDK reads it (OpenAI: an unprefixed secret is its own bytes;
//! Anthropic and Replicate: base64 either way), and a secret that cannot be valid is refused when
//! it is saved (400, the reason next to the field) instead of making every delivery a 401. One
//! that got in anyway (an environment variable, an older version) answers 503, not 401.

use base64::Engine as _;
use nevermiss_engine::api::ErrorBody;
use nevermiss_engine::providers::SecretKind;
use nevermiss_engine::receiver::HookAnswer;
use nevermiss_engine::store::job::Outcome;
use serde_json::{json, Value};

use crate::harness::TestApp;
use reqwest::StatusCode;

const ENCODED: &str = "C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

async fn put_secret(app: &TestApp, provider: &str, secret: &str) -> (u16, Value) {
    let response = app.api.raw_put(&format!("/api/secrets/{provider}"), &json!({ "webhook_secret": secret })).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn outcome(status: StatusCode, answer: HookAnswer) -> Option<Outcome> {
    assert_eq!(status, 200, "{answer:?}");
    answer.outcome
}

fn openai_event(id: &str) -> Value {
    json!({"id": "evt_1", "object": "event", "type": "response.completed", "created_at": 1_796_032_800, "data": {"id": id}})
}

fn anthropic_event(id: &str) -> Value {
    crate::harness::conformance::fixture("anthropic/webhook_event")
        .id("wevt_1")
        .set("created_at", "2026-11-30T10:00:00Z")
        .set("data.type", "session.status_run_started")
        .set("data.id", id)
        .value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_read_as_each_provider_writes_them() {
    let mut app = TestApp::spawn_unconfigured().await;
    let decoded = base64::engine::general_purpose::STANDARD.decode(ENCODED).unwrap();
    // The harness signs `whsec_` + base64 with the decoded key, and an unprefixed secret with
    // its own bytes, as the senders do.
    let signed_with_decoded_key = format!("whsec_{ENCODED}");
    assert_eq!(nevermiss_engine::providers::standard_webhooks::secret_key(&signed_with_decoded_key), decoded);

    // Anthropic and Replicate: base64 with or without the prefix, the same key.
    for (provider, body) in [
        ("anthropic", anthropic_event("sesn_1")),
        ("replicate", crate::harness::conformance::fixture("replicate/prediction").id("p1").status("processing").value()),
    ] {
        for (i, saved) in [ENCODED.to_owned(), format!("whsec_{ENCODED}")].iter().enumerate() {
            let (status, answer) = put_secret(&app, provider, saved).await;
            assert_eq!(status, 200, "{provider} {saved}: {answer}");
            let (status, answer) = app.sw_hook(provider, &signed_with_decoded_key, &format!("m-{i}"), &body).await;
            assert!(matches!(outcome(status, answer), Some(Outcome::Applied | Outcome::Stale)), "{provider}, saved as {saved}");
        }
    }

    // OpenAI: an unprefixed secret is its own bytes (its SDK's reading), so the same text
    // signs with the text itself; with the prefix, base64.
    let (status, _) = put_secret(&app, "openai", ENCODED).await;
    assert_eq!(status, 200);
    let (status, answer) = app.sw_hook("openai", ENCODED, "wh-raw", &openai_event("resp_1")).await;
    assert_eq!(outcome(status, answer), Some(Outcome::Applied));
    let (status, _) = app.sw_hook("openai", &signed_with_decoded_key, "wh-raw-2", &openai_event("resp_2")).await;
    assert_eq!(status, 401, "OpenAI reads an unprefixed secret as its bytes, not as base64");
    let (status, _) = put_secret(&app, "openai", "my own plain secret").await;
    assert_eq!(status, 200, "any text is a valid unprefixed OpenAI secret");

    // Refused when saved, the reason next to the field; the secret in force is unchanged.
    let (status, _) = put_secret(&app, "anthropic", &format!("whsec_{ENCODED}")).await;
    assert_eq!(status, 200);
    for (provider, bad) in [
        ("anthropic", "my own plain secret"),
        ("replicate", "not base64!"),
        ("openai", "whsec_the-real-secret-value-123"),
        ("anthropic", "whsec_"),
    ] {
        let (status, answer) = put_secret(&app, provider, bad).await;
        assert_eq!(status, 400, "{provider} {bad:?}: {answer}");
        let body: ErrorBody = serde_json::from_value(answer.clone()).unwrap();
        let reason = body.errors.as_ref().and_then(|e| e.get("webhook_secret")).unwrap_or_else(|| panic!("no field reason: {answer}"));
        assert!(reason.contains("base64") || reason.contains("empty"), "{provider} {bad:?}: {reason}");
    }
    let (status, answer) = app.sw_hook("anthropic", &signed_with_decoded_key, "m-kept", &anthropic_event("sesn_2")).await;
    assert_eq!(outcome(status, answer), Some(Outcome::Applied), "the refused save left the good secret in force");

    // A secret that cannot be valid, set around the API (an environment variable, an older
    // version): every delivery is 503 (the sender retries), never a 401 that looks like forgery.
    app.engine().services.secrets.set("anthropic", SecretKind::WebhookSecret, Some("whsec_***")).unwrap();
    let (status, answer) = app.sw_hook("anthropic", &signed_with_decoded_key, "m-bad", &anthropic_event("sesn_3")).await;
    assert_eq!(status, 503, "{answer:?}");
    assert!(answer.error.as_deref().unwrap().contains("cannot be used"), "{answer:?}");
    app.shutdown().await;
}
