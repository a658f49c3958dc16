//! Health, instance information, metrics, and reconcile on demand.

use std::sync::Arc;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::routing::{get, post};
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, Query, Routes};
use crate::metrics::Metrics;
use crate::reconcile::PassReport;
use crate::store::counters;
use crate::store::passes::{self, PassSummary};

pub fn router() -> Routes {
    Routes::new()
        .devices_too("/health", get(health))
        .devices_too("/info", get(info))
        .devices_too("/metrics", get(metrics))
        .devices_too("/metrics/history", get(history))
        .owner("/reconcile", post(reconcile))
        .devices_too("/reconcile/passes", get(passes))
}

/// `GET /api/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Health {
    pub ok: bool,
    pub version: String,
}

#[utoipa::path(
    get, path = "/api/health", operation_id = "health", tag = "status",
    summary = "Whether the engine answers, and its version",
    responses((status = 200, description = "The engine is up", body = Health))
)]
async fn health() -> Json<Health> {
    Json(Health { ok: true, version: env!("CARGO_PKG_VERSION").to_owned() })
}

/// `GET /api/info`: how this instance is reached and what it watches.
#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Info {
    pub version: String,
    pub receiver_url: String,
    /// The tunnel's public URL, when one runs.
    pub public_url: Option<String>,
    pub api_url: String,
    pub data_dir: String,
    /// Jobs come from the built-in simulated provider (`nevermiss demo`).
    pub simulation: bool,
    pub providers: Vec<String>,
    pub poll_interval_secs: u64,
    /// The store: SQLite in the data dir, or PostgreSQL shared by a fleet (`serve --database`).
    pub database: crate::store::sql::Dialect,
    /// This engine's name among a fleet's (`<data-dir>/node-id`).
    pub node: String,
}

#[utoipa::path(
    get, path = "/api/info", operation_id = "info", tag = "status",
    summary = "How this instance is reached and what it watches",
    description = "The receiver's local and public URLs, the data dir, the store, the providers it knows, whether it is a hub or a hub's device.",
    responses((status = 200, description = "This instance", body = Info))
)]
async fn info(State(ctx): State<Arc<ApiContext>>) -> Json<Info> {
    let s = &ctx.services;
    Json(Info {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        receiver_url: s.instance.receiver_url.clone(),
        public_url: s.tunnel.public_url().or_else(|| s.instance.public_url.clone()),
        api_url: s.instance.api_url.clone(),
        data_dir: s.instance.data_dir.display().to_string(),
        simulation: s.instance.simulation,
        providers: s.providers.names().into_iter().map(str::to_owned).collect(),
        poll_interval_secs: s.reconciler.interval().as_secs(),
        database: s.store.dialect(),
        node: s.store.node().to_owned(),
    })
}

#[utoipa::path(
    get, path = "/api/metrics", operation_id = "metrics", tag = "status",
    summary = "Every figure of the Metrics screen",
    description = "Counts by state, by provider and by path (webhook, reconcile), reconcile rescues, stuck jobs, refused deliveries, each provider's polling health, the tunnel and the channels. Read from tallies kept at write: its cost does not grow with the number of jobs.",
    responses((status = 200, description = "The figures", body = Metrics))
)]
async fn metrics(State(ctx): State<Arc<ApiContext>>) -> Result<Json<Metrics>, ApiError> {
    Ok(Json(ctx.services.metrics().await?))
}

/// The last 50 reconcile passes, newest first.
#[utoipa::path(
    get, path = "/api/reconcile/passes", operation_id = "reconcile_passes", tag = "status",
    summary = "The last 50 reconcile passes, newest first",
    responses((status = 200, description = "The passes", body = Passes))
)]
async fn passes(State(ctx): State<Arc<ApiContext>>) -> Result<Json<Passes>, ApiError> {
    let passes = ctx.services.store.read(|conn| passes::last(conn, 50)).await?;
    Ok(Json(Passes { passes }))
}

/// `GET /api/reconcile/passes`: the last reconcile passes, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct Passes {
    pub passes: Vec<PassSummary>,
}

#[utoipa::path(
    post, path = "/api/reconcile", operation_id = "reconcile", tag = "status",
    summary = "Run a reconcile pass now",
    description = "Polls every provider for its jobs not yet finished (and discovers new ones where on), as the scheduler does at its interval; answers when the pass is done.",
    responses((status = 200, description = "What the pass did", body = PassReport))
)]
async fn reconcile(State(ctx): State<Arc<ApiContext>>) -> Result<Json<PassReport>, ApiError> {
    Ok(Json(ctx.services.reconciler.run_pass().await?))
}

/// The most hours `GET /api/metrics/history` covers (90 days).
pub const MAX_HISTORY_HOURS: i64 = 90 * 24;

#[derive(Deserialize)]
struct HistoryQuery {
    hours: Option<i64>,
}

/// `GET /api/metrics/history?hours=N`: each counter per UTC hour over the last N hours (default
/// 48, at most 90 days), dense (a quiet hour is a 0), oldest first, ready for a chart.
#[derive(Debug, Clone, Serialize, Deserialize, ts_rs::TS, utoipa::ToSchema)]
#[ts(export)]
pub struct MetricsHistory {
    /// The start of each hour, in Unix seconds.
    pub hours: Vec<i64>,
    /// Counter name to its value in each hour of `hours`.
    pub series: BTreeMap<String, Vec<i64>>,
}

#[utoipa::path(
    get, path = "/api/metrics/history", operation_id = "metrics_history", tag = "status",
    summary = "Each counter per UTC hour",
    description = "Dense (a quiet hour is a 0), oldest first, ready for a chart.",
    params(("hours" = Option<i64>, Query, description = "How many hours back: 1 to 2160 (90 days), 48 when absent")),
    responses((status = 200, description = "The counters per hour", body = MetricsHistory), (status = 400, description = "`hours` out of range", body = super::ErrorBody))
)]
async fn history(State(ctx): State<Arc<ApiContext>>, Query(query): Query<HistoryQuery>) -> Result<Json<MetricsHistory>, ApiError> {
    let hours = query.hours.unwrap_or(48);
    if !(1..=MAX_HISTORY_HOURS).contains(&hours) {
        return Err(ApiError::BadRequest(format!("hours must be 1 to {MAX_HISTORY_HOURS}")));
    }
    let now_hour = crate::store::job::now_ms() / 3_600_000;
    let first = now_hour - hours + 1;
    let rows = ctx.services.store.read(move |conn| counters::hours(conn, first)).await?;
    Ok(Json(dense_history(first, now_hour, rows)))
}

/// Spreads sparse (hour, counter, value) rows over every hour from `first` to `last`.
fn dense_history(first: i64, last: i64, rows: Vec<(i64, String, i64)>) -> MetricsHistory {
    let len = (last - first + 1).max(0) as usize;
    let mut series: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (hour, name, value) in rows {
        if hour < first || hour > last {
            continue;
        }
        series.entry(name).or_insert_with(|| vec![0; len])[(hour - first) as usize] += value;
    }
    MetricsHistory { hours: (first..=last).map(|h| h * 3600).collect(), series }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_dense_and_ordered() {
        let rows = vec![
            (10, "duplicates".to_owned(), 2),
            (12, "duplicates".to_owned(), 1),
            (12, "applied".to_owned(), 5),
            (99, "applied".to_owned(), 1),
        ];
        let h = dense_history(10, 13, rows);
        assert_eq!(h.hours, vec![36_000, 39_600, 43_200, 46_800]);
        assert_eq!(h.series["duplicates"], vec![2, 0, 1, 0]);
        assert_eq!(h.series["applied"], vec![0, 0, 5, 0]);
    }
}
