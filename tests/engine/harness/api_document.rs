//! Every answer the suite reads through `ApiClient` is held to the admin API's OpenAPI document
//! (`nevermiss_engine::api::openapi::document`, what `/api/openapi.json` serves and the book
//! renders): its status must be one the route lists, and its JSON body one the listed schema
//! accepts. So the document cannot drift from what a running engine answers, in any test that
//! calls the API. A path or method the document does not have (a probe of an unknown route) is
//! left to the test that sent it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use nevermiss_engine::api::openapi::document;
use reqwest::Method;
use serde_json::Value;

struct Document {
    /// Each documented path, its template as the value.
    paths: matchit::Router<String>,
    /// The compiled schema of each answer, by (template, method, status).
    validators: Mutex<HashMap<(String, String, String), std::sync::Arc<jsonschema::Validator>>>,
}

fn loaded() -> &'static Document {
    static DOCUMENT: OnceLock<Document> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut paths = matchit::Router::new();
        for template in document()["paths"].as_object().expect("paths").keys() {
            paths.insert(template.clone(), template.clone()).expect("a documented path is a route");
        }
        Document { paths, validators: Mutex::new(HashMap::new()) }
    })
}

fn validator(template: &str, method: &str, status: &str, schema: &Value) -> std::sync::Arc<jsonschema::Validator> {
    let key = (template.to_owned(), method.to_owned(), status.to_owned());
    let mut validators = loaded().validators.lock().unwrap();
    validators
        .entry(key)
        .or_insert_with(|| {
            let mut root = schema.clone();
            root["components"] = document()["components"].clone();
            std::sync::Arc::new(jsonschema::validator_for(&root).expect("the document's schema compiles"))
        })
        .clone()
}

/// The answer to `method path`, after checking it against the document; given back as it came.
pub async fn checked(method: &Method, path: &str, response: reqwest::Response) -> reqwest::Response {
    let route = path.split('?').next().unwrap_or(path);
    let Ok(found) = loaded().paths.at(route) else { return response };
    let template = found.value.clone();
    let method_name = method.as_str().to_ascii_lowercase();
    let Some(operation) = document()["paths"][&template].get(&method_name) else { return response };
    let status = response.status();
    let what = format!("{method} {path} (documented as {template})");
    let Some(answer) = operation["responses"].get(status.as_str()) else {
        let body = response.text().await.unwrap_or_default();
        panic!("{what} answered {status}, which the API's OpenAPI document does not list: {body}");
    };
    let Some(schema) = answer.pointer("/content/application~1json/schema") else { return response };
    let is_json = response.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("application/json"));
    assert!(is_json, "{what} answered {status} with {:?}, where the document says JSON", response.headers().get("content-type"));
    let headers = response.headers().clone();
    let version = response.version();
    let bytes = response.bytes().await.unwrap_or_else(|e| panic!("{what}: reading the answer: {e}"));
    let value: Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{what} answered {status} with a body that is not JSON ({e})"));
    let errors: Vec<String> = validator(&template, &method_name, status.as_str(), schema)
        .iter_errors(&value)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} answered {status} with a body its OpenAPI schema refuses:\n  {}\nbody: {value}",
        errors.join("\n  ")
    );
    let mut rebuilt = axum::http::Response::builder().status(status).version(version);
    *rebuilt.headers_mut().unwrap() = headers;
    reqwest::Response::from(rebuilt.body(bytes).unwrap())
}
