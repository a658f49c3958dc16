//! The user's recipes (`<data-dir>/providers/*.toml`, contract §7): loaded at start and
//! again whenever a file in that folder is added, changed or removed, without a restart. Each load
//! replaces the user's recipes whole (`Providers::set_user_recipes`): a fixed recipe is polled as it
//! now reads from its next round, a new one gets its poller at once, a removed one's poller ends. A
//! broken file is refused with its line (in the log, `nevermiss providers` and Settings) and never
//! stops the others.
//!
//! The folder is looked at every `CHECK_EVERY` (its files' names, sizes and modification times):
//! a few files, read only when one of them changed, and no watcher to lose events on a folder an
//! editor replaces files in.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::changes::Changes;
use crate::providers::{recipe, Provider, ProviderContext, Providers};
use crate::reconcile::Reconciler;

/// How often the folder is looked at.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What the folder holds, as far as a change goes: each recipe file's name, size and time.
type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

fn fingerprint(dir: &Path) -> Fingerprint {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Fingerprint = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "toml"))
        .map(|e| {
            let meta = e.metadata().ok();
            (e.path(), meta.as_ref().map_or(0, |m| m.len()), meta.and_then(|m| m.modified().ok()))
        })
        .collect();
    files.sort();
    files
}

/// Loads the user's recipes from `dir` into `providers`, saying in the log what each file gave. A
/// file that was loaded before and is refused now (a half-saved edit) keeps its last good
/// version in use, and its line says so: its jobs go on being polled while it is fixed.
pub fn load(dir: &Path, ctx: &ProviderContext, providers: &Providers) {
    let (recipes, refused) = recipe::load_dir(dir, ctx);
    let mut kept: Vec<Arc<dyn Provider>> = recipes.into_iter().map(|r| Arc::new(r) as Arc<dyn Provider>).collect();
    let before = providers.list();
    let refused: Vec<String> = refused
        .into_iter()
        .map(|line| {
            let last_good = before.iter().find(|p| {
                let file = p.origin().strip_prefix(recipe::USER_ORIGIN).map(str::to_owned);
                file.is_some_and(|f| line.starts_with(&format!("{f}:"))) && !kept.iter().any(|k| k.name() == p.name())
            });
            match last_good {
                Some(provider) => {
                    kept.push(provider.clone());
                    format!("{line} (the version loaded before is still in use)")
                }
                None => line,
            }
        })
        .collect();
    for line in &refused {
        tracing::warn!("a recipe was refused: {line}");
    }
    for provider in kept.iter().filter(|p| !before.iter().any(|b| Arc::ptr_eq(b, p))) {
        tracing::info!(provider = provider.name(), "a provider from a recipe");
    }
    providers.set_user_recipes(kept, refused);
}

/// Loads the recipes again whenever the folder changes, until `shutdown`.
pub async fn watch(
    dir: PathBuf,
    ctx: ProviderContext,
    providers: Providers,
    reconciler: Arc<Reconciler>,
    changes: Arc<Changes>,
    shutdown: CancellationToken,
) {
    let mut seen = fingerprint(&dir);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let now = fingerprint(&dir);
        if now == seen {
            continue;
        }
        seen = now;
        tracing::info!(dir = %dir.display(), "the recipes changed: loading them again");
        load(&dir, &ctx, &providers);
        reconciler.providers_changed();
        changes.metrics_changed();
    }
}
