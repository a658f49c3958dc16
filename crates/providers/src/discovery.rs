//! Discovery's one walk over a provider's list endpoint: pages newest first, each job created at
//! or after the watermark becomes a job event, and the walk stops at the first older job, at
//! `max_jobs`, at a page whose next cursor it has seen already or after `MAX_PAGES` pages (each
//! marked truncated), or at the last page. Each provider says how to fetch a page
//! (`next`: a URL it follows only on its own API's origin, or a cursor id) and how to read one
//! listed job.

use std::future::Future;

use super::{fetch_json, Discovered, FetchError};
use crate::job::JobEvent;

/// One page of a list: its jobs, newest first, and how to ask for the next (older) page.
pub struct ListPage<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// A page of a list whose next page is asked for by the last id of this one (`after` at OpenAI,
/// `after_id` at Anthropic): `data`, `has_more`, `last_id`.
#[derive(Debug, serde::Deserialize)]
pub struct IdCursorPage<T> {
    #[serde(default = "Vec::new")]
    pub data: Vec<T>,
    #[serde(default)]
    pub has_more: bool,
    #[serde(default)]
    pub last_id: Option<String>,
}

/// How one listed job reads: its creation time (ms), and its event (or why it cannot be read).
pub trait Listed {
    fn created_ms(&self) -> Option<i64>;
    fn into_event(self) -> Result<JobEvent, String>;
    /// The item's own id, for lists whose next page starts after the last item's id.
    fn list_id(&self) -> Option<&str> {
        None
    }
}

/// Where the next page of an `IdCursorPage` list starts, as the provider's SDK reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextCursor {
    /// The page's `last_id` (anthropic-sdk-python's `SyncPage`).
    LastId,
    /// The last item's `id` (openai-python's `SyncCursorPage`, which never reads `last_id`).
    LastItemId,
}

impl<T: Listed> IdCursorPage<T> {
    /// The page's items and the cursor of the next page, read as `next` says.
    pub fn read(self, next: NextCursor) -> ListPage<T> {
        let cursor = match next {
            NextCursor::LastId => self.last_id,
            NextCursor::LastItemId => self.data.last().and_then(|item| item.list_id().map(str::to_owned)),
        };
        ListPage { next: cursor.filter(|_| self.has_more), items: self.data }
    }
}

/// Walks the pages from `fetch(None)` on (see the module's comment). A listed job that cannot be
/// read is skipped (logged): one odd entry does not stop the discovery of the others.
pub async fn walk<T, F, Fut>(provider: &str, since_ms: i64, max_jobs: usize, mut fetch: F) -> Result<Discovered, FetchError>
where
    T: Listed,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<ListPage<T>, FetchError>>,
{
    let mut found = Discovered::default();
    let mut next = None;
    let mut cursors_seen = std::collections::HashSet::new();
    for _ in 0..MAX_PAGES {
        let page = fetch(next.take()).await?;
        for item in page.items {
            let Some(created) = item.created_ms() else {
                tracing::debug!(provider, "a listed job has no creation time; skipped");
                continue;
            };
            if created < since_ms {
                return Ok(found);
            }
            if found.events.len() >= max_jobs {
                found.truncated = true;
                return Ok(found);
            }
            found.newest_created_ms = Some(found.newest_created_ms.map_or(created, |n| n.max(created)));
            match item.into_event() {
                Ok(event) => found.events.push(super::ListedJob { event, created_ms: created }),
                Err(reason) => tracing::debug!(provider, %reason, "a listed job cannot be read; skipped"),
            }
        }
        match page.next.filter(|n| !n.is_empty()) {
            // A list that names a page it gave already would be walked forever, with the key.
            Some(n) if !cursors_seen.insert(n.clone()) => {
                tracing::warn!(provider, cursor = %n, "the job list named a page it gave already; this listing stops there");
                found.truncated = true;
                return Ok(found);
            }
            Some(n) => next = Some(n),
            None => return Ok(found),
        }
    }
    tracing::warn!(
        provider,
        pages = MAX_PAGES,
        "the job list went on past the pages one listing reads; the older jobs there are not discovered"
    );
    found.truncated = true;
    Ok(found)
}

/// Most pages one listing reads (each one call with the key): the newest jobs come first, so the
/// window since the last listing is seldom more than one page.
pub const MAX_PAGES: usize = 20;

/// `walk` over a list of `IdCursorPage`s: `first` is the request for the newest page, and each
/// next one is asked for with the last id of the one before as its `cursor` (`after`, `after_id`).
pub async fn walk_id_cursor<T, F>(
    provider: &str,
    since_ms: i64,
    max_jobs: usize,
    (cursor, next): (&'static str, NextCursor),
    first: F,
) -> Result<Discovered, FetchError>
where
    T: Listed + serde::de::DeserializeOwned,
    F: Fn() -> reqwest::RequestBuilder,
{
    walk(provider, since_ms, max_jobs, |after| {
        let mut request = first();
        if let Some(after) = after {
            request = request.query(&[(cursor, after)]);
        }
        async move {
            let page: IdCursorPage<T> = fetch_json(request).await?;
            Ok(page.read(next))
        }
    })
    .await
}

/// The scheme, host and port of a URL: a `next` page URL is followed (with the API key) only on
/// the API's own origin.
pub fn origin(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some(format!("{}://{}:{}", parsed.scheme(), parsed.host_str()?, parsed.port_or_known_default()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Nothing;

    impl Listed for Nothing {
        fn created_ms(&self) -> Option<i64> {
            None
        }
        fn into_event(self) -> Result<JobEvent, String> {
            Err("nothing".into())
        }
    }

    /// A walk over empty pages whose next cursor `cursor(n)` gives for the nth page: the calls made.
    async fn calls(cursor: impl Fn(usize) -> String) -> (usize, bool) {
        let calls = AtomicUsize::new(0);
        let found = walk("acme", 0, 100, |_| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let next = Some(cursor(n));
            async move { Ok(ListPage::<Nothing> { items: Vec::new(), next }) }
        })
        .await
        .unwrap();
        (calls.load(Ordering::SeqCst), found.truncated)
    }

    #[tokio::test]
    async fn a_list_that_names_a_page_again_or_never_ends_is_walked_a_bounded_number_of_pages() {
        // Every page empty and naming the same cursor: the second names it again, the walk stops.
        assert_eq!(calls(|_| "same".into()).await, (2, true));
        // Two cursors in turn: stopped at the first repeat.
        assert_eq!(calls(|n| format!("c{}", n % 2)).await, (3, true));
        // A new cursor every time: stopped at the page budget.
        assert_eq!(calls(|n| format!("c{n}")).await, (MAX_PAGES, true));
    }
}
