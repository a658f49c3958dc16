//! The engine's integration tests, one binary (svix's `tests/it`): each suite a module, the
//! one typed harness (`harness/`) beside them. Everything runs for real: SQLite files in temp dirs, HTTP on
//! loopback, signed deliveries, `nevermiss serve` child processes, provider stand-ins speaking the
//! providers' documented formats.

mod harness;

mod admin_api;
mod chaos;
mod cli;
mod crash;
mod fuzz_parsers;
mod hostile_input;
mod merge;
mod merge_property;
mod notify_on;
mod provider_anthropic;
mod provider_fal;
mod provider_faults;
mod provider_openai;
mod provider_replicate;
mod receiver;
mod reconcile_e2e;
mod security;
mod storage_failure;
mod tunnel_bore;
mod tunnel_down_alert;
mod tunnel_programs;
mod tunnel_self_test;
mod ui_api;
