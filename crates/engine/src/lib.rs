//! NeverMiss: never miss the end of a long job on someone else's cloud.
//!
//! Two paths into one truth: the receiver (push: signed webhooks) and reconciliation (pull:
//! polling), both feeding the one guarded write in `merge_point`, which enqueues exactly one side
//! effect per finished job in `outbox`. This crate knows nothing of Tauri or of the command
//! line: the app crate (`src-tauri/` at the repository root) hosts it in the desktop shell or in
//! `nevermiss serve`, through this public API only.

pub mod after_merge;
pub mod api;
pub mod changes;
pub mod channels;
pub mod data_dir;
pub mod device_messages;
use nevermiss_store::closed_set;
pub mod duration_text;
pub mod engine;
pub mod expected;
pub mod extra_ca;
pub mod http_server;
pub mod hub_client;
pub mod kept_request;
pub mod merge_point;
pub mod metrics;
pub mod notification;
pub mod outbox;
pub mod owner_account;
// Windows: owner-only ACLs for the data dir and its files (the Unix modes' 0700 and 0600).
#[cfg(windows)]
mod owner_only;
pub mod plain_text;
pub mod provider_health;
pub use nevermiss_providers as providers;
pub mod receiver;
pub mod recipe_files;
pub mod reconcile;
pub mod refusal;
pub mod retention;
pub mod search_index;
pub mod secrets;
pub mod services;
pub mod settings;
pub mod simulator;
pub use nevermiss_store as store;
pub mod tunnel;
