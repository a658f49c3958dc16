//! NeverMiss: never miss the end of a long job on someone else's cloud.
//!
//! Two paths into one truth: the receiver (push: signed webhooks) and reconciliation (pull:
//! polling), both feeding the one guarded write in `merge_point`, which enqueues exactly one side
//! effect per finished job in `outbox`. The engine knows nothing of Tauri; `desktop` is a thin
//! shell around it, behind the default `desktop` feature.

pub mod api;
pub mod changes;
pub mod cli;
#[cfg(feature = "desktop")]
pub mod desktop;
pub mod engine;
pub mod job;
pub mod merge_point;
pub mod outbox;
pub mod providers;
pub mod receiver;
pub mod reconcile;
pub mod secrets;
pub mod settings;
pub mod simulator;
pub mod store;
pub mod tunnel;
