//! Secrets (webhook secrets, API keys): read from `NEVERMISS_<PROVIDER>_<NAME>` first, then from
//! the secret store. The store here is a 0600 JSON file in the data dir, outside the database;
//! secrets never enter the database, the logs or an API answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the secret store {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the secret store {path} is not valid JSON: {source}")]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot write the secret store {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Which secret of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    WebhookSecret,
    ApiKey,
}

impl SecretKind {
    fn suffix(self) -> &'static str {
        match self {
            SecretKind::WebhookSecret => "WEBHOOK_SECRET",
            SecretKind::ApiKey => "API_KEY",
        }
    }
}

/// The variable that overrides a provider's secret, e.g. `NEVERMISS_GENERIC_WEBHOOK_SECRET`.
pub fn env_var(provider: &str, kind: SecretKind) -> String {
    format!("NEVERMISS_{}_{}", provider.to_ascii_uppercase(), kind.suffix())
}

pub struct Secrets {
    path: PathBuf,
    stored: RwLock<BTreeMap<String, String>>,
}

impl Secrets {
    pub fn open(data_dir: &Path) -> Result<Secrets, SecretError> {
        let path = data_dir.join("secrets.json");
        let stored = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| SecretError::Corrupt {
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(SecretError::Read { path, source }),
        };
        Ok(Secrets {
            path,
            stored: RwLock::new(stored),
        })
    }

    /// The secret in force: the variable if set and not empty, else the stored one.
    pub fn get(&self, provider: &str, kind: SecretKind) -> Option<String> {
        if let Ok(value) = std::env::var(env_var(provider, kind)) {
            if !value.is_empty() {
                return Some(value);
            }
        }
        self.stored.read().unwrap().get(&key(provider, kind)).cloned()
    }

    /// Stores (or with `None`, forgets) a secret; written to disk before returning.
    pub fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), SecretError> {
        let mut stored = self.stored.write().unwrap();
        match value {
            Some(v) => stored.insert(key(provider, kind), v.to_owned()),
            None => stored.remove(&key(provider, kind)),
        };
        write_private(&self.path, &serde_json::to_vec_pretty(&*stored).expect("a map of strings serializes"))
            .map_err(|source| SecretError::Write {
                path: self.path.clone(),
                source,
            })
    }
}

fn key(provider: &str, kind: SecretKind) -> String {
    format!("{provider}.{}", kind.suffix().to_ascii_lowercase())
}

/// Writes a file readable by its owner only (0600 on Unix), atomically.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}
