//! The web UI's static files (the Vite build in `ui/dist`), served at `/` without a token: the
//! page reads the token from the URL fragment, which never reaches the server. Release builds
//! embed the files at compile time; debug builds read the same folder from disk, so a rebuilt UI
//! shows without recompiling. When the UI was never built (a plain `cargo build` before
//! `npm run build`), `/` answers a small page that says how to build it.

use std::sync::Arc;

use axum::extract::Path;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rust_embed::RustEmbed;

use super::ApiContext;

#[derive(RustEmbed)]
#[folder = "../../ui/dist/"]
#[allow_missing = true]
struct Dist;

/// Scripts and styles from this origin only: no inline script, no inline style sheet, no eval.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
img-src 'self' data: https:; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const NOT_BUILT: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>NeverMiss</title></head>
<body>
<h1>NeverMiss is running, but its web UI was not built</h1>
<p>Build it with <code>make</code> (or <code>cd ui &amp;&amp; npm ci &amp;&amp; npm run build</code>), then start NeverMiss again.</p>
<p>The engine works meanwhile: try <code>nevermiss jobs</code>.</p>
</body></html>
"#;

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new().route("/", get(index)).route("/{*path}", get(asset))
}

async fn index() -> Response {
    match Dist::get("index.html") {
        Some(file) => page(file.data.into_owned()),
        None => page(NOT_BUILT.as_bytes().to_vec()),
    }
}

fn page(body: Vec<u8>) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(headers);
    response
}

fn secure(headers: &mut axum::http::HeaderMap) {
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
}

async fn asset(Path(path): Path<String>) -> Response {
    if path == "index.html" {
        return index().await;
    }
    let Some(file) = Dist::get(&path) else {
        return (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "not found\n").into_response();
    };
    let mime = file.metadata.mimetype().to_owned();
    let mut response = (StatusCode::OK, file.data.into_owned()).into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&mime) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    // Vite names built assets by their content hash: they never change under one name.
    let cache = if path.starts_with("assets/") { "public, max-age=31536000, immutable" } else { "no-cache" };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    secure(headers);
    response
}

/// The UI's address on `addr` with the token in the fragment (never sent to the server) and, to
/// open it on one job, that job's route (`ui/src/route.ts`).
pub fn ui_url(addr: std::net::SocketAddr, token: &str, job: Option<(&str, &str)>) -> String {
    let mut url = format!("http://{addr}/#token={token}");
    if let Some((provider, job_id)) = job {
        url.push_str(&format!(
            "&view=/jobs/{}/{}",
            crate::providers::generic::urlencode_segment(provider),
            crate::providers::generic::urlencode_segment(job_id)
        ));
    }
    url
}
