//! A recipe's cancel call (`[cancel]`, optional): the URL a job is canceled at, by the kind of id
//! as the poll's URLs are, sent with the poll's headers. An id no URL is written for has no cancel
//! (Gemini cancels batches, not video operations). A provider that accepts only asks: the job's
//! end still comes by a poll, as for the built-in providers.
//!
//! ```toml
//! [cancel]
//! url = "{base_url}/v1/batches/{job_id}/cancel"          # every id's, or
//! urls = { "ft-" = "{base_url}/v1/fine-tunes/{job_id}/cancel" } # the ids with a prefix
//! method = "POST"                                        # or DELETE
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;

use super::{check_call_url, check_prefixed_urls, url_for, Template};

/// `[cancel]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WrittenCancel {
    url: Option<String>,
    #[serde(default)]
    urls: BTreeMap<String, String>,
    method: Option<String>,
}

/// A recipe's cancel call, checked.
#[derive(Debug, Clone)]
pub struct Cancel {
    url: Option<Template>,
    /// The longest prefix first.
    urls: Vec<(String, Template)>,
    pub method: reqwest::Method,
}

impl Cancel {
    /// Its URLs' templates.
    pub(super) fn templates(&self) -> impl Iterator<Item = &Template> {
        self.url.iter().chain(self.urls.iter().map(|(_, t)| t))
    }

    /// Checks `[cancel]`: an error is the key and the problem.
    pub(super) fn check(written: &WrittenCancel) -> Result<Cancel, (String, String)> {
        let url = written.url.as_deref().map(|u| check_call_url(u).map_err(|p| ("cancel.url".to_owned(), p))).transpose()?;
        let urls = check_prefixed_urls("cancel.urls", &written.urls)?;
        if url.is_none() && urls.is_empty() {
            return Err(("cancel".into(), "names no URL: write cancel.url, or cancel.urls for the ids with a prefix".into()));
        }
        let method = match written.method.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("POST") => reqwest::Method::POST,
            Some("DELETE") => reqwest::Method::DELETE,
            Some(other) => return Err(("cancel.method".into(), format!("{other:?}: write POST or DELETE"))),
        };
        Ok(Cancel { url, urls, method })
    }

    /// The URL `job_id` is canceled at, if its kind of job has a cancel.
    pub fn url_for(&self, job_id: &str) -> Option<&Template> {
        url_for(&self.urls, job_id).or(self.url.as_ref())
    }
}
