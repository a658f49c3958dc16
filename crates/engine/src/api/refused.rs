//! `GET /api/refused`: the last requests the receiver refused (bad signature, too old, unknown
//! provider, unverifiable), newest first, credentials masked, each with its likely cause in words.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::get;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use super::{ApiContext, ApiError, Caller, Routes};
use crate::store::refused::{self, Refusal};

pub fn router() -> Routes {
    Routes::new().devices_too("/refused", get(list))
}

/// `GET /api/refused`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TS, utoipa::ToSchema)]
#[ts(export)]
pub struct RefusedList {
    /// Newest first.
    pub refused: Vec<Refusal>,
    /// How many are kept at most (older ones are dropped as new ones come).
    pub kept: i64,
}

#[utoipa::path(
    get, path = "/api/refused", operation_id = "list_refused", tag = "status",
    summary = "The last refused requests, masked, each with its likely cause",
    responses((status = 200, description = "Newest first", body = RefusedList))
)]
async fn list(State(ctx): State<Arc<ApiContext>>, Extension(caller): Extension<Caller>) -> Result<Json<RefusedList>, ApiError> {
    let mut refused = ctx.services.store.read(|conn| refused::newest(conn, refused::KEPT)).await?;
    if !super::may_read_bodies(&ctx, &caller) {
        for refusal in &mut refused {
            refusal.body = super::BODY_HIDDEN.to_owned();
        }
    }
    Ok(Json(RefusedList { refused, kept: refused::KEPT }))
}
