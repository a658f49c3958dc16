//! What NeverMiss makes of each value it reads from a provider: one table per field (a status, a
//! stop reason, a webhook's event type), written in the adapter that reads the field, used at run
//! time and listed here (`tables`) for the conformance test (every value the provider's official
//! SDK declares has an entry, `tests/conformance/sdk_values.json`) and for the README's provider
//! table (generated from these same tables, `examples/provider_table.rs`).
//!
//! A value not in its table is never a success: by the table's `when_unknown`, the job fails with
//! the raw value shown, or stays running (a status field, where a new value most likely means "not
//! over yet"), and the value is counted per (provider, field, value) in the metrics
//! (`unknown_values`).

use crate::job::JobState;

/// What one value of a field means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// The job is in this state; the text is the reason shown when it did not succeed.
    State(JobState, Option<&'static str>),
    /// A thin webhook NeverMiss acts on: the job moves to this (never terminal) state at once, and
    /// the object is read right away to learn the rest.
    ReadAtOnce(JobState),
    /// The object is gone (a deleted session): it ends `canceled`, and so does its open run.
    Deleted,
    /// A value that says nothing of a job's state (answered `200 ignored`, or skipped in a list).
    NotAStatus,
    /// The run it closes ends as another field says (a session's idle event: its stop reason).
    EndsBy(&'static str),
}

/// What a value missing from its table means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenUnknown {
    /// The job ends `failed`, with the value shown (a stop reason: the run is over, and nothing
    /// says it went well).
    Fails,
    /// The job stays `running`, with the value shown (a status: a new one most likely means "not
    /// over yet"; a job that never ends raises the stuck alert).
    KeepsRunning,
    /// Ignored (a webhook type: `200 ignored`, counted as `ignored` and in `unknown_values`).
    Ignored,
    /// Skipped (an entry of a list that is not a status change, such as a message).
    Skipped,
}

/// One field's values and what each means.
#[derive(Debug)]
pub struct Table {
    pub provider: &'static str,
    /// The field's key, as `tests/conformance/sdk_values.json` names it:
    /// `<provider>.<object>.<field>`.
    pub key: &'static str,
    /// Where the official SDK declares the field's values.
    pub sdk: &'static str,
    pub entries: &'static [(&'static str, Meaning)],
    pub when_unknown: WhenUnknown,
}

/// A value NeverMiss met that its table does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownValue {
    pub provider: &'static str,
    /// The table's key without its provider (`session_event.stop_reason`).
    pub field: &'static str,
    pub value: String,
    /// The job whose state it decided.
    pub job_id: String,
}

/// Longest unknown value kept for counting (a signed provider's value, but each distinct one is a
/// counter row of its own).
pub const MAX_COUNTED_VALUE: usize = 100;

/// The value as counted: at most `MAX_COUNTED_VALUE` characters.
pub fn counted_value(value: &str) -> String {
    value.chars().take(MAX_COUNTED_VALUE).collect()
}

/// What reading one value gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Known(Meaning),
    /// Not in the table: the state `when_unknown` gives (none for `Ignored`), the reason to show,
    /// and the value to count.
    Unknown {
        state: Option<JobState>,
        reason: String,
        value: UnknownValue,
    },
}

impl Table {
    pub fn get(&self, value: &str) -> Option<Meaning> {
        self.entries.iter().find(|(v, _)| *v == value).map(|(_, m)| *m)
    }

    /// The field's name without its provider.
    pub fn field(&self) -> &'static str {
        self.key.split_once('.').map_or(self.key, |(_, field)| field)
    }

    /// `value` as read for `job_id`.
    pub fn read(&self, value: &str, job_id: &str) -> Read {
        if let Some(meaning) = self.get(value) {
            return Read::Known(meaning);
        }
        let field = self.field();
        let state = match self.when_unknown {
            WhenUnknown::Fails => Some(JobState::Failed),
            WhenUnknown::KeepsRunning => Some(JobState::Running),
            WhenUnknown::Ignored | WhenUnknown::Skipped => None,
        };
        Read::Unknown {
            state,
            reason: format!("{} {field} {value:?} is one NeverMiss does not know", self.provider),
            value: UnknownValue { provider: self.provider, field, value: counted_value(value), job_id: job_id.to_owned() },
        }
    }

    /// A status's state: the table's for a known value (`State` entries), else `when_unknown`'s,
    /// with the reason to show and the value to count.
    pub fn state(&self, value: &str, job_id: &str) -> Status {
        match self.read(value, job_id) {
            Read::Known(Meaning::State(state, reason)) => Status { state, reason: reason.map(str::to_owned), unknown: None },
            Read::Known(Meaning::ReadAtOnce(state)) => Status { state, reason: None, unknown: None },
            Read::Known(Meaning::Deleted) => Status { state: JobState::Canceled, reason: Some("deleted".into()), unknown: None },
            Read::Known(Meaning::NotAStatus | Meaning::EndsBy(_)) => Status { state: JobState::Running, reason: None, unknown: None },
            Read::Unknown { state, reason, value } => {
                Status { state: state.unwrap_or(JobState::Running), reason: Some(reason), unknown: Some(value) }
            }
        }
    }
}

/// A status field's value, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub state: JobState,
    pub reason: Option<String>,
    pub unknown: Option<UnknownValue>,
}

/// What a meaning is, in the README's words.
pub fn describe(meaning: Meaning) -> String {
    match meaning {
        Meaning::State(state, None) => format!("`{}`", state.as_str()),
        Meaning::State(state, Some(reason)) => format!("`{}` ({reason})", state.as_str()),
        Meaning::ReadAtOnce(state) => format!("read at once (`{}` until then)", state.as_str()),
        Meaning::Deleted => "`canceled`, and its open run".into(),
        Meaning::NotAStatus => "ignored".into(),
        Meaning::EndsBy(field) => format!("ends the run, as its `{field}` says"),
    }
}

/// What an unknown value becomes, in the README's words.
pub fn describe_unknown(when: WhenUnknown) -> &'static str {
    match when {
        WhenUnknown::Fails => "`failed`, the value shown, counted",
        WhenUnknown::KeepsRunning => "stays `running`, the value shown, counted",
        WhenUnknown::Ignored => "ignored, counted (a webhook: `200 ignored`)",
        WhenUnknown::Skipped => "skipped (not a status change)",
    }
}

/// Every table of every adapter.
pub fn tables() -> Vec<&'static Table> {
    use super::{anthropic, fal, openai, replicate};
    vec![
        &anthropic::BATCH_STATUSES,
        &anthropic::SESSION_STATUSES,
        &anthropic::SESSION_EVENT_TYPES,
        &anthropic::SESSION_STOP_REASONS,
        &anthropic::WEBHOOK_TYPES,
        &openai::WEBHOOK_TYPES,
        &openai::RESPONSE_STATUSES,
        &openai::BATCH_STATUSES,
        &openai::FINE_TUNING_STATUSES,
        &openai::VIDEO_STATUSES,
        &openai::agent_sessions::SESSION_STATUSES,
        &openai::agent_sessions::TURN_STATUSES,
        &replicate::PREDICTION_STATUSES,
        &replicate::TRAINING_STATUSES,
        &fal::STATUSES,
    ]
}

/// The README's provider table, as Markdown: every table, its values and what each becomes.
pub fn markdown() -> String {
    let mut out = String::from("| provider | field (SDK) | value | NeverMiss makes it |\n|---|---|---|---|\n");
    for table in tables() {
        for (i, (value, meaning)) in table.entries.iter().enumerate() {
            let (provider, field) =
                if i == 0 { (table.provider, format!("`{}` ({})", table.field(), table.sdk)) } else { ("", String::new()) };
            out.push_str(&format!("| {provider} | {field} | `{value}` | {} |\n", describe(*meaning)));
        }
        out.push_str(&format!("| | | any other | {} |\n", describe_unknown(table.when_unknown)));
    }
    out
}

/// The README's markers around the provider table.
pub const README_BEGIN: &str = "<!-- provider-table: generated by `cargo run -p nevermiss-engine --example provider_table -- --write` from providers::vocabulary; do not edit -->";
pub const README_END: &str = "<!-- /provider-table -->";

/// The README's provider table as it stands (between the markers), if it has them.
pub fn readme_section(readme: &str) -> Option<&str> {
    let start = readme.find(README_BEGIN)? + README_BEGIN.len();
    let end = start + readme[start..].find(README_END)?;
    Some(readme[start..end].trim_start_matches('\n'))
}

/// The README with its provider table made the tables' (`None`: it has no markers).
pub fn with_readme_section(readme: &str) -> Option<String> {
    let start = readme.find(README_BEGIN)? + README_BEGIN.len();
    let end = start + readme[start..].find(README_END)?;
    Some(format!("{}\n{}{}", &readme[..start], markdown(), &readme[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_name_their_provider() {
        let mut keys = std::collections::BTreeSet::new();
        for table in tables() {
            assert!(keys.insert(table.key), "{} twice", table.key);
            assert!(table.key.starts_with(&format!("{}.", table.provider)), "{}", table.key);
            let mut values = std::collections::BTreeSet::new();
            for (value, _) in table.entries {
                assert!(values.insert(*value), "{} maps {value} twice", table.key);
            }
        }
    }

    #[test]
    fn an_unknown_value_is_never_a_success() {
        for table in tables() {
            let read = table.state("a-value-from-the-future", "job_1");
            assert_ne!(read.state, JobState::Succeeded, "{}", table.key);
            let unknown = read.unknown.expect("counted");
            assert_eq!(
                (unknown.provider, unknown.value.as_str(), unknown.job_id.as_str()),
                (table.provider, "a-value-from-the-future", "job_1")
            );
            assert!(read.reason.unwrap().contains("\"a-value-from-the-future\""), "{}", table.key);
        }
    }
}
