//! The one typed harness of the engine's integration tests (svix's `tests/it/utils`, zero2prod's
//! `tests/api/helpers.rs`):
//! - `api`: `ApiClient`, the admin API read into the API's own types;
//! - `app`: `TestApp`, a real engine in-process, its receiver, its notifier, its SQLite file;
//! - `signing`: every provider's webhook signature, written independently of the engine;
//! - `stand_in`: a programmable stand-in for a provider's API;
//! - `faults`: the provider-wide and per-job faults every provider suite plays against it;
//! - `serve_child`: a real `nevermiss serve` child process, with the same `ApiClient`;
//! - `postgres`: a throwaway PostgreSQL cluster (`initdb`, `pg_ctl`) on a free loopback port;
//! - `balancer`: a round-robin HTTP load balancer in front of a fleet's receivers;
//! - `chaos`, `tunnel`, `tunnel_programs`: the chaos scenario (one server or a fleet) and the
//!   tunnel suites' helpers;
//! - `waiting`: the bounded waits.
#![allow(dead_code, unused_imports)]

pub mod api;
pub mod balancer;
pub mod app;
pub mod chaos;
pub mod faults;
pub mod postgres;
pub mod serve_child;
pub mod signing;
pub mod stand_in;
pub mod tunnel;
pub mod tunnel_programs;
pub mod waiting;

pub use api::{pause_of, ApiClient};
pub use app::{payload, sign, terminal_identity, RecordingNotifier, TestApp, SECRET};
pub use waiting::{wait_for, wait_until, WAIT};
