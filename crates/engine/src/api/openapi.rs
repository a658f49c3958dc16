//! The admin API described from the code: an OpenAPI 3.1 document built from each handler's
//! `#[utoipa::path]` and the types' `ToSchema` (the same types ts-rs gives the UI), served at
//! `GET /api/openapi.json` (no token: it describes the API and holds nothing) and rendered in the
//! book's API page. Three things are added here, once, rather than on each handler: who may call
//! each route (`x-nevermiss-access`, from the route table the router is built from), the refusals
//! every route with a token shares (401, 403, 503), and an example for each body that has none,
//! composed from its schema.

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};
use utoipa::OpenApi;

use super::{route_table, Access, ApiContext};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "NeverMiss admin API",
        description = "On `127.0.0.1:8788` (loopback only). Every call but the two marked otherwise takes \
            `Authorization: Bearer <token>`: the owner's API token (`api-token` in the data dir), or a hub's \
            device token where `x-nevermiss-access` says `devices`. Every refusal is JSON `{\"error\": \"...\"}`, \
            with `errors` naming each refused field of a form.",
    ),
    paths(
        super::status::health,
        super::status::info,
        super::status::metrics,
        super::status::history,
        super::status::reconcile,
        super::status::passes,
        super::refused::list,
        super::stream::events,
        super::jobs::list,
        super::jobs::track,
        super::jobs::detail,
        super::jobs::untrack,
        super::jobs::poll_now,
        super::cancel::cancel,
        super::jobs::delivery,
        super::groups::list,
        super::groups::detail,
        super::providers::list,
        super::providers::test,
        super::settings::read,
        super::settings::update,
        super::setup::secret_status,
        super::setup::set_secrets,
        super::setup::fetch_replicate_secret,
        super::setup::retry_keychain,
        super::setup::test_delivery,
        super::channels::list,
        super::channels::put,
        super::channels::remove,
        super::channels::test,
        super::tunnel::state,
        super::tunnel::self_test,
        super::tunnel::restart,
        super::tunnel::acknowledge,
        super::tunnel::credentials,
        super::tunnel::set_credentials,
        super::devices::list,
        super::devices::add,
        super::devices::revoke,
        super::devices::whoami,
        super::devices::notifications,
        super::devices::ack,
        super::hub::read,
        super::hub::update,
        super::handover::issue,
        super::handover::redeem,
        super::handover::whoami,
    ),
    components(schemas(crate::changes::Change, crate::device_messages::DeviceNotification)),
    modifiers(&ApiToken),
    security(("api_token" = [])),
    tags(
        (name = "jobs", description = "The jobs NeverMiss watches"),
        (name = "groups", description = "Sweeps and batches, announced once"),
        (name = "status", description = "Health, metrics, reconcile passes, refused requests, the live stream"),
        (name = "providers", description = "The providers and their recipes"),
        (name = "settings", description = "Settings and secrets"),
        (name = "channels", description = "Where notifications go"),
        (name = "tunnel", description = "The public URL"),
        (name = "hub", description = "A hub and its devices"),
        (name = "access", description = "How a browser or the CLI gets and checks the token"),
    )
)]
struct ApiDoc;

/// The bearer token every secured call takes.
struct ApiToken;

impl utoipa::Modify for ApiToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_token", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The document, built once.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes");
        doc["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
        add_access_and_shared_refusals(&mut doc);
        add_examples(&mut doc);
        doc
    })
}

/// `GET /api/openapi.json`, with no token.
pub fn open_router() -> Router<Arc<ApiContext>> {
    Router::new().route("/api/openapi.json", get(|| async { Json(document().clone()) }))
}

/// The name `x-nevermiss-access` gives each kind of `Access`.
pub fn access_name(access: Access) -> &'static str {
    match access {
        Access::OwnerOnly => "owner",
        Access::DevicesToo => "devices",
        Access::DevicesWhenAllowed => "devices_when_allowed",
    }
}

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

fn error_answer(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    })
}

fn add_access_and_shared_refusals(doc: &mut Value) {
    let table = route_table();
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for (path, item) in paths.iter_mut() {
        let access = table.iter().find(|(p, _)| format!("/api{p}") == *path).map(|(_, a)| *a);
        for method in METHODS {
            let Some(op) = item.get_mut(method).and_then(Value::as_object_mut) else { continue };
            // The calls without a token (`security: [{}]`) are outside the route table.
            let Some(access) = access else { continue };
            op.insert("x-nevermiss-access".into(), json!(access_name(access)));
            let responses = op.entry("responses").or_insert_with(|| json!({})).as_object_mut().expect("responses is an object");
            let plain_http = "plain HTTP from another machine to a hub that is public without TLS";
            let refused = match access {
                Access::OwnerOnly => format!("A device's token (this call is the owner's), or {plain_http}"),
                Access::DevicesToo => format!("Refused: {plain_http}"),
                Access::DevicesWhenAllowed => format!("A device's token while the owner does not allow it, or {plain_http}"),
            };
            match responses.get_mut("403").and_then(|answer| answer.get_mut("description")) {
                Some(Value::String(own)) => *own = format!("{own}; or {plain_http}"),
                _ => {
                    responses.insert("403".into(), error_answer(&refused));
                }
            }
            responses.entry("401").or_insert_with(|| error_answer("No token, or a wrong one"));
            responses.entry("503").or_insert_with(|| error_answer("The store cannot be read or written now: try again"));
        }
    }
}

fn add_examples(doc: &mut Value) {
    let schemas = doc["components"]["schemas"].clone();
    let Some(paths) = doc["paths"].as_object_mut() else { return };
    for item in paths.values_mut() {
        for method in METHODS {
            let Some(op) = item.get_mut(method) else { continue };
            if let Some(content) = op.pointer_mut("/requestBody/content").and_then(Value::as_object_mut) {
                for media in content.values_mut() {
                    give_example(media, &schemas);
                }
            }
            if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                for answer in responses.values_mut() {
                    if let Some(content) = answer.get_mut("content").and_then(Value::as_object_mut) {
                        for media in content.values_mut() {
                            give_example(media, &schemas);
                        }
                    }
                }
            }
        }
    }
}

fn give_example(media: &mut Value, schemas: &Value) {
    if media.get("example").is_some() || media.get("examples").is_some() {
        return;
    }
    if let Some(schema) = media.get("schema").cloned() {
        media["example"] = example_of(&schema, schemas, "", 0);
    }
}

/// A value the schema accepts, as a reader would expect it: a schema's or a field's own example
/// first, else one made from the field's name and type.
pub fn example_of(schema: &Value, schemas: &Value, field: &str, depth: usize) -> Value {
    if depth > 12 {
        return Value::Null;
    }
    if let Some(example) = schema.get("example") {
        return example.clone();
    }
    if let Some(example) = schema.get("examples").and_then(|e| e.get(0)) {
        return example.clone();
    }
    if is_nullable(schema) && QUIET_WHEN_ALL_IS_WELL.contains(&field) {
        return Value::Null;
    }
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference.trim_start_matches("#/components/schemas/");
        return example_of(&schemas[name], schemas, field, depth + 1);
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in all {
            if let Value::Object(fields) = example_of(part, schemas, field, depth + 1) {
                merged.extend(fields);
            }
        }
        return Value::Object(merged);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(variants) = schema.get(key).and_then(Value::as_array) {
            let chosen = variants.iter().find(|v| v.get("type") != Some(&json!("null"))).or(variants.first());
            return chosen.map(|v| example_of(v, schemas, field, depth + 1)).unwrap_or(Value::Null);
        }
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.as_array()).and_then(|e| e.iter().find(|v| !v.is_null())) {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).find(|k| *k != "null").unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => return json!({}),
    };
    match kind {
        "object" => {
            let mut object = Map::new();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    object.insert(name.clone(), example_of(property, schemas, name, depth + 1));
                }
            } else if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
                let (key, value_field) = match field {
                    "headers" => ("content-type", "content-type"),
                    "errors" => ("label", "a field's error"),
                    "providers" | "by_provider" | "jobs_by_provider" => ("replicate", ""),
                    _ => ("name", ""),
                };
                object.insert(key.into(), example_of(values, schemas, value_field, depth + 1));
            }
            Value::Object(object)
        }
        "array" => match schema.get("items") {
            Some(items) => json!([example_of(items, schemas, field, depth + 1)]),
            None => json!([]),
        },
        "string" => json!(string_for(field, schema.get("format").and_then(Value::as_str))),
        "integer" => json!(integer_for(field)),
        "number" => json!(1.5),
        "boolean" => json!(true),
        _ => Value::Null,
    }
}

/// Fields an example leaves null when it may: they say what went wrong, and an example shows a
/// job that is going well.
const QUIET_WHEN_ALL_IS_WELL: &[&str] = &[
    "error",
    "poll_error",
    "poll_error_kind",
    "poll_problem",
    "abandoned_at",
    "abandoned_reason",
    "last_error",
    "last_error_at",
    "store_note",
];

fn is_nullable(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::Array(kinds)) => kinds.contains(&json!("null")),
        _ => ["oneOf", "anyOf"]
            .iter()
            .any(|key| schema.get(*key).and_then(Value::as_array).is_some_and(|v| v.iter().any(|v| v.get("type") == Some(&json!("null"))))),
    }
}

/// A plausible text for a field, by its name.
fn string_for(field: &str, format: Option<&str>) -> String {
    let at = "2026-12-07T21:04:05Z";
    if format == Some("date-time") || field == "at" || field.ends_with("_at") || field == "since" {
        return at.into();
    }
    let text = match field {
        "provider" => "replicate",
        "job_id" | "id" => "p-7f3k2m9q",
        "delivery_id" => "msg_2b9WJ4xQ",
        "label" => "render gamma 1234",
        "group" | "group_name" => "sweep-7",
        "name" => "phone",
        "version" => env!("CARGO_PKG_VERSION"),
        "error" => "what was refused, and why",
        "token" => "nm_dev_4Hq9...",
        "code" => "K7Q2-M9XP",
        "provider_url" => "https://replicate.com/p/p-7f3k2m9q",
        "url" | "public_url" | "status_url" => "https://example.trycloudflare.com/hooks/replicate",
        "receiver_url" => "http://127.0.0.1:8787",
        "masked" => "••••••••",
        "content-type" => "application/json",
        "a field's error" => "at most 200 characters",
        "kind" => "replicate/prediction/black-forest-labs/flux-schnell",
        "source" | "store" => "keychain",
        "from" => "22:00",
        "to" => "07:00",
        "text" => "A cat on a skateboard, in the style of a 1970s poster",
        "urls" | "image" => "https://replicate.delivery/xezq/output-0.webp",
        "host" => "smtp.example.com",
        "username" => "me@example.com",
        "account" => "my-account",
        "body" => r#"{"deliveryId":"d-1","jobId":"job-42","state":"succeeded","seq":3}"#,
        "base_url" | "api_url" | "forwards_to" => "https://api.replicate.com",
        "ui_url" => "http://127.0.0.1:8788/",
        "previous_url" => "https://old-name.trycloudflare.com",
        "data_dir" => "/home/me/.local/share/nevermiss",
        "discovery_note" | "notice" | "warning" | "conclusion" | "cause" => "what happened, in a sentence",
        "message" | "reason" | "note" | "answer" | "detail" => "what happened, in a sentence",
        _ => "text",
    };
    text.into()
}

fn integer_for(field: &str) -> i64 {
    match field {
        "seq" => 3,
        f if f.ends_with("_ms") => 1_812_000_245_000,
        f if f.ends_with("_secs") => 60,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
        let mut found = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in METHODS {
                if let Some(op) = item.get(method) {
                    found.push((method.to_owned(), path.clone(), op));
                }
            }
        }
        found
    }

    /// Every route the router has is in the document with who may call it, and nothing else is.
    #[test]
    fn the_document_has_every_route_of_the_route_table_and_no_other() {
        let doc = document();
        let documented: std::collections::BTreeSet<String> =
            operations(doc).iter().filter(|(_, _, op)| op.get("x-nevermiss-access").is_some()).map(|(_, p, _)| p.clone()).collect();
        let routed: std::collections::BTreeSet<String> = route_table().iter().map(|(p, _)| format!("/api{p}")).collect();
        assert_eq!(documented, routed);
        let ids: Vec<&str> = operations(doc).iter().map(|(_, _, op)| op["operationId"].as_str().unwrap()).collect();
        let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(ids.len(), unique.len(), "every operation has its own id: {ids:?}");
        for (path, access) in route_table() {
            for (_, _, op) in operations(doc).iter().filter(|(_, p, _)| *p == format!("/api{path}")) {
                assert_eq!(op["x-nevermiss-access"], json!(access_name(access)), "{path}");
            }
        }
        // The open calls say they take no token.
        for path in ["/api/ui-codes/redeem", "/api/whoami", "/api/openapi.json"] {
            assert!(!routed.contains(path), "{path} is not behind the token");
        }
    }

    /// Every body, asked or answered, has an example, and each example is one its schema accepts.
    #[test]
    fn every_body_has_an_example_its_schema_accepts() {
        let doc = document();
        let mut checked = 0;
        for (method, path, op) in operations(doc) {
            let mut bodies: Vec<(&str, &Value)> = Vec::new();
            if let Some(content) = op.pointer("/requestBody/content").and_then(Value::as_object) {
                bodies.extend(content.iter().map(|(media, body)| (media.as_str(), body)));
            }
            for answer in op["responses"].as_object().unwrap().values() {
                if let Some(content) = answer.get("content").and_then(Value::as_object) {
                    bodies.extend(content.iter().map(|(media, body)| (media.as_str(), body)));
                }
            }
            for (media, body) in bodies {
                let example = body.get("example").unwrap_or_else(|| panic!("{method} {path} {media}: no example"));
                let errors = schema_errors(doc, &body["schema"], example);
                assert!(errors.is_empty(), "{method} {path} {media}: the example {example} is refused by its schema: {errors:?}");
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked} bodies checked");
    }

    /// The check above can refuse: a job whose state is no state, or that lacks its id, is not a `Job`.
    #[test]
    fn a_body_its_schema_does_not_accept_is_refused() {
        let doc = document();
        let job = &doc["paths"]["/api/jobs/{provider}/{job_id}/untrack"]["post"]["responses"]["200"]["content"]["application/json"];
        assert!(schema_errors(doc, &job["schema"], &job["example"]).is_empty());
        let mut wrong = job["example"].clone();
        wrong["state"] = json!("done-ish");
        assert!(!schema_errors(doc, &job["schema"], &wrong).is_empty(), "an unknown state is refused");
        let mut wrong = job["example"].clone();
        wrong.as_object_mut().unwrap().remove("job_id");
        assert!(!schema_errors(doc, &job["schema"], &wrong).is_empty(), "a missing id is refused");
    }

    /// What the document's schema says of a value (none: it is accepted).
    pub fn schema_errors(doc: &Value, schema: &Value, value: &Value) -> Vec<String> {
        let mut root = schema.clone();
        root["components"] = doc["components"].clone();
        let validator = jsonschema::validator_for(&root).expect("the schema compiles");
        validator.iter_errors(value).map(|e| format!("{} at {}", e, e.instance_path())).collect()
    }
}
