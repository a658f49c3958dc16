//! The engine's integration tests, one binary (svix's `tests/it`): each suite a module, the
//! one typed harness (`harness/`) beside them. Everything runs for real: SQLite files in temp dirs, HTTP on
//! loopback, signed deliveries, `nevermiss serve` child processes, provider stand-ins speaking the
//! providers' documented formats.

mod harness;
// The book's generated sections (conformance:: and book:: check them).
#[path = "../../docs/generated.rs"]
mod generated;

mod admin_api;
mod attacker;
mod book;
mod cancel;
mod channel_senders;
mod channels;
mod chaos;
mod cli;
mod conformance;
mod crash;
mod delivery_story;
mod device_rights;
mod discovery;
mod durations;
mod fleet;
mod fleet_chaos;
mod fuzz_parsers;
mod groups;
mod hostile_input;
mod hostile_peers;
mod hub;
mod local_files;
mod merge;
mod merge_property;
mod never_4xx;
mod notify_on;
mod os_paths;
mod outbox;
mod polling_abandoned;
mod polling_isolation;
mod postgres_store;
mod provider_anthropic;
mod provider_fal;
mod provider_faults;
mod provider_openai;
mod provider_replicate;
mod receiver;
mod recipe_discovery;
mod recipe_jwt;
mod recipe_providers;
mod recipes;
mod reconcile_e2e;
mod refused;
mod rescues;
mod results;
mod sdk_payloads;
mod secret_formats;
mod security;
mod sessions;
mod single_engine;
mod sla;
mod storage_failure;
mod token_handover;
mod tunnel_bore;
mod tunnel_down_alert;
mod tunnel_programs;
mod tunnel_self_test;
mod ui_api;
mod untrack;
mod videos_trainings;
mod wait_cli;
