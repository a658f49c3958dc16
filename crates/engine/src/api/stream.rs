//! `GET /api/events`: Server-Sent Events, one per job change and per metrics snapshot. A client
//! that falls behind gets a `resync` event and should reload what it shows.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::Extension;
use futures_util::Stream;
use tokio_stream::wrappers::{errors::BroadcastStreamRecvError, BroadcastStream};
use tokio_stream::StreamExt;

use super::{ApiContext, ApiError, Caller, Routes};
use crate::changes::Change;

pub fn router() -> Routes {
    Routes::new().devices_too("/events", get(events))
}

#[utoipa::path(
    get, path = "/api/events", operation_id = "events", tag = "status",
    summary = "Live changes, as Server-Sent Events",
    description = "`hello` first; then each event's name says what changed (`job`, `untracked`, `metrics`) and its data is JSON of `Change`; `resync` (`{\"missed\": N}`) when the stream fell behind and the client should read again.",
    responses((status = 200, description = "An event stream", content_type = "text/event-stream", body = String), (status = 429, description = "Too many streams open", body = super::ErrorBody))
)]
async fn events(
    State(ctx): State<Arc<ApiContext>>,
    Extension(caller): Extension<Caller>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // Held by the stream, so given back when it ends.
    let slot = ctx.streams.take(&caller)?;
    let changes = BroadcastStream::new(ctx.services.changes.subscribe());
    let hello = tokio_stream::once(Ok(Event::default().event("hello").data("{}")));
    let stream = hello.chain(changes.map(|item| {
        Ok(match item {
            Ok(change) => {
                let name = match &change {
                    Change::Job { .. } => "job",
                    Change::Untracked { .. } => "untracked",
                    Change::Metrics { .. } => "metrics",
                };
                Event::default().event(name).data(serde_json::to_string(&change).expect("a change serializes"))
            }
            Err(BroadcastStreamRecvError::Lagged(missed)) => Event::default().event("resync").data(format!("{{\"missed\":{missed}}}")),
        })
    }));
    // End with the engine, so a connected UI does not hold up its shutdown.
    let stream = futures_util::StreamExt::take_until(stream, ctx.shutdown.clone().cancelled_owned()).map(move |event| {
        let _held = &slot;
        event
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}
