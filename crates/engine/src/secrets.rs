//! Secrets (webhook secrets, API keys, tunnel tokens): read from `NEVERMISS_<PROVIDER>_<NAME>`
//! first, then from the secret store. The store is the OS keychain (Secret Service on Linux,
//! Keychain on macOS, Credential Manager on Windows) through the `keyring` crate; where there is
//! none (a headless Linux without a Secret Service), or it is there but cannot be used (no default
//! collection, a locked one, a refused write), it says so once and falls back to a 0600 JSON file
//! in the data dir; `retry_keychain` asks again when the user says so. A secret that is simply
//! not set is normal and logs nothing. Secrets never enter the database, the logs or an API answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;

/// The keychain service name all NeverMiss entries share.
pub const KEYCHAIN_SERVICE: &str = "nevermiss";
pub const FILE_NAME: &str = "secrets.json";
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

/// Which secret of a provider (the providers' own enum: they ask for their secrets by it).
use crate::providers::SecretKind;

/// The variable that overrides a provider's secret, e.g. `NEVERMISS_GENERIC_WEBHOOK_SECRET`.
pub fn env_var(provider: &str, kind: SecretKind) -> String {
    crate::providers::variable(provider, kind.suffix())
}

/// A provider's named secret (a recipe's `{secret.NAME}`): its variable,
/// `NEVERMISS_<PROVIDER>_<NAME>`, and its key in the store, `<provider>.<name>`.
pub fn provider_secret(provider: &str, name: &str) -> (String, String) {
    (crate::providers::variable(provider, &name.to_ascii_uppercase()), format!("{provider}.{name}"))
}

/// A secret that is not a provider's: `<service>.<field>` in the store, overridden by
/// `NEVERMISS_<SERVICE>_<FIELD>` (upper case, other characters as `_`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub service: String,
    pub field: &'static str,
}

impl Named {
    /// A channel's secret field (`NEVERMISS_CHANNEL_<NAME>_<FIELD>`).
    pub fn channel(channel: &str, field: &'static str) -> Named {
        Named { service: format!("channel.{channel}"), field }
    }

    /// The device token of the hub this app is connected to (`NEVERMISS_HUB_TOKEN`).
    pub fn hub_token() -> Named {
        Named { service: "hub".to_owned(), field: "token" }
    }

    fn key(&self) -> String {
        format!("{}.{}", self.service, self.field)
    }

    fn env_var(&self) -> String {
        let name: String = format!("{}_{}", self.service, self.field)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
            .collect();
        format!("NEVERMISS_{name}")
    }
}

/// Where stored secrets go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Keychain,
    /// The 0600 file, and why the keychain is not used.
    File {
        reason: String,
    },
}

pub struct Secrets {
    /// Where stored secrets go now: the keychain can become unusable (then the file takes over,
    /// said once) and usable again (`retry_keychain`, when the user asks).
    backend: RwLock<Backend>,
    /// Names this data dir in keychain entries, so two data dirs never share secrets.
    account_prefix: String,
    path: PathBuf,
    /// The file's secrets (also read with a keychain: secrets saved before one was available).
    file: RwLock<BTreeMap<String, String>>,
    /// Keychain answers, so a webhook does not cost a D-Bus round trip.
    keychain_cache: RwLock<BTreeMap<String, Option<String>>>,
}

impl Secrets {
    /// Opens the store: the keychain when one answers and can be used (unless
    /// `NEVERMISS_SECRET_STORE=file`), else the file. A keychain that is there but unusable (no
    /// default collection, a locked one) never stops the start: the file is used, said once.
    pub fn open(data_dir: &Path) -> Result<Secrets, SecretError> {
        let path = data_dir.join(FILE_NAME);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| SecretError::Corrupt { path: path.clone(), source })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(SecretError::Read { path, source }),
        };
        let backend = match std::env::var("NEVERMISS_SECRET_STORE").as_deref() {
            Ok("file") => {
                tracing::info!("secrets are kept in {} (NEVERMISS_SECRET_STORE=file)", path.display());
                Backend::File { reason: "NEVERMISS_SECRET_STORE=file".into() }
            }
            _ => match probe_keychain() {
                Ok(()) => {
                    tracing::debug!("secrets are kept in the OS keychain");
                    Backend::Keychain
                }
                Err(reason) => {
                    log_fallback(&reason, &path);
                    Backend::File { reason }
                }
            },
        };
        let canonical = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_owned());
        Ok(Secrets {
            backend: RwLock::new(backend),
            account_prefix: canonical.display().to_string(),
            path,
            file: RwLock::new(file),
            keychain_cache: RwLock::new(BTreeMap::new()),
        })
    }

    pub fn backend(&self) -> Backend {
        self.backend.read().unwrap().clone()
    }

    fn uses_keychain(&self) -> bool {
        *self.backend.read().unwrap() == Backend::Keychain
    }

    /// The keychain failed in use: the file takes over from now on, said once (in the log here,
    /// in the UI through `backend()`), until the user asks to retry.
    fn fall_back(&self, error: &keyring::Error) {
        let reason = format!("the OS keychain refused a secret: {}", one_line(&error.to_string()));
        let mut backend = self.backend.write().unwrap();
        if *backend == Backend::Keychain {
            log_fallback(&reason, &self.path);
            *backend = Backend::File { reason };
            self.keychain_cache.write().unwrap().clear();
        }
    }

    /// Asks the keychain again (the user unlocked it or set it up): uses it from now on if it
    /// can be used, else keeps the file with the new reason. Blocking (D-Bus): call it off the
    /// async runtime. `NEVERMISS_SECRET_STORE=file` is kept as it is.
    pub fn retry_keychain(&self) -> Backend {
        if std::env::var("NEVERMISS_SECRET_STORE").as_deref() == Ok("file") {
            return self.backend();
        }
        let probed = probe_keychain();
        let mut backend = self.backend.write().unwrap();
        match probed {
            Ok(()) => {
                if *backend != Backend::Keychain {
                    tracing::info!("the OS keychain can be used again: new secrets are kept there");
                }
                *backend = Backend::Keychain;
            }
            Err(reason) => {
                tracing::info!("the OS keychain still cannot be used ({reason}); secrets stay in {}", self.path.display());
                *backend = Backend::File { reason };
            }
        }
        let known: Vec<String> = {
            let mut cache = self.keychain_cache.write().unwrap();
            let known = cache.keys().cloned().collect();
            cache.clear();
            known
        };
        let backend = backend.clone();
        // Read again now (this call is already off the runtime) what was read before.
        if backend == Backend::Keychain {
            for key in &known {
                self.keychain_get(key);
            }
        }
        backend
    }

    /// Reads every secret of `services` (providers, tunnels) once, so that later reads are answered
    /// from memory: the keychain is a blocking D-Bus call, and the webhook path must not make one
    /// on an async worker. Blocking: call it off the async runtime (`spawn_blocking`), at start
    /// and after the keychain changed.
    pub fn warm(&self, services: &[&str]) {
        if !self.uses_keychain() {
            return;
        }
        for service in services {
            for kind in [SecretKind::ApiKey, SecretKind::WebhookSecret] {
                self.keychain_get(&key(service, kind));
            }
        }
    }

    /// The secret in force: the variable if set and not empty, else the stored one.
    pub fn get(&self, provider: &str, kind: SecretKind) -> Option<String> {
        self.get_key(&env_var(provider, kind), &key(provider, kind))
    }

    /// Whether a secret is in force, and where it comes from (`env`, `keychain`, `file`), for
    /// the UI, which never sees the secret itself.
    pub fn source(&self, provider: &str, kind: SecretKind) -> Option<&'static str> {
        self.source_key(&env_var(provider, kind), &key(provider, kind))
    }

    /// Stores (or with `None`, forgets) a secret, durably, before returning. A keychain that
    /// refuses it (locked, no default collection) hands over to the file, which keeps it.
    pub fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), SecretError> {
        self.set_key(&key(provider, kind), value)
    }

    /// A named secret of something other than a provider: a channel's field
    /// (`Named::channel("phone", "token")`), the hub's device token (`Named::HUB_TOKEN`).
    pub fn get_named(&self, named: &Named) -> Option<String> {
        self.get_key(&named.env_var(), &named.key())
    }

    pub fn source_named(&self, named: &Named) -> Option<&'static str> {
        self.source_key(&named.env_var(), &named.key())
    }

    pub fn set_named(&self, named: &Named, value: Option<&str>) -> Result<(), SecretError> {
        self.set_key(&named.key(), value)
    }

    /// Where a provider's named secret (a recipe's `{secret.NAME}`) comes from, if it is set.
    pub fn source_provider_secret(&self, provider: &str, name: &str) -> Option<&'static str> {
        let (variable, key) = provider_secret(provider, name);
        self.source_key(&variable, &key)
    }

    /// Stores (or, with `None`, forgets) a provider's named secret.
    pub fn set_provider_secret(&self, provider: &str, name: &str, value: Option<&str>) -> Result<(), SecretError> {
        self.set_key(&provider_secret(provider, name).1, value)
    }

    fn get_key(&self, env_var: &str, key: &str) -> Option<String> {
        if let Ok(value) = std::env::var(env_var) {
            if !value.is_empty() {
                return Some(value);
            }
        }
        if self.uses_keychain() {
            if let Some(value) = self.keychain_get(key) {
                return Some(value);
            }
        }
        self.file.read().unwrap().get(key).cloned()
    }

    fn source_key(&self, env_var: &str, key: &str) -> Option<&'static str> {
        if std::env::var(env_var).is_ok_and(|v| !v.is_empty()) {
            return Some("env");
        }
        if self.uses_keychain() && self.keychain_get(key).is_some() {
            return Some("keychain");
        }
        self.file.read().unwrap().contains_key(key).then_some("file")
    }

    fn set_key(&self, key: &str, value: Option<&str>) -> Result<(), SecretError> {
        let key = key.to_owned();
        if self.uses_keychain() {
            match self.keychain_set(&key, value) {
                Ok(()) => {
                    self.keychain_cache.write().unwrap().insert(key.clone(), value.map(str::to_owned));
                    // A copy from before the keychain was there must not outlive the change.
                    if self.file.read().unwrap().contains_key(&key) {
                        self.write_file(&key, None)?;
                    }
                    return Ok(());
                }
                Err(e) if is_unusable(&e) => self.fall_back(&e),
                Err(e) => return Err(SecretError::Keychain(one_line(&e.to_string()))),
            }
        }
        self.write_file(&key, value)
    }

    fn keychain_set(&self, key: &str, value: Option<&str>) -> Result<(), keyring::Error> {
        let entry = self.entry(key)?;
        match value {
            Some(v) => entry.set_password(v),
            None => match entry.delete_credential() {
                Ok(()) | Err(keyring::Error::NoEntry) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }

    fn write_file(&self, key: &str, value: Option<&str>) -> Result<(), SecretError> {
        let mut file = self.file.write().unwrap();
        match value {
            Some(v) => file.insert(key.to_owned(), v.to_owned()),
            None => file.remove(key),
        };
        write_private(&self.path, &serde_json::to_vec_pretty(&*file).expect("a map of strings serializes"))
            .map_err(|source| SecretError::Write { path: self.path.clone(), source })
    }

    fn entry(&self, key: &str) -> Result<keyring::Entry, keyring::Error> {
        keyring::Entry::new(KEYCHAIN_SERVICE, &format!("{key}@{}", self.account_prefix))
    }

    fn keychain_get(&self, key: &str) -> Option<String> {
        if let Some(cached) = self.keychain_cache.read().unwrap().get(key) {
            return cached.clone();
        }
        let value = match self.entry(key).and_then(|e| e.get_password()) {
            Ok(v) => Some(v),
            // Not set: normal, and nothing to say.
            Err(keyring::Error::NoEntry) => None,
            Err(e) if is_unusable(&e) => {
                self.fall_back(&e);
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %one_line(&e.to_string()), "cannot read a secret from the OS keychain");
                return None;
            }
        };
        self.keychain_cache.write().unwrap().insert(key.to_owned(), value.clone());
        value
    }
}

/// The providers read their secrets (and store Replicate's fetched signing secret) here.
impl crate::providers::Credentials for Secrets {
    fn get(&self, provider: &str, kind: SecretKind) -> Option<String> {
        Secrets::get(self, provider, kind)
    }

    fn set(&self, provider: &str, kind: SecretKind, value: Option<&str>) -> Result<(), crate::providers::StoreSecretError> {
        Secrets::set(self, provider, kind, value).map_err(|e| crate::providers::StoreSecretError(Box::new(e)))
    }

    fn get_named(&self, provider: &str, name: &str) -> Option<String> {
        let (variable, key) = provider_secret(provider, name);
        self.get_key(&variable, &key)
    }
}

/// Errors that say the keychain cannot be used at all now (not that one secret is bad).
fn is_unusable(e: &keyring::Error) -> bool {
    matches!(e, keyring::Error::NoStorageAccess(_) | keyring::Error::PlatformFailure(_) | keyring::Error::NoDefaultStore)
}

fn log_fallback(reason: &str, path: &Path) {
    tracing::warn!(
        "the OS keychain cannot be used ({reason}); secrets are kept in {} (readable by you only) until you retry the keychain (Settings, or POST /api/secrets/retry-keychain)",
        path.display()
    );
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Asks the OS keychain whether it is there and usable, without waiting long for it, and
/// without ever prompting: a Secret Service with no default collection, or a locked one, is
/// not usable (a write would fail, or pop up an unlock prompt nobody may be there to answer).
fn probe_keychain() -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let answer = probe_default_collection().and_then(|()| {
            keyring::Entry::new(KEYCHAIN_SERVICE, "availability-probe").and_then(|entry| entry.get_password().map(|_| ())).or_else(|e| {
                match e {
                    keyring::Error::NoEntry => Ok(()),
                    other => Err(one_line(&other.to_string())),
                }
            })
        });
        let _ = tx.send(answer);
    });
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(answer) => answer,
        Err(_) => Err("the OS keychain did not answer".into()),
    }
}

/// Linux and the BSDs: the Secret Service's default collection must exist and be unlocked.
#[cfg(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android"))))]
fn probe_default_collection() -> Result<(), String> {
    use secret_service::blocking::SecretService;
    use secret_service::{EncryptionType, Error};
    let service = SecretService::connect(EncryptionType::Plain)
        .map_err(|e| format!("no Secret Service on the session bus: {}", one_line(&e.to_string())))?;
    let collection = match service.get_default_collection() {
        Ok(collection) => collection,
        Err(Error::NoResult) => return Err("the Secret Service has no default collection (no login keyring is set up)".into()),
        Err(e) => return Err(format!("the Secret Service did not answer: {}", one_line(&e.to_string()))),
    };
    match collection.is_locked() {
        Ok(false) => Ok(()),
        Ok(true) => Err("the Secret Service's default collection (the login keyring) is locked".into()),
        Err(e) => Err(format!("the Secret Service did not answer: {}", one_line(&e.to_string()))),
    }
}

#[cfg(not(all(unix, not(any(target_os = "macos", target_os = "ios", target_os = "android")))))]
fn probe_default_collection() -> Result<(), String> {
    Ok(())
}

fn key(provider: &str, kind: SecretKind) -> String {
    format!("{provider}.{}", kind.suffix().to_ascii_lowercase())
}

/// Writes a file readable by its owner only (0600 on Unix, an owner-only ACL on Windows), atomically.
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
    // The mode above applies only to a file it creates: one left behind by a crash is set too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    // Windows: its owner's alone by its ACL, before anything is written in it (the rename
    // keeps it).
    #[cfg(windows)]
    crate::owner_only::set(&tmp, false)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}
