//! A recipe whose sender signs with an RS256 JWT (`verify = "jwt"`), through a real
//! `serve`: the token is checked against a loopback JWKS with the audience (this instance's
//! webhook URL), the issuer and the expiry, and, since a platform's key proves only the platform,
//! the delivery's account against the owner's secret. The token covers no part of the body, so a
//! good token's delivery is a hint: the poll it causes moves the job, and a token replayed with
//! another body moves nothing. A wrong audience, an expired token or one not valid yet (`nbf`),
//! another key, an unknown key id and another account are each 401,
//! counted and kept among the refused with their kind; an unknown `kid` fetches the key set again
//! at most once a minute. The keys are fixed test keys (tests/fixtures/jwt).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use nevermiss_engine::api::RefusedList;
use nevermiss_engine::store::job::JobState;
use nevermiss_engine::store::refused::RefusalKind;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::conformance::fixtures_dir;
use crate::harness::serve_child::serve_with_recipe;
use crate::harness::signing::now_secs;
use crate::harness::stand_in::serve_unjudged;

const PUBLIC_URL: &str = "https://hooks.example.com";
const ISSUER: &str = "https://issuer.acme.example";
const OWNER: &str = "owner-token-7c1f";

/// The platform: its key set (counting its fetches) and its jobs' status.
struct Platform {
    jwks: Value,
    fetches: AtomicUsize,
    status: Mutex<String>,
}

async fn jwks(State(p): State<Arc<Platform>>) -> Json<Value> {
    p.fetches.fetch_add(1, Ordering::SeqCst);
    Json(p.jwks.clone())
}

async fn job(State(p): State<Arc<Platform>>) -> Json<Value> {
    Json(json!({"status": p.status.lock().unwrap().clone()}))
}

fn key_file(name: &str, ext: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join("jwt").join(format!("{name}.{ext}"))).unwrap()
}

/// A token signed by the test key `key` as `kid`, with these claims.
fn token(key: &str, kid: &str, claims: Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_rsa_der(&key_file(key, "der"))).unwrap()
}

fn claims(audience: &str, expires: i64) -> Value {
    json!({"iss": ISSUER, "aud": audience, "iat": now_secs(), "exp": expires, "sub": "platform-service"})
}

/// The delivery's body: the job it is about, its status, and the metadata the owner set at
/// submission (where the account is proven).
fn body(owner: &str) -> Value {
    json!({"type": "job.finished", "data": {"id": "aj-1", "status": "DONE"}, "user_metadata": {"owner": owner}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwt_senders_delivery_is_taken_only_with_its_audience_issuer_expiry_key_and_the_owners_account() {
    let mut jwk: Value = serde_json::from_slice(&key_file("google_like", "jwk")).unwrap();
    jwk["kid"] = json!("k1");
    let platform = Arc::new(Platform { jwks: json!({"keys": [jwk]}), fetches: AtomicUsize::new(0), status: Mutex::new("RUNNING".into()) });
    let base =
        serve_unjudged(Router::new().route("/jwks.json", get(jwks)).route("/v1/jobs/{id}", get(job)).with_state(platform.clone())).await;
    let recipe = format!(
        r#"name = "acme-jwt"
ids = ["aj-"]
base_url = "{base}"

[poll]
url = "{{base_url}}/v1/jobs/{{job_id}}"
headers = {{ Authorization = "Bearer {{api_key}}" }}

[read]
state = ".status"

[states]
RUNNING = "running"
DONE = "succeeded"

[webhook]
verify = "jwt"
jwks_url = "{base}/jwks.json"
audience = "{{webhook_url}}"
issuer = "{ISSUER}"
account = ".body.user_metadata.owner"
owner = "{{secret.owner_token}}"
job_id = ".data.id"
delivery_id_header = "webhook-id"
"#
    );
    let env = vec![
        ("NEVERMISS_ACME_JWT_API_KEY".into(), "acme-key".into()),
        ("NEVERMISS_ACME_JWT_OWNER_TOKEN".into(), OWNER.into()),
        ("NEVERMISS_PUBLIC_URL".into(), PUBLIC_URL.into()),
    ];
    let (_dir, server) = serve_with_recipe("acme-jwt.toml", &recipe, env).await;
    // Settings says there is no webhook secret to set (the platform's key set signs), and shows
    // the owner's secret the recipe names, set from its variable.
    let secrets: Value = server.api.raw_get("/api/secrets").await.json().await.unwrap();
    assert_eq!(secrets["providers"]["acme-jwt"]["webhooks"], json!("platform_keys"), "{secrets}");
    assert_eq!(secrets["providers"]["acme-jwt"]["named"]["owner_token"]["from_env"], json!(true), "{secrets}");
    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": "acme-jwt", "job_id": "aj-1"})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED);
    server.api.wait_for_state("acme-jwt", "aj-1", JobState::Running).await;

    let http = reqwest::Client::new();
    let deliver = |token: String, body: Value, id: &'static str| {
        let request = http
            .post(format!("{}/hooks/acme-jwt", server.receiver))
            .header("authorization", format!("Bearer {token}"))
            .header("webhook-id", id)
            .body(body.to_string());
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap_or_default())
        }
    };
    let audience = format!("{PUBLIC_URL}/hooks/acme-jwt");
    let soon = now_secs() + 300;

    // Each refused: 401, counted, kept with its kind; the job does not move.
    let refusals = [
        (
            token("google_like", "k1", claims("https://elsewhere.example/hooks/acme-jwt", soon)),
            body(OWNER),
            RefusalKind::BadSignature,
            "wrong audience",
        ),
        (token("google_like", "k1", claims(&audience, now_secs() - 3600)), body(OWNER), RefusalKind::Expired, "expired"),
        (
            token("google_like", "k1", json!({"iss": ISSUER, "aud": audience, "exp": soon, "nbf": now_secs() + 3600})),
            body(OWNER),
            RefusalKind::Expired,
            "not valid yet (nbf)",
        ),
        (token("other", "k1", claims(&audience, soon)), body(OWNER), RefusalKind::BadSignature, "another key, the same kid"),
        (
            token("google_like", "k1", json!({"iss": "https://other-issuer.example", "aud": audience, "exp": soon})),
            body(OWNER),
            RefusalKind::BadSignature,
            "wrong issuer",
        ),
        (token("google_like", "k1", claims(&audience, soon)), body("someone-else"), RefusalKind::ForeignAccount, "another account"),
    ];
    for (n, (token, body, kind, what)) in refusals.into_iter().enumerate() {
        let (status, answer) = deliver(token, body, "dlv-refused").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {answer}");
        let refused: RefusedList = server.api.get("/api/refused", StatusCode::OK).await;
        assert_eq!(refused.refused[0].kind, kind, "{what}: {:?}", refused.refused[0]);
        assert_eq!(server.api.metrics().await.store.bad_signatures, n as i64 + 1, "{what}: counted");
    }
    let refused: RefusedList = server.api.get("/api/refused", StatusCode::OK).await;
    assert!(refused.refused[0].cause.contains("not the owner's"), "{}", refused.refused[0].cause);
    assert!(!server.log_text().contains(OWNER), "the owner's secret is never logged");
    assert_eq!(server.api.job_now("acme-jwt", "aj-1").await.job.state, JobState::Running, "no refusal moved the job");

    // An unknown kid fetches the set again, once; another right after does not.
    let fetched = platform.fetches.load(Ordering::SeqCst);
    assert_eq!(fetched, 1, "one fetch so far: the keys are kept by kid");
    for kid in ["k9", "k10"] {
        let (status, _) = deliver(token("other", kid, claims(&audience, soon)), body(OWNER), "dlv-kid").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{kid}");
    }
    assert_eq!(platform.fetches.load(Ordering::SeqCst), fetched + 1, "at most one fetch a minute for unknown key ids");

    // The token covers no part of the body: a good token replayed with another body (another
    // job, said done) is only a hint about that job, which is polled and stays as it is.
    let good = token("google_like", "k1", claims(&audience, soon));
    let tracked = server.api.raw_post("/api/jobs", &json!({"provider": "acme-jwt", "job_id": "aj-2"})).await;
    assert_eq!(tracked.status(), StatusCode::CREATED);
    server.api.wait_for_state("acme-jwt", "aj-2", JobState::Running).await;
    let mut replayed = body(OWNER);
    replayed["data"]["id"] = json!("aj-2");
    let (status, answer) = deliver(good.clone(), replayed, "dlv-replayed").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(server.api.job_now("acme-jwt", "aj-2").await.job.state, JobState::Running, "a replayed token's body moved a job");

    // The owner's delivery with a good token: a hint, whose poll ends the job at once; its resend
    // is a duplicate.
    *platform.status.lock().unwrap() = "DONE".into();
    let (status, answer) = deliver(good.clone(), body(OWNER), "dlv-good").await;
    assert!(status == StatusCode::OK && ["applied", "stale"].contains(&answer["outcome"].as_str().unwrap_or_default()), "{answer}");
    let done = server.api.wait_for_state("acme-jwt", "aj-1", JobState::Succeeded).await;
    assert_eq!(done.job.terminal_source, Some(nevermiss_engine::store::job::Source::Pull));
    let (status, answer) = deliver(good, body(OWNER), "dlv-good").await;
    assert_eq!((status, answer["outcome"].as_str()), (StatusCode::OK, Some("duplicate")), "{answer}");
    server.stop().await;
}
