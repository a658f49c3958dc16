//! Secrets (webhook secrets, API keys, tunnel tokens): read from `NEVERMISS_<PROVIDER>_<NAME>`
//! first, then from the secret store. The store is the OS keychain (Secret Service on Linux,
//! Keychain on macOS, Credential Manager on Windows) through the `keyring` crate; where there is
//! none (a headless Linux without a Secret Service) it says so plainly and falls back to a 0600
//! JSON file in the data dir. Secrets never enter the database, the logs or an API answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;

/// The keychain service name all NeverMiss entries share.
pub const KEYCHAIN_SERVICE: &str = "nevermiss";
const FILE_NAME: &str = "secrets.json";
/// How long the keychain may take to answer whether it is there at all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read the secret store {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the secret store {path} is not valid JSON: {source}")]
    Corrupt { path: PathBuf, source: serde_json::Error },
    #[error("cannot write the secret store {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("the OS keychain refused the secret: {0}")]
    Keychain(String),
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

/// Where stored secrets go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Keychain,
    /// The 0600 file, and why the keychain is not used.
    File { reason: String },
}

pub struct Secrets {
    backend: Backend,
    /// Names this data dir in keychain entries, so two data dirs never share secrets.
    account_prefix: String,
    path: PathBuf,
    /// The file's secrets (also read with a keychain: secrets saved before one was available).
    file: RwLock<BTreeMap<String, String>>,
    /// Keychain answers, so a webhook does not cost a D-Bus round trip.
    keychain_cache: RwLock<BTreeMap<String, Option<String>>>,
}

impl Secrets {
    /// Opens the store: the keychain when one answers (unless `NEVERMISS_SECRET_STORE=file`),
    /// else the file.
    pub fn open(data_dir: &Path) -> Result<Secrets, SecretError> {
        let path = data_dir.join(FILE_NAME);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| SecretError::Corrupt {
                path: path.clone(),
                source,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(SecretError::Read { path, source }),
        };
        let backend = match std::env::var("NEVERMISS_SECRET_STORE").as_deref() {
            Ok("file") => Backend::File {
                reason: "NEVERMISS_SECRET_STORE=file".into(),
            },
            _ => probe_keychain(),
        };
        match &backend {
            Backend::Keychain => tracing::debug!("secrets are kept in the OS keychain"),
            Backend::File { reason } => tracing::info!(
                "no OS keychain ({reason}); secrets are kept in {} (readable by you only)",
                path.display()
            ),
        }
        let canonical = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_owned());
        Ok(Secrets {
            backend,
            account_prefix: canonical.display().to_string(),
            path,
            file: RwLock::new(file),
            keychain_cache: RwLock::new(BTreeMap::new()),
        })
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The secret in force: the variable if set and not empty, else the stored one.
    pub fn get(&self, provider: &str, kind: SecretKind) -> Option<String> {
        if let Ok(value) = std::env::var(env_var(provider, kind)) {
            if !value.is_empty() {
                return Some(value);
            }
        }
        let key = key(provider, kind);
        if self.backend == Backend::Keychain {
            if let Some(value) = self.keychain_get(&key) {
                return Some(value);
            }
        }
        self.file.read().unwrap().get(&key).cloned()
    }

    /// Whether a secret is in force, and where it comes from (`env`, `keychain`, `file`), for
    /// the UI, which never sees the secret itself.
    pub fn source(&self, provider: &str, kind: SecretKind) -> Option<&'static str> {
        if std::env::var(env_var(provider, kind)).is_ok_and(|v| !v.is_empty()) {
            return Some("env");
        }
        let key = key(provider, kind);
        if self.backend == Backend::Keychain && self.keychain_get(&key).is_some() {
            return Some("keychain");
        }
        self.file.read().unwrap().contains_key(&key).then_some("file")
    }

    /// Stores (or with `None`, forgets) a secret, durably, before returning.
    pub fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), SecretError> {
        let key = key(provider, kind);
        if self.backend == Backend::Keychain {
            let entry = self.entry(&key)?;
            match value {
                Some(v) => entry.set_password(v).map_err(|e| SecretError::Keychain(e.to_string()))?,
                None => match entry.delete_credential() {
                    Ok(()) | Err(keyring::Error::NoEntry) => {}
                    Err(e) => return Err(SecretError::Keychain(e.to_string())),
                },
            }
            self.keychain_cache.write().unwrap().insert(key.clone(), value.map(str::to_owned));
            // A copy from before the keychain was there must not outlive the change.
            if self.file.read().unwrap().contains_key(&key) {
                self.write_file(&key, None)?;
            }
            return Ok(());
        }
        self.write_file(&key, value)
    }

    fn write_file(&self, key: &str, value: Option<&str>) -> Result<(), SecretError> {
        let mut file = self.file.write().unwrap();
        match value {
            Some(v) => file.insert(key.to_owned(), v.to_owned()),
            None => file.remove(key),
        };
        write_private(&self.path, &serde_json::to_vec_pretty(&*file).expect("a map of strings serializes"))
            .map_err(|source| SecretError::Write {
                path: self.path.clone(),
                source,
            })
    }

    fn entry(&self, key: &str) -> Result<keyring::Entry, SecretError> {
        keyring::Entry::new(KEYCHAIN_SERVICE, &format!("{key}@{}", self.account_prefix))
            .map_err(|e| SecretError::Keychain(e.to_string()))
    }

    fn keychain_get(&self, key: &str) -> Option<String> {
        if let Some(cached) = self.keychain_cache.read().unwrap().get(key) {
            return cached.clone();
        }
        let value = match self.entry(key).and_then(|e| e.get_password().map_err(|e| SecretError::Keychain(e.to_string()))) {
            Ok(v) => Some(v),
            Err(SecretError::Keychain(reason)) if reason.contains("No matching entry") => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a secret from the OS keychain");
                return None;
            }
        };
        self.keychain_cache.write().unwrap().insert(key.to_owned(), value.clone());
        value
    }
}

/// Asks the OS keychain whether it is there, without waiting long for it.
fn probe_keychain() -> Backend {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let answer = keyring::Entry::new(KEYCHAIN_SERVICE, "availability-probe")
            .and_then(|entry| entry.get_password().map(|_| ()))
            .or_else(|e| match e {
                keyring::Error::NoEntry => Ok(()),
                other => Err(other),
            });
        let _ = tx.send(answer.map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(Ok(())) => Backend::Keychain,
        Ok(Err(reason)) => Backend::File { reason },
        Err(_) => Backend::File {
            reason: "the OS keychain did not answer".into(),
        },
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
