//! A recipe's discovery (`[discover]`, optional): the account's list of jobs, newest first, walked
//! down to the watermark by the one walk every provider's discovery uses (`crate::discovery`), so
//! a job started elsewhere (a notebook, a colleague's script) is watched too. Each listed job is
//! read by the recipe's `[read]` as a poll's answer is, so its `read.created_at` is required.
//!
//! ```toml
//! [discover]
//! url = "{base_url}/v1beta/batches?pageSize=100"  # the newest page
//! jobs = ".operations"                            # the page's jobs (an array)
//! job_id = ".name"                                # one listed job's id
//! next = ".nextPageToken"                         # the next page's cursor; nothing: the last page
//! cursor_param = "pageToken"                      # sent as ?pageToken=<cursor>
//! ```
//!
//! A list under the account's own path names `{account}` in its URL: the owner's setting
//! `<name>.account` (or `NEVERMISS_<NAME>_ACCOUNT`), else, when the recipe says how,
//! `[discover.account]`'s call with the API key (asked once per key):
//!
//! ```toml
//! [discover.account]
//! url = "{base_url}/api/whoami-v2"   # answers who the key is
//! name = ".name"                     # the account's name in that answer
//! ```

use serde::Deserialize;

use super::expression::{self, Expression, Output};
use super::{check_call_url, Piece, Recipe, Template};
use crate::discovery::{ListPage, Listed};
use crate::job::JobEvent;

/// `[discover]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WrittenDiscover {
    url: String,
    jobs: String,
    job_id: String,
    next: Option<String>,
    cursor_param: Option<String>,
    account: Option<WrittenAccount>,
}

/// `[discover.account]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WrittenAccount {
    url: String,
    name: String,
}

/// How the account `{account}` names is asked of the API, when the owner has not set it.
#[derive(Debug, Clone)]
pub struct AccountLookup {
    pub url: Template,
    name: Expression,
}

impl AccountLookup {
    /// The account's name in the lookup's answer.
    pub fn read(&self, answer: &[u8]) -> Result<String, String> {
        match self.name.run_on(expression::read_json(answer)?)? {
            Output::Value(serde_json::Value::String(name)) if !name.trim().is_empty() => Ok(name.trim().to_owned()),
            other => Err(format!("`{}` gave no account name ({other:?})", self.name.text())),
        }
    }
}

/// A recipe's discovery, checked.
#[derive(Debug, Clone)]
pub struct Discover {
    pub url: Template,
    jobs: Expression,
    job_id: Expression,
    /// The next page's cursor, and the query parameter it is sent in.
    pub next: Option<(Expression, String)>,
    /// How `{account}` is asked of the API when the owner has not set it.
    pub account: Option<AccountLookup>,
}

/// One listed job, read: when it was created (what the walk stops on) and its event.
pub struct ListedJob {
    created_ms: Option<i64>,
    event: Result<JobEvent, String>,
}

impl Listed for ListedJob {
    fn created_ms(&self) -> Option<i64> {
        self.created_ms
    }

    fn into_event(self) -> Result<JobEvent, String> {
        self.event
    }
}

impl Discover {
    /// Checks `[discover]`: an error is the key and the problem.
    pub(super) fn check(written: &WrittenDiscover) -> Result<Discover, (String, String)> {
        let url = check_call_url(&written.url).map_err(|p| ("discover.url".to_owned(), p))?;
        if url.0.iter().any(|p| matches!(p, Piece::JobId | Piece::JobIdPart(_) | Piece::JobIdPath)) {
            return Err(("discover.url".into(), "names the job id: the list is the account's, write its URL without {job_id}".into()));
        }
        let compile = |key: &str, text: &str| Expression::compile(text).map_err(|p| (key.to_owned(), p));
        let next = match (&written.next, &written.cursor_param) {
            (None, None) => None,
            (Some(next), Some(param)) if valid_param(param) => Some((compile("discover.next", next)?, param.clone())),
            (Some(_), Some(param)) => {
                return Err((
                    "discover.cursor_param".into(),
                    format!("{param:?} is not a query parameter's name: letters, digits, _ and -"),
                ))
            }
            (Some(_), None) => {
                return Err((
                    "discover.cursor_param".into(),
                    "is missing: name the query parameter the cursor of discover.next is sent in".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(("discover.next".into(), "is missing: write the expression that reads the next page's cursor".into()))
            }
        };
        let account = match &written.account {
            None => None,
            Some(_) if !url.names_account() => {
                return Err((
                    "discover.account".into(),
                    "is there, and discover.url does not name {account}: write it in the URL, or remove [discover.account]".into(),
                ))
            }
            Some(a) => {
                let lookup = check_call_url(&a.url).map_err(|p| ("discover.account.url".to_owned(), p))?;
                if lookup.0.iter().any(|p| matches!(p, Piece::JobId | Piece::JobIdPart(_) | Piece::JobIdPath | Piece::Account)) {
                    return Err((
                        "discover.account.url".into(),
                        "names the job id or {account}: it is the call that finds the account".into(),
                    ));
                }
                Some(AccountLookup { url: lookup, name: compile("discover.account.name", &a.name)? })
            }
        };
        Ok(Discover {
            url,
            jobs: compile("discover.jobs", &written.jobs)?,
            job_id: compile("discover.job_id", &written.job_id)?,
            next,
            account,
        })
    }

    /// Whether listing needs the owner to set the account (the URL names `{account}` and the
    /// recipe has no call to find it).
    pub fn needs_account_setting(&self) -> bool {
        self.url.names_account() && self.account.is_none()
    }

    /// Reads one page of the list with `recipe`: each job's id by `job_id` and its event by the
    /// recipe's `[read]` (`seq` orders it, as a poll's time does), and the next page's cursor. A
    /// job that does not read is kept as its reason (the walk skips it); a page that does not is
    /// an error.
    pub fn read_page(&self, recipe: &Recipe, page: &[u8], seq: i64) -> Result<ListPage<ListedJob>, String> {
        let page = expression::read_json(page)?;
        let jobs = match self.jobs.run_on(page.clone())? {
            Output::Nothing | Output::Value(serde_json::Value::Null) => Vec::new(),
            Output::Value(serde_json::Value::Array(jobs)) => jobs,
            Output::Value(other) => return Err(format!("`{}` gave {}, not a list of jobs", self.jobs.text(), kind(&other))),
        };
        let mut items: Vec<ListedJob> = jobs.iter().map(|job| self.read_job(recipe, job, seq)).collect();
        // Newest first, whatever order the provider lists them in (a list of one page may be
        // oldest first): the walk stops at the first job older than the watermark.
        items.sort_by_key(|job| std::cmp::Reverse(job.created_ms));
        let next = match &self.next {
            None => None,
            Some((next, _)) => match next.run_on(page)? {
                Output::Value(serde_json::Value::String(cursor)) => Some(cursor).filter(|c| !c.is_empty()),
                Output::Value(serde_json::Value::Number(cursor)) => Some(cursor.to_string()),
                _ => None,
            },
        };
        Ok(ListPage { items, next })
    }

    fn read_job(&self, recipe: &Recipe, job: &serde_json::Value, seq: i64) -> ListedJob {
        let event = (|| {
            // Read once: the id's expression and the recipe's [read] run on the same value.
            let value = expression::read_json(&serde_json::to_vec(job).map_err(|e| e.to_string())?)?;
            let job_id = match self.job_id.run_on(value.clone())? {
                Output::Value(serde_json::Value::String(id)) if !id.trim().is_empty() => id,
                Output::Value(serde_json::Value::Number(id)) => id.to_string(),
                other => return Err(format!("`{}` gave no job id ({other:?})", self.job_id.text())),
            };
            Ok(recipe.read_value(&job_id, value, seq)?.event)
        })();
        ListedJob { created_ms: event.as_ref().ok().and_then(|e| e.started_at), event }
    }
}

/// A query parameter's name as a recipe may write it.
fn valid_param(name: &str) -> bool {
    !name.is_empty() && name.len() <= 40 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

fn kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Object(_) => "an object",
        serde_json::Value::String(_) => "a text",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        _ => "a value",
    }
}
