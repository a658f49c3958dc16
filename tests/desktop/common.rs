//! What the in-process desktop tests share with the engine's suite: the generic secret they sign
//! with, a generic delivery body, its signature, and the bounded wait; and the admin API of an
//! engine in this process, called with the owner's token as the window calls it.

#![allow(dead_code)]

#[path = "../engine/harness/waiting.rs"]
mod waiting;
pub use waiting::wait_until;

use serde_json::{json, Value};

/// The generic webhook secret the in-process engines are configured with.
pub const SECRET: &str = "nevermiss-integration-test-secret";

/// A generic delivery body.
pub fn payload(delivery_id: &str, job_id: &str, state: &str, seq: i64) -> Value {
    json!({ "deliveryId": delivery_id, "jobId": job_id, "state": state, "seq": seq })
}

/// `sha256=<hex>` of the body with `SECRET`.
pub fn sign(body: &[u8]) -> String {
    nevermiss_engine::providers::generic::sign(SECRET.as_bytes(), body)
}

/// The admin API of an engine in this process, called with the owner's token (as the window).
pub struct OwnerApi<'a>(pub &'a nevermiss_engine::engine::Engine);

impl OwnerApi<'_> {
    /// `method path` with `body` as JSON, when given.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> reqwest::Response {
        let mut request = reqwest::Client::new().request(method, format!("http://{}{path}", self.0.api_addr)).bearer_auth(&self.0.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.unwrap()
    }
}
