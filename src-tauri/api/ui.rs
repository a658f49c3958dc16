//! The web UI's static files, served at `/` without a token (the page reads the token from the
//! URL fragment, which never reaches the server).

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::ApiContext;

const INDEX_HTML: &str = include_str!("../../ui/index.html");

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new().route("/", get(index))
}

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        INDEX_HTML,
    )
}
