//! What the providers' own SDKs judge (`tests/conformance/judge.py`):
//! - `fixture`: the payloads the stand-ins serve and the tests send, kept as JSON files under
//!   `tests/fixtures/<provider>/` (each named in `tests/fixtures/manifest.json` with the SDK model
//!   it must validate as), loaded and changed only through `Fixture`'s typed setters (ids,
//!   statuses, times), so the bodies on the wire are built from checked fixtures;
//! - `record_served` / `record_sent`: every body a stand-in serves (`stand_in::serve` wraps every
//!   stand-in's router with the recorder) and every webhook a test sends that the engine accepted
//!   is appended to `LOG`, which the judge checks against the SDK model of its route after the
//!   Rust suite: no stand-in body escapes the check. A body that is off the SDKs' spec on purpose
//!   (a value from the future, to test what NeverMiss does with it) says so with `OFF_SPEC_HEADER`
//!   and its reason, which the judge prints instead of failing.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{json, Value};

/// Where the bodies are logged (JSON lines), under the cargo target dir.
pub const LOG: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/conformance/bodies.jsonl");

/// A stand-in's answer that is off the SDKs' spec on purpose carries this header, with why.
pub const OFF_SPEC_HEADER: &str = "x-conformance-off-spec";

/// The fixtures' folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A fixture, to change before it is served or sent.
#[derive(Debug, Clone)]
pub struct Fixture(Value);

/// `tests/fixtures/{name}.json` (e.g. `anthropic/session`).
pub fn fixture(name: &str) -> Fixture {
    let path = fixtures_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    Fixture(serde_json::from_str(&text).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display())))
}

impl Fixture {
    /// Sets the field at a dotted path (`stats.active_seconds`, `data.id`), which must exist in
    /// the fixture: a change never adds a field the fixture (and so the SDK check) did not have.
    pub fn set(mut self, path: &str, value: impl Into<Value>) -> Fixture {
        let slot = self.slot(path);
        *slot = value.into();
        self
    }

    /// Removes an optional field (one the SDK model declares optional: the judge checks the
    /// fixture with it, and the SDK accepts it without).
    pub fn without(mut self, path: &str) -> Fixture {
        let (parent, last) = path.rsplit_once('.').map_or(("", path), |(p, l)| (p, l));
        let object = if parent.is_empty() { &mut self.0 } else { self.slot(parent) };
        object.as_object_mut().expect("an object").remove(last).unwrap_or_else(|| panic!("no field {path} to remove"));
        self
    }

    pub fn id(self, id: &str) -> Fixture {
        self.set("id", id)
    }

    pub fn status(self, status: &str) -> Fixture {
        self.set("status", status)
    }

    pub fn value(self) -> Value {
        self.0
    }

    fn slot(&mut self, path: &str) -> &mut Value {
        let mut at = &mut self.0;
        for part in path.split('.') {
            at = match at {
                Value::Object(map) => map.get_mut(part).unwrap_or_else(|| panic!("the fixture has no field {path}")),
                Value::Array(list) => {
                    let i: usize = part.parse().unwrap_or_else(|_| panic!("{part} of {path} is not an index"));
                    list.get_mut(i).unwrap_or_else(|| panic!("the fixture has no item {path}"))
                }
                _ => panic!("the fixture has no field {path}"),
            };
        }
        at
    }
}

impl From<Fixture> for Value {
    fn from(f: Fixture) -> Value {
        f.0
    }
}

/// Marks a stand-in's answer as off the SDKs' spec on purpose, with why.
pub fn off_spec(mut response: Response, why: &str) -> Response {
    response.headers_mut().insert(OFF_SPEC_HEADER, HeaderValue::from_str(why).expect("a header value"));
    response
}

tokio::task_local! {
    static OFF_SPEC_SENDS: &'static str;
}

/// Runs `f` with every webhook it sends marked as off the SDKs' spec on purpose, with why (e.g. a
/// type the API sends that the SDK's union does not have yet).
pub async fn off_spec_sends<F: std::future::Future>(why: &'static str, f: F) -> F::Output {
    OFF_SPEC_SENDS.scope(why, f).await
}

/// Why the webhooks sent now are off the spec, inside `off_spec_sends`.
pub fn sends_off_spec() -> Option<&'static str> {
    OFF_SPEC_SENDS.try_with(|why| *why).ok()
}

static SEEN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn append(entry: Value) {
    let line = entry.to_string();
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        line.hash(&mut h);
        h.finish()
    };
    let mut seen = SEEN.lock().unwrap();
    if !seen.get_or_insert_with(HashSet::new).insert(hash) {
        return;
    }
    let path = std::path::Path::new(LOG);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    writeln!(file, "{line}").unwrap();
}

/// The recorder every stand-in's router is wrapped with: each JSON answer of a known size is
/// logged with its method, path and status (streamed answers, such as a dripping body, pass as
/// they are).
pub async fn record_served(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().to_string(), request.uri().path().to_owned());
    let response = next.run(request).await;
    use axum::body::HttpBody;
    let json = response.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|c| c.contains("json"));
    if !json || response.body().size_hint().exact().is_none() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let off_spec = parts.headers.remove(OFF_SPEC_HEADER).and_then(|v| v.to_str().ok().map(str::to_owned));
    let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
    append(json!({
        "kind": "served", "method": method, "path": path, "status": parts.status.as_u16(),
        "body": parsed, "off_spec": off_spec,
    }));
    Response::from_parts(parts, Body::from(bytes))
}

/// Logs a webhook body a test sent to `/hooks/{provider}` that the engine accepted as a
/// well-formed event (applied, duplicate or stale; a body refused on purpose is not the SDKs').
pub fn record_sent(provider: &str, body: &[u8], off_spec: Option<&str>) {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    append(json!({"kind": "sent", "provider": provider, "body": parsed, "off_spec": off_spec}));
}
