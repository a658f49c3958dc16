//! `cargo +nightly fuzz run standard_webhooks`: see fuzz/checks.rs for what is checked.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::standard_webhooks(data));
