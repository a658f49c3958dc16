//! The adapters' mapping tables (`providers::vocabulary`) against the providers' official SDKs:
//! every value of every status, stop-reason and event-type field an adapter reads, as the SDKs'
//! `Literal` types enumerate them (`tests/conformance/sdk_values.json`, written by
//! `tests/conformance/judge.py values --write` and checked against the installed SDKs by `make
//! test`), has an explicit entry in its table. A value with none fails here, naming it: after
//! `make sdk-upgrade`, this is where what is new shows. And the book's provider pages show the tables
//! as they are, and a page for each shipped recipe (`docs/generated.rs`; `make book-pages`, or
//! `cargo run -p nevermiss-engine --example provider_table -- --write`, rewrites them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use nevermiss_engine::providers::vocabulary::{self, Table};
use serde::Deserialize;

use crate::generated;

#[derive(Deserialize)]
struct SdkValues {
    sdk_versions: BTreeMap<String, String>,
    fields: BTreeMap<String, Vec<String>>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sdk_values() -> SdkValues {
    let path = root().join("tests/conformance/sdk_values.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// What is wrong between the tables and the SDKs' values: an SDK value a table has no entry for,
/// a field no table reads, a table whose field the SDKs do not have.
fn missing(tables: &[&Table], sdk: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, values) in sdk {
        let Some(table) = tables.iter().find(|t| t.key == key) else {
            problems.push(format!("{key}: no adapter table reads this field (add one in providers/, and list it in vocabulary::tables)"));
            continue;
        };
        for value in values {
            if table.get(value).is_none() {
                problems.push(format!("{key}: the SDK's value {value:?} has no entry in {}'s table (map it explicitly)", table.provider));
            }
        }
    }
    for table in tables {
        if !sdk.contains_key(table.key) {
            problems.push(format!("{}: the SDKs have no such field (tests/conformance/judge.py FIELDS names where each is)", table.key));
        }
    }
    problems
}

#[test]
fn every_sdk_value_has_a_mapping() {
    let sdk = sdk_values();
    let tables = vocabulary::tables();
    let problems = missing(&tables, &sdk.fields);
    assert!(problems.is_empty(), "against the SDKs {:?}:\n  - {}", sdk.sdk_versions, problems.join("\n  - "));
    // Entries the SDKs do not list (values the API sends before the SDK's types have them).
    for table in &tables {
        let known: BTreeSet<&str> = sdk.fields[table.key].iter().map(String::as_str).collect();
        for (value, _) in table.entries.iter().filter(|(v, _)| !known.contains(v)) {
            eprintln!("conformance: {}: {value:?} is mapped but not in the SDK's type", table.key);
        }
    }
}

#[test]
fn a_missing_mapping_is_named() {
    // The check itself can fail: a table without `budget_reached`, and an SDK field no table reads.
    static SHORT: Table = Table {
        provider: "anthropic",
        key: "anthropic.session_event.stop_reason",
        sdk: "test",
        entries: &[("end_turn", vocabulary::Meaning::State(nevermiss_engine::store::job::JobState::Succeeded, None))],
        when_unknown: vocabulary::WhenUnknown::Fails,
    };
    let sdk: BTreeMap<String, Vec<String>> = [
        ("anthropic.session_event.stop_reason".to_owned(), vec!["end_turn".to_owned(), "budget_reached".to_owned()]),
        ("openai.thing.status".to_owned(), vec!["done".to_owned()]),
    ]
    .into();
    let problems = missing(&[&SHORT], &sdk);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("\"budget_reached\" has no entry"), "{problems:?}");
    assert!(problems[1].starts_with("openai.thing.status: no adapter table"), "{problems:?}");
}

/// The book's provider pages: between each one's markers, exactly what the tables give; a page for
/// each shipped recipe, as its recipe gives it, and SUMMARY.md listing them
/// (`NEVERMISS_WRITE_BOOK=1` writes them instead of failing: `make book-pages`).
#[test]
fn the_books_provider_pages_are_the_tables() {
    let expected = generated::expected_files(&root());
    if generated::writing() {
        generated::write(&expected);
    }
    let stale = generated::stale(&expected);
    assert!(
        stale.is_empty(),
        "the book's generated pages differ from the adapters' tables and the shipped recipes: {stale:?}; rewrite them with\n  make book-pages"
    );
}
