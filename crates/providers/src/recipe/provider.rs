//! A recipe as one more provider, on the same `Provider` trait as the built-in ones: polled by
//! reconciliation, its events through the one merge point. Its webhooks (`[webhook]`, see
//! `webhook`) are verified by the recipe's scheme and read by its expressions; each delivery makes
//! the engine poll its job at once, and a URL-token sender's is only that hint. A JWT sender's
//! token is checked against its key set, held here (`jwt::KeyCache`), and its account against the
//! owner's secret. A recipe without `[webhook]` takes none (a request to its hook is refused as
//! unverified). Its cancel call (`[cancel]`) and its list of the account's jobs (`[discover]`)
//! are optional, as a built-in provider's are.
//!
//! The user's recipes are the `*.toml` files of `<data-dir>/providers/`, read when the engine
//! starts (`load_dir`): a broken one is refused with its line and never stops the others.

use std::path::Path;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use super::{Recipe, Wanted};
use crate::job::{JobEvent, JobState};
use crate::vocabulary::UnknownValue;
use crate::{
    BadJobId, CancelError, Discovered, FetchError, JobRef, ParseError, ParsedDelivery, PollTrace, Provider, ProviderContext, SecretKind,
    StatusAnswer, VerifyError,
};

/// What a webhook's value the recipe's table does not have is counted as (`<name>.webhook`).
pub const WEBHOOK_FIELD: &str = "webhook";

/// How a user's recipe's origin begins (then its file).
pub const USER_ORIGIN: &str = "recipe ";

/// The folder of a data dir that holds the user's recipes.
pub const RECIPES_DIR: &str = "providers";

/// What a poll got: a body to read, or a 404 that says the job ended unobserved.
enum Answered {
    Body(Vec<u8>),
    Gone,
}

pub struct RecipeProvider {
    recipe: Recipe,
    /// `shipped recipe`, or the user's recipe file.
    origin: String,
    /// The recipe's name, for the trait's `&'static str`: made once per recipe loaded.
    name: &'static str,
    ctx: ProviderContext,
    /// The key set of a `verify = "jwt"` sender.
    jwt_keys: super::jwt::KeyCache,
    /// The account `[discover.account]` found, with a digest of the key it was asked with.
    found_account: std::sync::Mutex<Option<(u64, String)>>,
}

impl RecipeProvider {
    pub fn new(recipe: Recipe, origin: String, ctx: ProviderContext) -> RecipeProvider {
        let name = interned(&recipe.name);
        RecipeProvider { recipe, origin, name, ctx, jwt_keys: Default::default(), found_account: Default::default() }
    }

    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// The base URL in force: `NEVERMISS_<NAME>_BASE_URL` or the stored setting, else the recipe's.
    fn base_url(&self) -> String {
        self.ctx.settings.base_url(self.name).unwrap_or_else(|| self.recipe.base_url.clone())
    }

    /// The poll's answer: its HTTP status and body, or that the provider no longer keeps a job it
    /// was seen to have (a 404 the recipe says means that).
    async fn answer(&self, job: &JobRef) -> Result<(u16, Answered), FetchError> {
        let response = self.request(&job.job_id)?.send().await.map_err(FetchError::from_reqwest)?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND && self.ended_unobserved(job) {
            return Ok((status.as_u16(), Answered::Gone));
        }
        if !status.is_success() {
            return Err(FetchError::from_status(&response));
        }
        Ok((status.as_u16(), Answered::Body(crate::read_answer(response).await?)))
    }

    /// What an answer says of `job`, read by the recipe.
    fn conclude(&self, job: &JobRef, answered: &Answered) -> Result<StatusAnswer, FetchError> {
        let bytes = match answered {
            Answered::Body(bytes) => bytes,
            Answered::Gone => {
                let mut event = JobEvent::new(self.name, &job.job_id, JobState::Ended, crate::job::now_ms());
                event.error = Some(format!(
                    "{} no longer keeps this job, last seen {}: it ended while NeverMiss was not looking, and its outcome is unknown",
                    self.name, job.state
                ));
                return Ok(StatusAnswer::one(event));
            }
        };
        // No version in a generic answer: the poll's time orders its events.
        let read = self.recipe.read_answer(&job.job_id, bytes, crate::job::now_ms()).map_err(FetchError::Malformed)?;
        let unknown = read.unknown.map(|value| UnknownValue {
            provider: self.name,
            field: "status",
            value: crate::vocabulary::counted_value(&value),
            job_id: job.job_id.clone(),
        });
        Ok(StatusAnswer::one(read.event).with_unknown(unknown))
    }

    /// Whether a 404 about `job` means it ended unobserved: the recipe says its provider forgets
    /// ended jobs, and this one was seen unfinished (a job never seen is an unknown job).
    fn ended_unobserved(&self, job: &JobRef) -> bool {
        self.recipe.poll.not_found == super::NotFound::Ended && matches!(job.state, JobState::Queued | JobState::Running)
    }

    /// What a `verify = "jwt"` token must name: its audience (this instance's webhook URL, when
    /// the recipe says `{webhook_url}`), and the owner's account the delivery must be for. Either
    /// missing is a configuration to fix: answered 503 (the sender retries), kept with why.
    fn jwt_expected(&self, jwt: &super::jwt::Jwt) -> Result<(String, String), VerifyError> {
        let audience = match &jwt.audience {
            super::jwt::Audience::Text(text) => text.clone(),
            super::jwt::Audience::WebhookUrl => {
                let public = std::env::var("NEVERMISS_PUBLIC_URL").ok().or_else(|| self.ctx.settings.get("tunnel.public_url"));
                let public = public.map(|u| u.trim().trim_end_matches('/').to_owned()).filter(|u| !u.is_empty()).ok_or_else(|| {
                    VerifyError::Unavailable(format!(
                        "{}'s tokens name this instance's webhook URL, and no public URL is set (NEVERMISS_PUBLIC_URL or the setting tunnel.public_url)",
                        self.name
                    ))
                })?;
                format!("{public}/hooks/{}", self.name)
            }
        };
        let owner = jwt
            .owner
            .fill("", "", &|wanted| self.value(wanted, None))
            .map_err(|e| VerifyError::Unavailable(format!("{}: {e}", self.name)))?;
        Ok((audience, owner))
    }

    /// The poll's request for `job_id`, its secrets filled in from the secret store.
    pub(crate) fn request(&self, job_id: &str) -> Result<reqwest::RequestBuilder, FetchError> {
        self.call(self.recipe.poll.method.clone(), self.recipe.poll.url_for(job_id), job_id)
    }

    /// A request to the provider's API (a poll, a cancel, a page of the list): `url` filled for
    /// `job_id` (empty for the list), with the poll's headers and their secrets.
    fn call(&self, method: reqwest::Method, url: &super::Template, job_id: &str) -> Result<reqwest::RequestBuilder, FetchError> {
        self.call_as(method, url, job_id, None)
    }

    /// `call`, with the account `{account}` names (the list's only).
    fn call_as(
        &self,
        method: reqwest::Method,
        url: &super::Template,
        job_id: &str,
        account: Option<&str>,
    ) -> Result<reqwest::RequestBuilder, FetchError> {
        let base = self.base_url();
        let value = |wanted: Wanted<'_>| self.value(wanted, account);
        let url = url.fill(&base, job_id, &value)?;
        let mut request = self.ctx.http.request(method, url).timeout(self.ctx.request_timeout());
        for (name, header) in &self.recipe.poll.headers {
            request = request.header(name.as_str(), header.fill(&base, job_id, &value)?);
        }
        Ok(request)
    }

    /// What a template asks for: a secret, or the account the caller found.
    fn value(&self, wanted: Wanted<'_>, account: Option<&str>) -> Result<String, FetchError> {
        match wanted {
            Wanted::ApiKey => self.secret(None),
            Wanted::Secret(name) => self.secret(Some(name)),
            Wanted::Account => account.map(str::to_owned).ok_or_else(|| self.no_account()),
        }
    }

    fn no_account(&self) -> FetchError {
        FetchError::NotConfigured(format!(
            "listing {name}'s jobs needs your {name} account: set {name}.account (Settings, `nevermiss settings set {name}.account ID` or {})",
            crate::variable(self.name, "ACCOUNT"),
            name = self.name
        ))
    }

    /// The account the list's URL names: the owner's setting, else what `[discover.account]`
    /// answers with the API key (asked once per key); `None` when the URL names none.
    async fn account(&self, discover: &super::discover::Discover) -> Result<Option<String>, FetchError> {
        if !discover.url.names_account() {
            return Ok(None);
        }
        if let Some(account) = self.ctx.settings.account(self.name) {
            return Ok(Some(account));
        }
        let lookup = discover.account.as_ref().ok_or_else(|| self.no_account())?;
        let key = {
            use std::hash::{Hash, Hasher};
            let mut digest = std::collections::hash_map::DefaultHasher::new();
            self.secret(None)?.hash(&mut digest);
            digest.finish()
        };
        if let Some((asked_with, account)) = self.found_account.lock().unwrap().as_ref() {
            if *asked_with == key {
                return Ok(Some(account.clone()));
            }
        }
        let response = self.call(reqwest::Method::GET, &lookup.url, "")?.send().await.map_err(FetchError::from_reqwest)?;
        if !response.status().is_success() {
            return Err(FetchError::from_status(&response));
        }
        let answer = crate::read_answer(response).await?;
        let account = lookup.read(&answer).map_err(|e| FetchError::Malformed(format!("who the key is: {e}")))?;
        *self.found_account.lock().unwrap() = Some((key, account.clone()));
        Ok(Some(account))
    }

    /// The API key (`None`) or a named secret, from the secret store or its variable. A missing
    /// one is a configuration to fix, named with where it is set.
    fn secret(&self, named: Option<&str>) -> Result<String, FetchError> {
        match named {
            None => self
                .ctx
                .secrets
                .get(self.name, SecretKind::ApiKey)
                .ok_or_else(|| FetchError::NotConfigured(format!("no API key ({} or Settings)", crate::variable(self.name, "API_KEY")))),
            Some(name) => self.ctx.secrets.get_named(self.name, name).ok_or_else(|| {
                FetchError::NotConfigured(format!(
                    "the secret {name} is not set ({} or {}.{name} in the secret store)",
                    crate::variable(self.name, &name.to_ascii_uppercase()),
                    self.name
                ))
            }),
        }
    }
}

#[async_trait]
impl Provider for RecipeProvider {
    fn name(&self) -> &'static str {
        self.name
    }

    /// By the recipe's scheme, with the provider's webhook secret; a recipe without `[webhook]`
    /// takes none: nothing can prove a request is its provider's.
    async fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let Some(webhook) = &self.recipe.webhook else { return Err(VerifyError::Invalid) };
        if let Some(jwt) = webhook.jwt() {
            let (audience, owner) = self.jwt_expected(jwt)?;
            return jwt.verify(self.name, &self.jwt_keys, &self.ctx.http, &audience, &owner, headers, body).await;
        }
        let secret = self.ctx.secrets.get(self.name, SecretKind::WebhookSecret).ok_or(VerifyError::NotConfigured(self.name))?;
        webhook.verify(self.name, &secret, headers, body)
    }

    fn webhook_intake(&self) -> crate::WebhookIntake {
        match &self.recipe.webhook {
            None => crate::WebhookIntake::None,
            Some(w) if w.takes_url_token() => crate::WebhookIntake::UrlToken,
            // Signed by the platform's published key set; the owner's account is a named secret.
            Some(w) if matches!(w.scheme, super::webhook::Scheme::Jwt(_)) => crate::WebhookIntake::PlatformKeys,
            Some(_) => crate::WebhookIntake::Signed,
        }
    }

    fn named_secrets(&self) -> Vec<String> {
        self.recipe.named_secrets()
    }

    fn takes_url_token(&self) -> bool {
        self.recipe.webhook.as_ref().is_some_and(|w| w.takes_url_token())
    }

    fn verify_url_token(&self, token: &str) -> Result<(), VerifyError> {
        let Some(webhook) = &self.recipe.webhook else { return Err(VerifyError::Invalid) };
        let secret = self.ctx.secrets.get(self.name, SecretKind::WebhookSecret).ok_or(VerifyError::NotConfigured(self.name))?;
        webhook.verify_token(&secret, token)
    }

    fn secret_format(&self) -> Option<crate::standard_webhooks::SecretFormat> {
        let standard = self.recipe.webhook.as_ref().is_some_and(|w| matches!(w.scheme, super::webhook::Scheme::StandardWebhooks));
        standard.then_some(crate::standard_webhooks::SecretFormat::Base64)
    }

    /// The delivery's ids by the recipe's expressions, and its state by the recipe's table when
    /// it reads one. A value the table does not have is counted in `unknown_values` (as
    /// `<name>.webhook`) and the delivery answered `ignored` (never a success: the job's poll
    /// says its state); a state expression that gives nothing is an event of a kind NeverMiss
    /// does not act on, ignored. A URL-token sender's delivery reads no state: a hint, the poll
    /// that follows says the state.
    fn parse(&self, headers: &HeaderMap, body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        let Some(webhook) = &self.recipe.webhook else {
            return Err(ParseError::malformed(format!("{} takes no webhooks", self.name), None, None));
        };
        let delivery = webhook.read(headers, body).map_err(|reason| ParseError::malformed(reason, None, None))?;
        let refused = |reason: String| ParseError::malformed(reason, Some(delivery.delivery_id.clone()), Some(delivery.job_id.clone()));
        let state = match (&webhook.state, &delivery.value) {
            (None, _) => JobState::Unknown,
            (Some(e), None) => {
                return Err(
                    refused(format!("{} webhook of a kind NeverMiss does not act on (`{}` gave nothing)", self.name, e.text())).unhandled()
                )
            }
            (Some(_), Some(value)) => match self.recipe.state_of(value) {
                Some(state) => state,
                None => {
                    let mut unknown = refused(format!("{} webhook value {value:?} is one NeverMiss does not know", self.name)).unhandled();
                    unknown.unknown = Some(Box::new(UnknownValue {
                        provider: self.name,
                        field: WEBHOOK_FIELD,
                        value: crate::vocabulary::counted_value(value),
                        job_id: delivery.job_id.clone(),
                    }));
                    return Err(unknown);
                }
            },
        };
        let event = JobEvent::new(self.name, &delivery.job_id, state, crate::job::now_ms());
        Ok(ParsedDelivery { delivery_id: delivery.delivery_id, event })
    }

    /// Every delivery is thin (and a URL-token sender's only a hint): the poll brings the result,
    /// the times and the error.
    fn poll_after_push(&self, _event: &JobEvent) -> bool {
        true
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        Ok(self.fetch_statuses(job).await?.events.swap_remove(0))
    }

    /// The poll: the answer read by the recipe; a value its table does not have is counted in
    /// `unknown_values` (as `<name>.status`) when the event is applied.
    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        let (_, answered) = self.answer(job).await?;
        self.conclude(job, &answered)
    }

    /// The poll shown: the request, the status, each expression's output and the conclusion.
    async fn trace_poll(&self, job: &JobRef) -> PollTrace {
        let url = self.recipe.poll.url.fill(&self.base_url(), &job.job_id, &|_| Err(FetchError::Unpollable(String::new())));
        let request = format!("{} {}", self.recipe.poll.method, url.unwrap_or_else(|e| format!("(no URL: {e})")));
        match self.answer(job).await {
            Ok((status, answered)) => PollTrace {
                request,
                status: Some(status),
                reads: match &answered {
                    Answered::Body(bytes) => self.recipe.trace(bytes),
                    Answered::Gone => Vec::new(),
                },
                conclusion: crate::conclusion(&self.conclude(job, &answered)),
            },
            Err(e) => PollTrace { request, status: None, reads: Vec::new(), conclusion: crate::conclusion(&Err(e)) },
        }
    }

    /// When the recipe takes webhooks and their secret is set: an end learned by polling is then
    /// a rescue.
    fn webhook_expected(&self, _job_id: &str) -> bool {
        self.recipe.webhook.as_ref().is_some_and(|w| w.jwt().is_some())
            || (self.recipe.webhook.is_some() && self.ctx.has_webhook_secret(self.name))
    }

    fn origin(&self) -> String {
        self.origin.clone()
    }

    fn check_job_id(&self, job_id: &str) -> Result<(), BadJobId> {
        self.recipe.check_job_id(job_id)
    }

    /// The recipe's cancel call for the job's kind, sent with the poll's headers.
    async fn cancel(&self, job: &JobRef) -> Result<String, CancelError> {
        let cancel = self.recipe.cancel.as_ref().ok_or_else(CancelError::no_cancel)?;
        let url = cancel.url_for(&job.job_id).ok_or_else(CancelError::no_cancel)?;
        let request = self.call(cancel.method.clone(), url, &job.job_id).map_err(CancelError::NotAsked)?;
        crate::send_cancel(request).await
    }

    fn can_discover(&self) -> bool {
        self.recipe.discover.is_some()
    }

    fn discovery_needs_account_setting(&self) -> bool {
        self.recipe.discover.as_ref().is_some_and(|d| d.needs_account_setting())
    }

    /// The recipe's list, page by page (the next page's cursor in the query parameter the recipe
    /// names), each job read by `[read]`.
    async fn discover(&self, since_ms: i64, max_jobs: usize) -> Result<Discovered, FetchError> {
        let discover = self.recipe.discover.as_ref().ok_or(FetchError::NotSupported(self.name))?;
        let account = self.account(discover).await?;
        crate::discovery::walk(self.name, since_ms, max_jobs, |cursor| {
            let request =
                self.call_as(reqwest::Method::GET, &discover.url, "", account.as_deref()).map(|request| match (&discover.next, cursor) {
                    (Some((_, param)), Some(cursor)) => request.query(&[(param.as_str(), cursor)]),
                    _ => request,
                });
            async move {
                let response = request?.send().await.map_err(FetchError::from_reqwest)?;
                if !response.status().is_success() {
                    return Err(FetchError::from_status(&response));
                }
                let page = crate::read_answer(response).await?;
                discover.read_page(&self.recipe, &page, crate::job::now_ms()).map_err(FetchError::Malformed)
            }
        })
        .await
    }
}

/// `name` as the `&'static str` the trait names a provider by: made once per name, however often
/// the recipes are loaded again.
fn interned(name: &str) -> &'static str {
    static NAMES: std::sync::Mutex<std::collections::BTreeSet<&'static str>> = std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut names = NAMES.lock().unwrap();
    if let Some(known) = names.get(name) {
        return known;
    }
    let made: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(made);
    made
}

/// The recipes of `dir` (`<data-dir>/providers`), each a provider, and one line per file refused
/// (a broken recipe never stops the others; a missing folder is no recipe).
pub fn load_dir(dir: &Path, ctx: &ProviderContext) -> (Vec<RecipeProvider>, Vec<String>) {
    let mut loaded = Vec::new();
    let mut refused = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return (loaded, refused) };
    let mut paths: Vec<_> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "toml")).collect();
    paths.sort();
    for path in paths {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                refused.push(format!("{shown}: cannot be read ({e})"));
                continue;
            }
        };
        match Recipe::parse(&shown, &text) {
            Ok(recipe) if loaded.iter().any(|p: &RecipeProvider| p.recipe.name == recipe.name) => {
                refused.push(format!("{shown}: name: another recipe is already named {:?}", recipe.name))
            }
            Ok(recipe) => loaded.push(RecipeProvider::new(recipe, format!("{USER_ORIGIN}{shown}"), ctx.clone())),
            Err(e) => refused.push(e.to_string()),
        }
    }
    (loaded, refused)
}

/// The recipes shipped with the app, each a provider. A shipped recipe that does not read is a
/// bug of this build: the unit tests read every one.
pub fn shipped(ctx: &ProviderContext) -> Vec<RecipeProvider> {
    super::SHIPPED
        .iter()
        .filter_map(|(file, text)| match Recipe::parse_shipped(file, text) {
            Ok(recipe) => Some(RecipeProvider::new(recipe, "shipped recipe".to_owned(), ctx.clone())),
            Err(e) => {
                tracing::error!("a shipped recipe was refused: {e}");
                None
            }
        })
        .collect()
}
