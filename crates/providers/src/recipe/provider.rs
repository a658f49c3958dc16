//! A recipe as one more provider, on the same `Provider` trait as the built-in ones: polled by
//! reconciliation, its events through the one merge point. What this first version does: polling
//! (`fetch_status`); a recipe takes no webhooks yet (a request to its hook is refused as
//! unverified), has no cancel and no discovery (the trait's defaults say so).
//!
//! The user's recipes are the `*.toml` files of `<data-dir>/providers/`, read when the engine
//! starts (`load_dir`): a broken one is refused with its line and never stops the others.

use std::path::Path;

use async_trait::async_trait;
use reqwest::header::HeaderMap;

use super::Recipe;
use crate::job::JobEvent;
use crate::vocabulary::UnknownValue;
use crate::{FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, SecretKind, StatusAnswer, VerifyError};

/// The folder of a data dir that holds the user's recipes.
pub const RECIPES_DIR: &str = "providers";

pub struct RecipeProvider {
    recipe: Recipe,
    /// `shipped recipe`, or the user's recipe file.
    origin: String,
    /// The recipe's name, for the trait's `&'static str`: made once per recipe loaded.
    name: &'static str,
    ctx: ProviderContext,
}

impl RecipeProvider {
    pub fn new(recipe: Recipe, origin: String, ctx: ProviderContext) -> RecipeProvider {
        let name: &'static str = Box::leak(recipe.name.clone().into_boxed_str());
        RecipeProvider { recipe, origin, name, ctx }
    }

    pub fn recipe(&self) -> &Recipe {
        &self.recipe
    }

    /// The base URL in force: `NEVERMISS_<NAME>_BASE_URL` or the stored setting, else the recipe's.
    fn base_url(&self) -> String {
        self.ctx.settings.base_url(self.name).unwrap_or_else(|| self.recipe.base_url.clone())
    }

    /// The poll's request for `job_id`, its secrets filled in from the secret store.
    fn request(&self, job_id: &str) -> Result<reqwest::RequestBuilder, FetchError> {
        let base = self.base_url();
        let secret = |named: Option<&str>| match named {
            None => self.ctx.secrets.get(self.name, SecretKind::ApiKey),
            // Named secrets by reference come with the secret store's named entries (issue 32).
            Some(_) => None,
        };
        let url = self.recipe.poll.url_for(job_id).fill(&base, job_id, &secret).map_err(FetchError::Unpollable)?;
        let mut request = self.ctx.http.request(self.recipe.poll.method.clone(), url).timeout(self.ctx.request_timeout());
        for (name, value) in &self.recipe.poll.headers {
            let value = value.fill(&base, job_id, &secret).map_err(|why| {
                FetchError::NotConfigured(format!("{why} (NEVERMISS_{}_API_KEY)", self.name.to_ascii_uppercase().replace('-', "_")))
            })?;
            request = request.header(name.as_str(), value);
        }
        Ok(request)
    }
}

#[async_trait]
impl Provider for RecipeProvider {
    fn name(&self) -> &'static str {
        self.name
    }

    /// A recipe takes no webhooks yet: nothing can prove a request is its provider's.
    async fn verify(&self, _headers: &HeaderMap, _body: &[u8]) -> Result<(), VerifyError> {
        Err(VerifyError::Invalid)
    }

    fn parse(&self, _headers: &HeaderMap, _body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        Err(ParseError::malformed(format!("{} takes no webhooks", self.name), None, None))
    }

    async fn fetch_status(&self, job: &JobRef) -> Result<JobEvent, FetchError> {
        Ok(self.fetch_statuses(job).await?.events.swap_remove(0))
    }

    /// The poll: the answer read by the recipe; a value its table does not have is counted in
    /// `unknown_values` (as `<name>.status`) when the event is applied.
    async fn fetch_statuses(&self, job: &JobRef) -> Result<StatusAnswer, FetchError> {
        let response = self.request(&job.job_id)?.send().await.map_err(FetchError::from_reqwest)?;
        if !response.status().is_success() {
            return Err(FetchError::from_status(&response));
        }
        let bytes = crate::read_answer(response).await?;
        // No version in a generic answer: the poll's time orders its events.
        let read = self.recipe.read_answer(&job.job_id, &bytes, crate::job::now_ms()).map_err(FetchError::Malformed)?;
        let unknown = read.unknown.map(|value| UnknownValue {
            provider: self.name,
            field: "status",
            value: crate::vocabulary::counted_value(&value),
            job_id: job.job_id.clone(),
        });
        Ok(StatusAnswer::one(read.event).with_unknown(unknown))
    }

    fn webhook_expected(&self, _job_id: &str) -> bool {
        false
    }

    fn origin(&self) -> String {
        self.origin.clone()
    }
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
            Ok(recipe) => loaded.push(RecipeProvider::new(recipe, format!("recipe {shown}"), ctx.clone())),
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
