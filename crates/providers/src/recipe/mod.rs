//! Recipes: a provider described in a TOML file, not in code (contract §7): how to poll a job,
//! how to read the answer (jq expressions, `expression`), and a table from the provider's values to
//! NeverMiss's states. The book's page "Any other: a recipe" (docs/src/providers/recipes.md) lists
//! every key, and the shipped recipes (`crates/providers/recipes/`) are examples.
//!
//! This module reads and validates a recipe (`Recipe::parse`: each refusal names the file, the line
//! and what to write instead) and reads an answer with it (`Recipe::read_answer`).

pub mod cancel;
pub mod discover;
pub mod expression;
mod growth;
pub mod jwt;
mod location;
mod provider;
pub mod webhook;

use std::collections::BTreeMap;

use serde::Deserialize;

use expression::{Expression, Output};
pub use provider::{load_dir, shipped, RecipeProvider, RECIPES_DIR, USER_ORIGIN};
use webhook::Webhook;

/// The recipes shipped with the app, compiled in (`crates/providers/recipes/`): each checked
/// against its provider's official SDK (named in its first lines).
pub const SHIPPED: &[(&str, &str)] = &[
    ("cursor.toml", include_str!("../../recipes/cursor.toml")),
    ("fireworks.toml", include_str!("../../recipes/fireworks.toml")),
    ("gemini.toml", include_str!("../../recipes/gemini.toml")),
    ("groq.toml", include_str!("../../recipes/groq.toml")),
    ("huggingface.toml", include_str!("../../recipes/huggingface.toml")),
    ("mistral.toml", include_str!("../../recipes/mistral.toml")),
    ("runpod.toml", include_str!("../../recipes/runpod.toml")),
    ("together.toml", include_str!("../../recipes/together.toml")),
];

use crate::job::{JobEvent, JobResult, JobState};
use crate::BadJobId;

/// Names a recipe may not take: the built-in providers' and the shipped recipes'.
pub const RESERVED_NAMES: &[&str] = &[
    "generic",
    "replicate",
    "openai",
    "anthropic",
    "fal",
    "gemini",
    "runpod",
    "together",
    "huggingface",
    "groq",
    "mistral",
    "fireworks",
    "cursor",
];

/// Why a recipe was refused: the file, where in it (line and column, from 1, when known), the
/// key, and what is wrong with what to write instead. Said as `file:line:column: key: problem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeError {
    pub file: String,
    pub at: Option<(usize, usize)>,
    /// The key as dotted path (`read.state`); empty for a file that is not TOML at all.
    pub key: String,
    pub problem: String,
}

impl std::fmt::Display for RecipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((line, column)) = self.at {
            write!(f, ":{line}:{column}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl std::error::Error for RecipeError {}

/// The recipe as written (TOML), before it is checked.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: String,
    #[serde(default)]
    ids: Vec<String>,
    base_url: String,
    poll: WrittenPoll,
    read: WrittenRead,
    states: BTreeMap<String, String>,
    #[serde(default)]
    webhook: Option<webhook::WrittenWebhook>,
    #[serde(default)]
    cancel: Option<cancel::WrittenCancel>,
    #[serde(default)]
    discover: Option<discover::WrittenDiscover>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenPoll {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    not_found: Option<String>,
    /// URLs for the ids that start with each prefix (a provider whose kinds of job are polled at
    /// different URLs); any other id is polled at `url`.
    #[serde(default)]
    urls: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenRead {
    state: String,
    error: Option<String>,
    created_at: Option<String>,
    finished_at: Option<String>,
    kind: Option<String>,
    label: Option<String>,
    result_text: Option<String>,
    result_urls: Option<String>,
    result_image: Option<String>,
    provider_url: Option<String>,
}

/// How a recipe polls a job.
#[derive(Debug, Clone)]
pub struct Poll {
    pub url: Template,
    /// The URLs of the ids that start with a prefix, the longest prefix first.
    pub urls: Vec<(String, Template)>,
    pub method: reqwest::Method,
    pub headers: Vec<(String, Template)>,
    pub not_found: NotFound,
}

/// What a poll answered 404 means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotFound {
    /// The provider does not know the job: a typo, another account (polling is abandoned after
    /// the usual failures, with one alert).
    UnknownJob,
    /// The provider forgets a job some time after its end: a job seen unfinished ended while
    /// nothing looked, its outcome unknown (`JobState::Ended`). A job never seen is still an
    /// unknown job.
    Ended,
}

impl Poll {
    /// The URL `job_id` is polled at: that of the longest prefix it starts with, else `url`.
    pub fn url_for(&self, job_id: &str) -> &Template {
        url_for(&self.urls, job_id).unwrap_or(&self.url)
    }
}

/// The URL of the longest prefix `job_id` starts with (`urls` is sorted longest first).
fn url_for<'a>(urls: &'a [(String, Template)], job_id: &str) -> Option<&'a Template> {
    urls.iter().find(|(prefix, _)| job_id.starts_with(prefix.as_str())).map(|(_, url)| url)
}

/// A URL a recipe calls (to poll, cancel or list), checked: no secret in it (they go in headers),
/// https or loopback http, or starting with `{base_url}` (checked apart).
fn check_call_url(text: &str) -> Result<Template, String> {
    let url = Template::parse(text)?;
    if url.has_secret() {
        return Err("holds a secret: send it in a header (poll.headers), never in a URL".into());
    }
    if !matches!(url.0.first(), Some(Piece::BaseUrl)) {
        let literal: String = url
            .0
            .iter()
            .take_while(|p| matches!(p, Piece::Text(_)))
            .map(|p| if let Piece::Text(t) = p { t.as_str() } else { "" })
            .collect();
        url_allowed(&literal).map_err(|p| format!("{p}; or start it with {{base_url}}"))?;
    }
    Ok(url)
}

/// The URLs of ids by their prefix (`poll.urls`, `cancel.urls`), checked, the longest prefix
/// first (the most particular form of id wins); an error is the key and the problem.
fn check_prefixed_urls(key: &str, written: &BTreeMap<String, String>) -> Result<Vec<(String, Template)>, (String, String)> {
    let mut urls = Vec::new();
    for (prefix, text) in written {
        let key = format!("{key}.{prefix}");
        if prefix.trim().is_empty() {
            return Err((key, "an empty prefix: write the URL of every other id without a prefix".into()));
        }
        urls.push((prefix.clone(), check_call_url(text).map_err(|p| (key, p))?));
    }
    urls.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
    Ok(urls)
}

/// The expressions that read an answer; only `state` is required.
#[derive(Debug, Clone)]
pub struct Read {
    pub state: Expression,
    pub error: Option<Expression>,
    pub created_at: Option<Expression>,
    pub finished_at: Option<Expression>,
    pub kind: Option<Expression>,
    pub label: Option<Expression>,
    pub result_text: Option<Expression>,
    pub result_urls: Option<Expression>,
    pub result_image: Option<Expression>,
    pub provider_url: Option<Expression>,
}

/// A provider described by a recipe, checked.
#[derive(Debug, Clone)]
pub struct Recipe {
    pub name: String,
    /// The id prefixes it owns (`nevermiss track` and `wait` find the provider by them).
    pub ids: Vec<String>,
    pub base_url: String,
    pub poll: Poll,
    pub read: Read,
    /// The provider's values and what each means.
    pub states: Vec<(String, JobState)>,
    /// What a value not in the table means: never a success.
    pub when_unknown: JobState,
    /// How its webhooks are verified and read, when it takes any.
    pub webhook: Option<Webhook>,
    /// Its cancel call, when the provider has one.
    pub cancel: Option<cancel::Cancel>,
    /// How the account's jobs are listed, when the provider lists them.
    pub discover: Option<discover::Discover>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    BaseUrl,
    JobId,
    /// The job id's piece at this index, the id split on `/`.
    JobIdPart(usize),
    /// The job id as a path: its pieces split on `/`, each encoded, joined by `/` (a provider
    /// whose jobs are resource names, `batches/123` or `models/veo/operations/456`).
    JobIdPath,
    /// The provider's API key (`NEVERMISS_<NAME>_API_KEY` or the secret store).
    ApiKey,
    /// A named secret of the secret store.
    Secret(String),
    /// The owner's account at the provider (`{account}`, discovery's list only): the setting
    /// `<provider>.account`, else what `[discover.account]` asks the API.
    Account,
}

/// A value a template asks for beyond the job id: filled by the caller, which knows where each is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted<'a> {
    ApiKey,
    Secret(&'a str),
    Account,
}

/// A text with `{...}` placeholders, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub Vec<Piece>);

impl Template {
    fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or("has a `{` without its `}`")? + open;
            let name = &rest[open + 1..close];
            pieces.push(match name {
                "base_url" => Piece::BaseUrl,
                "job_id" => Piece::JobId,
                "job_id.path" => Piece::JobIdPath,
                "api_key" => Piece::ApiKey,
                "account" => Piece::Account,
                _ => {
                    if let Some(index) = name.strip_prefix("job_id.") {
                        Piece::JobIdPart(
                            index.parse().map_err(|_| format!("names {{{name}}}: write {{job_id.0}}, {{job_id.1}}, ... or {{job_id.path}}"))?,
                        )
                    } else if let Some(secret) = name.strip_prefix("secret.").filter(|s| valid_name(s)) {
                        Piece::Secret(secret.to_owned())
                    } else {
                        return Err(format!(
                            "names {{{name}}}, which is none of {{base_url}}, {{job_id}}, {{job_id.N}}, {{job_id.path}}, {{api_key}}, {{secret.NAME}}, {{account}}"
                        ));
                    }
                }
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Template(pieces))
    }

    fn has_secret(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::ApiKey | Piece::Secret(_)))
    }

    /// Whether it names the owner's account (`{account}`).
    pub fn names_account(&self) -> bool {
        self.0.contains(&Piece::Account)
    }

    /// Whether `job_id` fills the template's pieces of the id: each `{job_id.N}` there and not
    /// empty, a `{job_id.path}` a path of names.
    fn check_job_id(&self, job_id: &str) -> Result<(), BadJobId> {
        let pieces: Vec<&str> = job_id.split('/').collect();
        for piece in &self.0 {
            match piece {
                Piece::JobIdPart(i) if pieces.get(*i).is_none_or(|p| p.is_empty()) => {
                    let parts =
                        self.0.iter().filter_map(|p| if let Piece::JobIdPart(i) = p { Some(*i) } else { None }).max().unwrap_or(0) + 1;
                    return Err(BadJobId::MissingPiece { job_id: job_id.to_owned(), piece: *i, pieces: parts });
                }
                Piece::JobIdPath => {
                    encode_id_path(job_id)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The text with each placeholder filled: `value` gives a secret's value or the account (or
    /// why it cannot); a missing piece of the id cannot be polled.
    pub fn fill(
        &self,
        base_url: &str,
        job_id: &str,
        value: &dyn Fn(Wanted<'_>) -> Result<String, crate::FetchError>,
    ) -> Result<String, crate::FetchError> {
        let name = |id| crate::job_id::is_a_name(id).map(|()| id).map_err(|e| crate::FetchError::Unpollable(e.to_string()));
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::BaseUrl => out.push_str(base_url.trim_end_matches('/')),
                Piece::JobId => out.push_str(&encode_path(name(job_id)?)),
                Piece::JobIdPart(i) => out.push_str(&encode_path(
                    name(job_id)?
                        .split('/')
                        .nth(*i)
                        .ok_or_else(|| crate::FetchError::Unpollable(format!("the job id {job_id:?} has no piece {i}")))?,
                )),
                Piece::JobIdPath => out.push_str(&encode_id_path(job_id).map_err(|e| crate::FetchError::Unpollable(e.to_string()))?),
                Piece::ApiKey => out.push_str(&value(Wanted::ApiKey)?),
                Piece::Secret(name) => out.push_str(&value(Wanted::Secret(name))?),
                Piece::Account => {
                    // One name, never `.` or `..` (an answer or a setting cannot climb the URL).
                    let account = value(Wanted::Account)?;
                    crate::job_id::is_a_name(&account)
                        .map_err(|e| crate::FetchError::NotConfigured(format!("the account {account:?} is not a name: {e}")))?;
                    out.push_str(&encode_path(&account));
                }
            }
        }
        Ok(out)
    }
}

/// A job id as one path segment: anything but unreserved characters percent-encoded.
fn encode_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A job id as a path: each piece between `/` encoded as one segment. An empty, `.` or `..`
/// piece is refused: an id may name a resource below the API's root, never climb out of it.
fn encode_id_path(job_id: &str) -> Result<String, BadJobId> {
    let pieces: Vec<&str> = job_id.split('/').collect();
    if pieces.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err(BadJobId::NotAPath { job_id: job_id.to_owned() });
    }
    Ok(pieces.iter().map(|p| encode_path(p)).collect::<Vec<_>>().join("/"))
}

/// A provider's or a secret's name: lower-case letters, digits and `-` (and `_` for secrets),
/// starting with a letter.
fn valid_name(name: &str) -> bool {
    name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Whether `url` may be called: https, or http to this machine only.
fn url_allowed(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("is not a URL ({e})"))?;
    let host = parsed.host_str().unwrap_or("");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        "http" => Err("is http:// to another machine: write https:// (the API key travels with each poll)".into()),
        other => Err(format!("is a {other}: URL: write an https:// one")),
    }
}

impl Recipe {
    /// Reads and checks the user's recipe in `text`, from the file named `file` (for the
    /// messages): it may not take a built-in or shipped provider's name.
    pub fn parse(file: &str, text: &str) -> Result<Recipe, RecipeError> {
        Recipe::parse_as(file, text, false)
    }

    /// Reads and checks a recipe shipped with the app (`SHIPPED`), which takes its reserved name.
    pub fn parse_shipped(file: &str, text: &str) -> Result<Recipe, RecipeError> {
        Recipe::parse_as(file, text, true)
    }

    fn parse_as(file: &str, text: &str, shipped: bool) -> Result<Recipe, RecipeError> {
        let refuse = |key: &str, problem: String| RecipeError {
            file: file.to_owned(),
            at: location::of_key(text, key),
            key: key.to_owned(),
            problem,
        };
        let written: Written = toml::from_str(text).map_err(|e| location::toml_error(file, text, &e))?;
        if !valid_name(&written.name) || written.name.contains('_') {
            return Err(refuse("name", format!("{:?} is not a provider's name: lower-case letters, digits and -", written.name)));
        }
        if !shipped && RESERVED_NAMES.contains(&written.name.as_str()) {
            return Err(refuse("name", format!("{:?} is a built-in provider's name: give yours another", written.name)));
        }
        url_allowed(&written.base_url).map_err(|p| refuse("base_url", p))?;
        let ids: Vec<String> = written.ids.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();

        let url = check_call_url(&written.poll.url).map_err(|p| refuse("poll.url", p))?;
        let urls = check_prefixed_urls("poll.urls", &written.poll.urls).map_err(|(key, p)| refuse(&key, p))?;
        let method = match written.poll.method.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("GET") => reqwest::Method::GET,
            Some("POST") => reqwest::Method::POST,
            Some(other) => return Err(refuse("poll.method", format!("{other:?}: write GET or POST"))),
        };
        let mut headers = Vec::new();
        for (name, value) in &written.poll.headers {
            let key = format!("poll.headers.{name}");
            let template = Template::parse(value).map_err(|p| refuse(&key, p))?;
            if looks_like_a_credential(name) && !template.has_secret() {
                return Err(refuse(
                    &key,
                    format!(
                        "a secret written inline: write {{api_key}} (set by {} or in Settings) or {{secret.NAME}}",
                        crate::variable(&written.name, "API_KEY")
                    ),
                ));
            }
            headers.push((name.clone(), template));
        }
        // What a 404 means: an unknown job (the built-in providers' abandon rule), or, for a
        // provider that forgets a job some time after it ended, that a job seen unfinished ended
        // unobserved: `ended`, an end whose outcome is unknown, never a success.
        let not_found = match written.poll.not_found.as_deref() {
            None | Some("unknown_job") => NotFound::UnknownJob,
            Some("ended") => NotFound::Ended,
            Some(other) => return Err(refuse("poll.not_found", format!("{other:?}: write unknown_job or ended"))),
        };

        let expression = |key: &str, text: &Option<String>| -> Result<Option<Expression>, RecipeError> {
            text.as_deref().map(|t| Expression::compile(t).map_err(|p| refuse(key, p))).transpose()
        };
        let r = &written.read;
        let read = Read {
            state: Expression::compile(&r.state).map_err(|p| refuse("read.state", p))?,
            error: expression("read.error", &r.error)?,
            created_at: expression("read.created_at", &r.created_at)?,
            finished_at: expression("read.finished_at", &r.finished_at)?,
            kind: expression("read.kind", &r.kind)?,
            label: expression("read.label", &r.label)?,
            result_text: expression("read.result_text", &r.result_text)?,
            result_urls: expression("read.result_urls", &r.result_urls)?,
            result_image: expression("read.result_image", &r.result_image)?,
            provider_url: expression("read.provider_url", &r.provider_url)?,
        };

        let mut states = Vec::new();
        let mut when_unknown = JobState::Running;
        for (value, state) in &written.states {
            let key = format!("states.{value}");
            let parsed = JobState::parse(state.trim()).filter(|s| !matches!(s, JobState::Unknown | JobState::Ended)).ok_or_else(|| {
                refuse(&key, format!("{state:?} is not a state: write queued, running, succeeded, failed, canceled or needs_input (ended is NeverMiss's own: see poll.not_found)"))
            })?;
            if value == "when_unknown" {
                if !matches!(parsed, JobState::Running | JobState::Failed) {
                    return Err(refuse(&key, "an unknown value is never a success: write running or failed".into()));
                }
                when_unknown = parsed;
            } else {
                states.push((value.clone(), parsed));
            }
        }
        if !states.iter().any(|(_, s)| s.is_terminal()) {
            return Err(refuse(
                "states",
                "maps no value to an end (succeeded, failed or canceled): NeverMiss would never see a job finish".into(),
            ));
        }
        let webhook = match &written.webhook {
            None => None,
            Some(w) => Some(Webhook::check(w).map_err(|(key, problem)| refuse(&key, problem))?),
        };
        let cancel = written.cancel.as_ref().map(cancel::Cancel::check).transpose().map_err(|(key, p)| refuse(&key, p))?;
        let discover = written.discover.as_ref().map(discover::Discover::check).transpose().map_err(|(key, p)| refuse(&key, p))?;
        // The account is the list's: a job's own calls name the job, whose id says whose it is.
        let account_named = [("poll.url", &url)]
            .into_iter()
            .chain(urls.iter().map(|(_, t)| ("poll.urls", t)))
            .chain(headers.iter().map(|(_, t)| ("poll.headers", t)))
            .chain(cancel.iter().flat_map(|c| c.templates()).map(|t| ("cancel.url", t)))
            .find(|(_, t)| t.names_account());
        if let Some((key, _)) = account_named {
            return Err(refuse(key, "names {account}, which only discover.url may name (a job's calls name the job)".into()));
        }
        if discover.is_some() && read.created_at.is_none() {
            return Err(refuse(
                "discover",
                "needs read.created_at: the list is walked down to the last job seen by when each job was created".into(),
            ));
        }
        Ok(Recipe {
            name: written.name,
            ids,
            base_url: written.base_url.trim_end_matches('/').to_owned(),
            poll: Poll { url, urls, method, headers, not_found },
            read,
            states,
            when_unknown,
            webhook,
            cancel,
            discover,
        })
    }

    /// The state a provider's value means, by the table; `None` when the table does not have it.
    pub fn state_of(&self, value: &str) -> Option<JobState> {
        self.states.iter().find(|(v, _)| v == value).map(|(_, state)| *state)
    }

    /// Whether this recipe's provider owns `job_id` (by its prefixes).
    pub fn owns(&self, job_id: &str) -> bool {
        self.ids.iter().any(|prefix| job_id.starts_with(prefix.as_str()))
    }

    /// The names of the secrets its headers and its JWT owner take (`{secret.NAME}`), each once.
    pub fn named_secrets(&self) -> Vec<String> {
        let owner = match self.webhook.as_ref().map(|w| &w.scheme) {
            Some(webhook::Scheme::Jwt(jwt)) => Some(&jwt.owner),
            _ => None,
        };
        let mut names: Vec<String> = self
            .poll
            .headers
            .iter()
            .map(|(_, t)| t)
            .chain(owner)
            .flat_map(|t| t.0.iter())
            .filter_map(|p| if let Piece::Secret(name) = p { Some(name.clone()) } else { None })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Whether `job_id` can be one of this provider's jobs, said before it is tracked: it starts
    /// with one of `ids` (when the recipe lists them) and has the pieces its poll URL puts in the
    /// path (`{job_id.1}`: RunPod's `<endpoint>/<job id>`).
    pub fn check_job_id(&self, job_id: &str) -> Result<(), BadJobId> {
        if !self.ids.is_empty() && !self.owns(job_id) {
            let prefixes = self.ids.iter().map(|p| format!("{p}...")).collect::<Vec<_>>().join(" or ");
            return Err(BadJobId::NotItsPrefix { provider: self.name.clone(), prefixes, job_id: job_id.to_owned() });
        }
        self.poll.url_for(job_id).check_job_id(job_id)
    }

    /// Reads one answer about `job_id`: the event it says, and the provider's value when the
    /// table does not have it (to count). An expression that fails makes a poll error, never a
    /// state.
    pub fn read_answer(&self, job_id: &str, answer: &[u8], seq: i64) -> Result<AnswerRead, String> {
        // Read once; every expression runs on the same value.
        self.read_value(job_id, expression::read_json(answer)?, seq)
    }

    /// `read_answer` on an answer already read (a poll's, or one job of a list).
    pub fn read_value(&self, job_id: &str, answer: expression::Val, seq: i64) -> Result<AnswerRead, String> {
        let text = |expression: &Option<Expression>| -> Result<Option<String>, String> {
            match expression {
                None => Ok(None),
                Some(e) => Ok(match e.run_on(answer.clone())? {
                    Output::Nothing | Output::Value(serde_json::Value::Null) => None,
                    Output::Value(serde_json::Value::String(s)) => Some(s),
                    Output::Value(other) => Some(other.to_string()),
                }),
            }
        };
        let time = |expression: &Option<Expression>| -> Result<Option<i64>, String> {
            match expression {
                None => Ok(None),
                Some(e) => match e.run_on(answer.clone())? {
                    Output::Nothing | Output::Value(serde_json::Value::Null) => Ok(None),
                    Output::Value(value) => {
                        time_ms(&value).map(Some).ok_or_else(|| format!("`{}` gave {value}, which is not a time", e.text()))
                    }
                },
            }
        };
        let value = match self.read.state.run_on(answer.clone())? {
            Output::Value(serde_json::Value::String(s)) => s,
            Output::Value(serde_json::Value::Bool(b)) => b.to_string(),
            Output::Value(serde_json::Value::Number(n)) => n.to_string(),
            other => return Err(format!("`{}` gave no state ({other:?})", self.read.state.text())),
        };
        let (state, unknown) = match self.state_of(&value) {
            Some(state) => (state, None),
            None => (self.when_unknown, Some(value.clone())),
        };
        let mut event = JobEvent::new(&self.name, job_id, state, seq);
        event.error = text(&self.read.error)?.filter(|_| matches!(state, JobState::Failed | JobState::Canceled));
        if let Some(value) = &unknown {
            event.detail = Some(format!("{} status {value:?} is one NeverMiss does not know", self.name));
        }
        event.started_at = time(&self.read.created_at)?;
        event.finished_at = time(&self.read.finished_at)?.filter(|_| state.is_terminal());
        event.kind = text(&self.read.kind)?.map(|k| format!("{}/{k}", self.name));
        event.label = text(&self.read.label)?;
        event.provider_url = text(&self.read.provider_url)?.filter(|u| u.starts_with("https://") || u.starts_with("http://"));
        if state.is_terminal() {
            let urls = match &self.read.result_urls {
                None => Vec::new(),
                Some(e) => match e.run_on(answer.clone())? {
                    Output::Value(serde_json::Value::Array(items)) => {
                        items.into_iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
                    }
                    Output::Value(serde_json::Value::String(one)) => vec![one],
                    _ => Vec::new(),
                },
            };
            let result = JobResult { text: text(&self.read.result_text)?, urls, image: text(&self.read.result_image)? };
            event.result = (result.text.is_some() || !result.urls.is_empty() || result.image.is_some()).then_some(result);
        }
        Ok(AnswerRead { event, unknown })
    }
}

impl Read {
    /// Each expression with its key (`read.state`, ...), in the order a recipe writes them.
    pub fn each(&self) -> Vec<(&'static str, &Expression)> {
        let optional = [
            ("read.error", &self.error),
            ("read.created_at", &self.created_at),
            ("read.finished_at", &self.finished_at),
            ("read.kind", &self.kind),
            ("read.label", &self.label),
            ("read.result_text", &self.result_text),
            ("read.result_urls", &self.result_urls),
            ("read.result_image", &self.result_image),
            ("read.provider_url", &self.provider_url),
        ];
        std::iter::once(("read.state", &self.state)).chain(optional.into_iter().filter_map(|(k, e)| e.as_ref().map(|e| (k, e)))).collect()
    }
}

impl Recipe {
    /// What each of the recipe's expressions gives on `answer`, one line each (`nevermiss
    /// providers test`): its output as JSON, `(nothing)`, or its error.
    pub fn trace(&self, answer: &[u8]) -> Vec<crate::ReadTrace> {
        let value = match expression::read_json(answer) {
            Ok(value) => value,
            Err(e) => return vec![crate::ReadTrace { key: "answer".into(), expression: String::new(), output: Err(e) }],
        };
        self.read
            .each()
            .into_iter()
            .map(|(key, e)| crate::ReadTrace {
                key: key.to_owned(),
                expression: e.text().to_owned(),
                output: e.run_on(value.clone()).map(|out| match out {
                    Output::Value(v) => v.to_string(),
                    Output::Nothing => "(nothing)".to_owned(),
                }),
            })
            .collect()
    }
}

/// What one answer said.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerRead {
    pub event: JobEvent,
    /// The provider's value, when the recipe's table does not have it.
    pub unknown: Option<String>,
}

/// Whether a header's name says its value is a credential.
fn looks_like_a_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase().replace('-', "_");
    name == "authorization" || name == "cookie" || crate::masking::names_a_credential(&name) || name.ends_with("_key")
}

/// A time as providers write it, in Unix milliseconds: a number of seconds (below 10^11, which
/// is the year 5138 in seconds and 1973 in milliseconds) or of milliseconds, or an RFC 3339 text.
pub fn time_ms(value: &serde_json::Value) -> Option<i64> {
    match value {
        serde_json::Value::Number(n) => {
            let n = n.as_f64()?;
            Some(if n.abs() < 1e11 { (n * 1000.0) as i64 } else { n as i64 })
        }
        serde_json::Value::String(s) => {
            crate::job::parse_rfc3339(s.trim()).or_else(|| s.trim().parse::<f64>().ok().and_then(|n| time_ms(&serde_json::json!(n))))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
