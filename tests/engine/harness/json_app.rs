//! A JSON view of a running engine, as the provider suites written before the typed harness use
//! it (`App`: answers as `serde_json::Value`). Ported as-is from the old `provider_support` so
//! that main's newer suites run under `crate::harness`; new tests should use `TestApp` and the
//! typed `ApiClient` instead.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nevermiss_engine::engine::{Engine, EngineConfig};
use nevermiss_engine::outbox::LogNotifier;
use nevermiss_engine::providers::standard_webhooks;
use nevermiss_engine::secrets::SecretKind;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::signing::now_secs;
use super::waiting::{wait_until, WAIT};

/// A running engine and a client for its two ports.
pub struct App {
    // The engine is dropped before the temporary dir it lives in.
    engine: Option<Engine>,
    pub http: reqwest::Client,
    pub receiver: String,
    pub api: String,
    pub token: String,
    _dir: TempDir,
}

impl App {
    pub async fn start() -> App {
        let dir = TempDir::new().unwrap();
        // Loopback on ports the OS picks, no poll interval override.
        let engine = Engine::start(EngineConfig::local(dir.path()), Arc::new(LogNotifier))
            .await
            .expect("the engine starts");
        App {
            http: reqwest::Client::builder().timeout(WAIT).build().unwrap(),
            receiver: format!("http://{}", engine.receiver_addr),
            api: format!("http://{}", engine.api_addr),
            token: engine.token.clone(),
            engine: Some(engine),
            _dir: dir,
        }
    }

    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().expect("the engine runs")
    }

    pub async fn shutdown(mut self) {
        if let Some(engine) = self.engine.take() {
            engine.shutdown().await;
        }
    }

    /// Points a provider at a stand-in: its base URL setting and, when given, its secrets.
    pub async fn configure(&self, provider: &str, base_url: &str, api_key: Option<&str>, webhook_secret: Option<&str>) {
        let services = &self.engine().services;
        services.settings.set(&format!("{provider}.base_url"), base_url).await.unwrap();
        services.secrets.set(provider, SecretKind::ApiKey, api_key).unwrap();
        services.secrets.set(provider, SecretKind::WebhookSecret, webhook_secret).unwrap();
    }

    pub async fn set_setting(&self, key: &str, value: &str) {
        self.engine().services.settings.set(key, value).await.unwrap();
    }

    // ----- the receiver -----

    /// POSTs `body` to `/hooks/{provider}` signed the Standard Webhooks way with `secret`, as of
    /// `timestamp`; returns the status and the JSON answer.
    pub async fn hook_at(&self, provider: &str, secret: &str, webhook_id: &str, timestamp: i64, body: &[u8]) -> (u16, Value) {
        let key = standard_webhooks::secret_key(secret);
        let signature = standard_webhooks::sign(&key, webhook_id, timestamp, body);
        let response = self
            .http
            .post(format!("{}/hooks/{provider}", self.receiver))
            .header("content-type", "application/json")
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_vec())
            .send()
            .await
            .expect("the receiver answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A signed delivery as of now.
    pub async fn hook(&self, provider: &str, secret: &str, webhook_id: &str, body: &Value) -> (u16, Value) {
        self.hook_at(provider, secret, webhook_id, now_secs(), &serde_json::to_vec(body).unwrap()).await
    }

    /// A signed delivery that must be answered 200; returns its outcome.
    pub async fn deliver(&self, provider: &str, secret: &str, webhook_id: &str, body: &Value) -> String {
        let (status, answer) = self.hook(provider, secret, webhook_id, body).await;
        assert_eq!(status, 200, "delivery {webhook_id} was answered {status}: {answer}");
        answer["outcome"].as_str().unwrap_or_else(|| panic!("no outcome in {answer}")).to_owned()
    }

    // ----- the admin API -----

    async fn api_call(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.bearer_auth(&self.token).send().await.expect("the API answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `PUT /api/settings` with `changes`; the status and the answer.
    pub async fn put_settings(&self, changes: &Value) -> (u16, Value) {
        self.api_call(self.http.put(format!("{}/api/settings", self.api)).json(changes)).await
    }

    /// `POST /api/jobs`: starts tracking a job (the engine polls it right away).
    pub async fn track(&self, provider: &str, job_id: &str) {
        let (status, answer) = self
            .api_call(self.http.post(format!("{}/api/jobs", self.api)).json(&json!({"provider": provider, "job_id": job_id})))
            .await;
        assert!(status == 201 || status == 200, "tracking {provider}/{job_id}: {status} {answer}");
    }

    /// `POST /api/reconcile`: one pass now; its report.
    pub async fn reconcile(&self) -> Value {
        let (status, report) = self.api_call(self.http.post(format!("{}/api/reconcile", self.api))).await;
        assert_eq!(status, 200, "reconcile: {report}");
        report
    }

    /// `GET /api/jobs/{provider}/{job_id}`, `None` on 404.
    pub async fn job(&self, provider: &str, job_id: &str) -> Option<Value> {
        let (status, job) = self.api_call(self.http.get(format!("{}/api/jobs/{provider}/{job_id}", self.api))).await;
        match status {
            200 => Some(job),
            404 => None,
            _ => panic!("GET job {provider}/{job_id}: {status} {job}"),
        }
    }

    /// The job, which must exist.
    pub async fn job_now(&self, provider: &str, job_id: &str) -> Value {
        self.job(provider, job_id).await.unwrap_or_else(|| panic!("no job {provider}/{job_id}"))
    }

    /// Waits until the job exists and `check` holds for it; returns it.
    pub async fn wait_for_job(&self, provider: &str, job_id: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let found = Mutex::new(None);
        wait_until(&format!("{provider}/{job_id}: {what}"), || async {
            match self.job(provider, job_id).await {
                Some(job) if check(&job) => {
                    *found.lock().unwrap() = Some(job);
                    true
                }
                _ => false,
            }
        })
        .await;
        found.into_inner().unwrap().unwrap()
    }

    /// Waits until a job is in `state`.
    pub async fn wait_for_state(&self, provider: &str, job_id: &str, state: &str) -> Value {
        self.wait_for_job(provider, job_id, &format!("state is {state}"), |j| j["state"] == state).await
    }

    /// Waits until a job's last poll failed with a reason containing `text`.
    pub async fn wait_for_poll_error(&self, provider: &str, job_id: &str, text: &str) -> Value {
        self.wait_for_job(provider, job_id, &format!("poll_error mentions {text:?}"), |j| {
            j["poll_error"].as_str().is_some_and(|e| e.contains(text))
        })
        .await
    }

    /// `GET /api/deliveries/{provider}/{delivery_id}`, `None` on 404.
    pub async fn delivery(&self, provider: &str, delivery_id: &str) -> Option<Value> {
        let (status, delivery) = self
            .api_call(self.http.get(format!("{}/api/deliveries/{provider}/{delivery_id}", self.api)))
            .await;
        (status == 200).then_some(delivery)
    }

    /// The outcomes of a job's timeline, oldest first, as `source:outcome:state`.
    pub async fn timeline(&self, provider: &str, job_id: &str) -> Vec<String> {
        let job = self.job_now(provider, job_id).await;
        job["timeline"]
            .as_array()
            .unwrap_or_else(|| panic!("no timeline in {job}"))
            .iter()
            .map(|e| {
                format!(
                    "{}:{}:{}",
                    e["source"].as_str().unwrap_or("?"),
                    e["outcome"].as_str().unwrap_or("?"),
                    e["state"].as_str().unwrap_or("-")
                )
            })
            .collect()
    }

    /// `GET /api/metrics`.
    pub async fn metrics(&self) -> Value {
        let (status, metrics) = self.api_call(self.http.get(format!("{}/api/metrics", self.api))).await;
        assert_eq!(status, 200, "metrics: {metrics}");
        metrics
    }

    /// Waits until the metrics show `provider`'s polling health as `status`; returns that entry.
    pub async fn wait_for_health(&self, provider: &str, status: &str) -> Value {
        let found = Mutex::new(Value::Null);
        wait_until(&format!("{provider}'s polling health is {status}"), || async {
            let metrics = self.metrics().await;
            let entry = metrics["providers"][provider].clone();
            let hit = entry["status"] == status;
            *found.lock().unwrap() = entry;
            hit
        })
        .await;
        found.into_inner().unwrap()
    }
}

/// The length of a paused provider's pause, from its health entry (`paused_until - since`, both
/// taken at the same instant when the pause began).
pub fn json_pause_of(health: &Value) -> Duration {
    let at = |field: &str| {
        chrono::DateTime::parse_from_rfc3339(health[field].as_str().unwrap_or_else(|| panic!("no {field} in {health}")))
            .unwrap()
            .timestamp_millis()
    };
    Duration::from_millis((at("paused_until") - at("since")) as u64)
}

