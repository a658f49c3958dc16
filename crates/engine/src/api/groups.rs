//! Groups of jobs: each group's progress (done of total, by state, the slowest still running),
//! and one group with its members (what `nevermiss wait --group` reads).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::Json;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, Query, Routes};
use crate::store::groups::{self, GroupSummary};
use crate::store::job::Job;

/// The most groups one list answers.
pub const MAX_GROUPS: i64 = 200;

pub fn router() -> Routes {
    Routes::new().devices_too("/groups", get(list)).devices_too("/groups/{name}", get(detail))
}

/// `GET /api/groups`: the groups, the most recently started first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct GroupList {
    pub groups: Vec<GroupSummary>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ListQuery {
    limit: Option<i64>,
}

#[utoipa::path(
    get, path = "/api/groups", operation_id = "list_groups", tag = "groups",
    summary = "The groups (sweeps, batches), newest first",
    params(("limit" = Option<i64>, Query, description = "At most this many (1 to 200)")),
    responses((status = 200, description = "The groups with their tallies", body = GroupList))
)]
async fn list(State(ctx): State<Arc<ApiContext>>, Query(query): Query<ListQuery>) -> Result<Json<GroupList>, ApiError> {
    let limit = query.limit.unwrap_or(MAX_GROUPS).clamp(1, MAX_GROUPS);
    Ok(Json(GroupList { groups: ctx.services.store.read(move |conn| groups::list(conn, limit)).await? }))
}

/// `GET /api/groups/{name}`: one group's progress and its jobs, the first tracked first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct GroupDetail {
    #[serde(flatten)]
    pub group: GroupSummary,
    pub jobs: Vec<Job>,
}

#[utoipa::path(
    get, path = "/api/groups/{name}", operation_id = "get_group", tag = "groups",
    summary = "One group and its jobs",
    params(("name" = String, Path, description = "The group's name")),
    responses((status = 200, description = "The group", body = GroupDetail), (status = 404, description = "No such group", body = super::ErrorBody))
)]
async fn detail(State(ctx): State<Arc<ApiContext>>, Path(name): Path<String>) -> Result<Json<GroupDetail>, ApiError> {
    let (summary, mut jobs, windows) = ctx
        .services
        .store
        .read(move |conn| {
            let jobs = groups::members(conn, &name)?;
            let windows = crate::expected::windows_of(conn, &jobs)?;
            Ok((groups::summary(conn, &name)?, jobs, windows))
        })
        .await?;
    ctx.services.changes.expected().show(&windows, &mut jobs);
    let group = summary.ok_or_else(|| ApiError::NotFound("no job is in this group".into()))?;
    Ok(Json(GroupDetail { group, jobs }))
}
