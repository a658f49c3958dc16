//! The one typed harness of the engine's integration tests (svix's `tests/it/utils`, zero2prod's
//! `tests/api/helpers.rs`):
//! - `api`: `ApiClient`, the admin API read into the API's own types;
//! - `app`: `TestApp`, a real engine in-process, its receiver, its notifier, its SQLite file;
//! - `signing`: every provider's webhook signature, written independently of the engine;
//! - `stand_in`: a programmable stand-in for a provider's API;
//! - `faults`: the provider-wide and per-job faults every provider suite plays against it;
//! - `serve_child`: a real `nevermiss serve` child process, with the same `ApiClient`;
//! - `postgres`: a throwaway PostgreSQL cluster (`initdb`, `pg_ctl`) on a free loopback port;
//! - `fleet`: `serve --database` processes on one such cluster, and `nginx` in front of them;
//! - `balancer`: a round-robin HTTP load balancer in front of a fleet's receivers;
//! - `chaos`, `tunnel`, `tunnel_programs`: the chaos scenario (one server or a fleet) and the
//!   tunnel suites' helpers;
//! - `channel_servers`: the HTTP recorder and the SMTP server the channel senders are tested against;
//! - `conformance`: the fixtures the SDKs judge, and the log of every body served and sent;
//! - `waiting`: the bounded waits.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod api_document;
pub mod app;
pub mod balancer;
pub mod channel_servers;
pub mod chaos;
pub mod conformance;
pub mod faults;
pub mod fleet;
pub mod nginx;
pub mod postgres;
pub mod serve_child;
pub mod signing;
pub mod stand_in;
pub mod tunnel;
pub mod tunnel_programs;
pub mod waiting;

pub use api::{pause_of, read_sse_until, ApiClient};
pub use app::{payload, sign, terminal_identity, Backend, RecordingNotifier, TestApp, SECRET};
pub use waiting::{wait_for, wait_until, WAIT};

/// One suite, two stores: `on_both_stores!(spawn_on, async fn name(app) { ... })` is the test
/// `name::sqlite` and the test `name::postgres`, each given a fresh `TestApp` made by
/// `TestApp::spawn_on` (or `spawn_unconfigured_on`) on that store.
macro_rules! on_both_stores {
    ($spawn:ident, $(#[doc = $doc:literal])* async fn $name:ident($app:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn run($app: $crate::harness::TestApp) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                run($crate::harness::TestApp::$spawn($crate::harness::Backend::Sqlite).await).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                run($crate::harness::TestApp::$spawn($crate::harness::Backend::Postgres).await).await
            }
        }
    };
}
pub(crate) use on_both_stores;
