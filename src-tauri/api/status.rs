//! Health, instance information, metrics, and reconcile on demand.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{ApiContext, ApiError};
use crate::reconcile::PassReport;
use crate::store::queries::{self, Metrics};

pub fn router() -> Router<Arc<ApiContext>> {
    Router::new()
        .route("/health", get(health))
        .route("/info", get(info))
        .route("/metrics", get(metrics))
        .route("/reconcile", post(reconcile))
        .route("/reconcile/passes", get(passes))
}

async fn health() -> Json<Value> {
    Json(json!({ "ok": true, "version": env!("CARGO_PKG_VERSION") }))
}

async fn info(State(ctx): State<Arc<ApiContext>>) -> Json<Value> {
    let s = &ctx.services;
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "receiver_url": s.instance.receiver_url,
        "public_url": s.tunnel.public_url().or_else(|| s.instance.public_url.clone()),
        "api_url": s.instance.api_url,
        "data_dir": s.instance.data_dir,
        "simulation": s.instance.simulation,
        "providers": s.providers.names().collect::<Vec<_>>(),
        "poll_interval_secs": s.reconciler.interval().as_secs(),
    }))
}

async fn metrics(State(ctx): State<Arc<ApiContext>>) -> Result<Json<Metrics>, ApiError> {
    Ok(Json(ctx.services.metrics().await?))
}

/// The last 50 reconcile passes, newest first.
async fn passes(State(ctx): State<Arc<ApiContext>>) -> Result<Json<Value>, ApiError> {
    let passes = ctx.services.store.read(|conn| queries::last_passes(conn, 50)).await?;
    Ok(Json(json!({ "passes": passes })))
}

async fn reconcile(State(ctx): State<Arc<ApiContext>>) -> Result<Json<PassReport>, ApiError> {
    Ok(Json(ctx.services.reconciler.run_pass().await?))
}
