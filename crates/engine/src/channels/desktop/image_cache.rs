//! Local copies of results' images, for the freedesktop `image-path` hint (which takes a
//! `file://` URI, not an `https` one). One GET per image URL, bounded in time and size; a copy is
//! named by the hash of its URL, so a repeat of a notification reuses it; the folder keeps the
//! newest `KEPT` copies. Anything that goes wrong (no answer in time, not an image, too large, a
//! full disk, an address refused) leaves the notification without its image, never without the
//! notification.
//!
//! A result's image URL is written by whoever sent the result (a provider, or anyone who got a
//! webhook accepted), so it is fetched as a stranger's link:
//! - only over `https`, and only from public addresses: never loopback, private, link-local
//!   (the cloud metadata address 169.254.169.254 among them), CGNAT, unique-local, multicast or
//!   unspecified ones (`is_public`). An IP-literal host is checked before anything is sent; a
//!   name is checked where it is resolved (`PublicOnly`, the client's DNS resolver), so the check
//!   holds for every connection the client makes, redirects included, and for the address
//!   actually connected to (no second look-up a DNS answer could change in between);
//! - at most `MAX_REDIRECTS` redirects, each to `https` and, for an IP literal, a public one;
//!   no proxy (a proxy would connect in our place, to addresses this check never sees);
//! - the one exception is the user's own configuration: an image at the origin of the job's
//!   provider's configured base URL (`NEVERMISS_<PROVIDER>_BASE_URL` or the stored setting,
//!   `Settings::base_url`) is fetched as configured, since the user pointed NeverMiss there
//!   (a local stand-in, a self-hosted API), and then without following any redirect.
//!
//! The folder is the user's own cache dir (`~/.cache/nevermiss/notification-images`), created
//! 0700 and set back to 0700 if it is not, and refused if it is a symbolic link or not owned by
//! this user. Each copy is written to a new file (`O_CREAT|O_EXCL|O_NOFOLLOW`, 0600) under a
//! random name, then renamed into place: nothing is ever written through a link planted in it.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use sha2::{Digest, Sha256};

/// Longest wait for an image, its body included: the notification is shown after it.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest image copied (counted as it streams in; a declared length is never trusted).
pub const MAX_BYTES: usize = 4 * 1024 * 1024;
/// Copies kept in the folder (the oldest are removed).
const KEPT: usize = 64;
/// Redirects followed for a public image.
const MAX_REDIRECTS: usize = 3;
/// The folder's name in the user's cache dir.
const FOLDER: &str = "notification-images";

/// Why an image URL is not fetched, decided before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("not a URL")]
    NotAUrl,
    #[error("only https images are fetched")]
    NotHttps,
    #[error("{0} is not a public address")]
    NotPublic(IpAddr),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
}

/// Whether `ip` is a public (globally routed unicast) address: the only kind a stranger's image
/// URL may reach. A pure function of the address; IPv4 inside IPv6 (mapped, NAT64, 6to4) is
/// judged as the IPv4 address it carries.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // "this network", 0.0.0.0 (unspecified) included
        || a == 10 // private
        || a == 127 // loopback
        || (a == 100 && (64..128).contains(&b)) // CGNAT (100.100.100.200: Alibaba's metadata)
        || (a == 169 && b == 254) // link-local (169.254.169.254: the cloud metadata address)
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments (192.0.0.192: Oracle's metadata)
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 192 && b == 88 && c == 99) // 6to4 relays
        || (a == 192 && b == 168) // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113) // documentation
        || a >= 224; // multicast, reserved, broadcast
    !refused
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // NAT64 (64:ff9b::/96): the IPv4 address in the last 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8));
    }
    // 6to4 (2002::/16): the IPv4 address in bits 16 to 48.
    if s[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    let refused = s[..6] == [0; 6] // ::, ::1 and the deprecated IPv4-compatible ::/96
        || s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 // NAT64 local use (64:ff9b:1::/48)
        || s[..4] == [0x100, 0, 0, 0] // discard
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7 (fd00:ec2::254: AWS's metadata)
        || (s[0] & 0xffc0) == 0xfe80 // link-local
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] < 0x200) // IETF protocol assignments (Teredo and others)
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation
        || (s[0] == 0x3fff && s[1] < 0x1000); // documentation (3fff::/20)
    !refused
}

/// The IP address a URL's host is written as, if it is one (`[::1]` without its brackets; the
/// URL parser has already turned `2130706433` and `127.1` into `127.0.0.1`).
fn literal_host(url: &Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// What may be asked of a stranger's URL, on the first request and on each redirect: `https`,
/// and a public address when the host is an IP literal (a name is checked where it resolves).
fn check_public(url: &Url) -> Result<(), Refusal> {
    if url.scheme() != "https" {
        return Err(Refusal::NotHttps);
    }
    match literal_host(url) {
        Some(ip) if !is_public(ip) => Err(Refusal::NotPublic(ip)),
        _ => Ok(()),
    }
}

/// Whether the `hops`th redirect (from 1), to `url`, is followed.
fn check_redirect(url: &Url, hops: usize) -> Result<(), Refusal> {
    if hops > MAX_REDIRECTS {
        return Err(Refusal::TooManyRedirects);
    }
    check_public(url)
}

/// The DNS resolver of the client that fetches strangers' images: the system's answer with every
/// address that is not public dropped, and an error when none is left. Hyper connects only to
/// what it returns, on the first request and on every redirect.
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = all.iter().copied().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> =
                    format!("{host} resolves to no public address ({} refused)", all.len()).into();
                return Err(err);
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An image URL the user's configuration allows as it is: the origin (scheme, host, port) of a
/// configured provider base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredOrigin(String);

impl ConfiguredOrigin {
    /// The origin of `base_url` (a provider's configured base URL), if it parses.
    pub fn of(base_url: &str) -> Option<ConfiguredOrigin> {
        let url = Url::parse(base_url).ok()?;
        Some(ConfiguredOrigin(url.origin().ascii_serialization())).filter(|o| o.0 != "null")
    }

    fn allows(&self, url: &Url) -> bool {
        url.origin().ascii_serialization() == self.0
    }
}

pub struct ImageCache {
    /// `None`: no cache dir is known (no home dir); notifications go without images.
    dir: Option<PathBuf>,
    /// For strangers' URLs: https only, public addresses only, few redirects, no proxy.
    public: reqwest::Client,
    /// For the user's configured origins: as configured, no redirects.
    configured: reqwest::Client,
}

#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("refused: {0}")]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Failed(String),
}

impl ImageCache {
    /// The cache in the user's own cache dir (`$XDG_CACHE_HOME/nevermiss/notification-images`,
    /// `~/.cache/...` by default). Without a home dir there is no cache: no images.
    pub fn in_user_cache_dir() -> ImageCache {
        let dir = directories::ProjectDirs::from("", "", "nevermiss").map(|dirs| dirs.cache_dir().join(FOLDER));
        if dir.is_none() {
            tracing::info!("no home directory: desktop notifications go without results' images");
        }
        ImageCache::at(dir)
    }

    pub fn at(dir: Option<PathBuf>) -> ImageCache {
        let public = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .https_only(true)
            .no_proxy()
            .dns_resolver(Arc::new(PublicOnly))
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let hops = attempt.previous().len();
                match check_redirect(attempt.url(), hops) {
                    Ok(()) => attempt.follow(),
                    Err(refusal) => attempt.error(refusal),
                }
            }))
            .build();
        let configured = reqwest::Client::builder().timeout(FETCH_TIMEOUT).no_proxy().redirect(reqwest::redirect::Policy::none()).build();
        match (public, configured) {
            (Ok(public), Ok(configured)) => ImageCache { dir, public, configured },
            // No TLS backend: no images rather than an unguarded client.
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "cannot build the image fetcher: desktop notifications go without images");
                ImageCache { dir: None, public: reqwest::Client::new(), configured: reqwest::Client::new() }
            }
        }
    }

    /// The local copy of the image at `url`, fetched now if there is none; `None` when it cannot
    /// be had (logged). `configured`: the origin the user pointed the job's provider at.
    pub async fn local_copy(&self, url: &str, configured: Option<&ConfiguredOrigin>) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let name = hex::encode(Sha256::digest(url.as_bytes()));
        let path = dir.join(&name);
        // A copy made earlier: a regular file of ours (a link is never followed, and is replaced).
        if tokio::fs::symlink_metadata(&path).await.is_ok_and(|m| m.file_type().is_file()) {
            return Some(path);
        }
        match self.fetch(url, configured).await {
            Ok(bytes) => {
                let dir = dir.clone();
                match tokio::task::spawn_blocking(move || store(&dir, &name, &bytes)).await {
                    Ok(Ok(())) => Some(path),
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "cannot keep a notification image");
                        None
                    }
                    Err(_) => None,
                }
            }
            Err(why) => {
                tracing::debug!(why = %why, "the notification goes without its image");
                None
            }
        }
    }

    async fn fetch(&self, url: &str, configured: Option<&ConfiguredOrigin>) -> Result<Vec<u8>, FetchError> {
        let parsed = Url::parse(url).map_err(|_| Refusal::NotAUrl)?;
        let client = if configured.is_some_and(|c| c.allows(&parsed)) {
            &self.configured
        } else {
            check_public(&parsed)?;
            &self.public
        };
        let failed = |e: reqwest::Error| {
            let e = e.without_url();
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            FetchError::Failed(text)
        };
        let mut response = client.get(parsed).send().await.map_err(failed)?;
        if !response.status().is_success() {
            return Err(FetchError::Failed(format!("the image URL answered {}", response.status())));
        }
        let content_type = response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !content_type.starts_with("image/") {
            return Err(FetchError::Failed(format!("not an image ({content_type:?})")));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if bytes.len() + chunk.len() > MAX_BYTES {
                return Err(FetchError::Failed(format!("the image is over {MAX_BYTES} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

/// Makes `dir` ready to write in: created 0700 (its parents too when missing), set back to 0700
/// if it is not; refused if it is a symbolic link, not a directory, or not this user's.
fn own_private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // Opened without following a link, then checked and fixed through the open handle.
    let handle =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_DIRECTORY).open(dir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("{} is not a directory of its own (a symbolic link?): {e}", dir.display()))
        })?;
    let meta = handle.metadata()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("{} is not this user's", dir.display())));
    }
    if meta.mode() & 0o777 != 0o700 {
        handle.set_permissions(std::fs::Permissions::from_mode(0o700))?;
        tracing::info!(dir = %dir.display(), "the notification image folder was open to others: set to 0700");
    }
    Ok(())
}

/// Writes a copy (whole or not at all: written to a new file, then renamed over the name) and
/// trims the folder.
fn store(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    own_private_dir(dir)?;
    let partial = dir.join(format!(".{name}.{}.partial", hex::encode(rand::random::<[u8; 8]>())));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true) // O_CREAT|O_EXCL: never an existing file, never through a link
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(&partial)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    // A link or a file planted at the copy's name is replaced, never written through.
    if let Err(e) = written.and_then(|()| std::fs::rename(&partial, dir.join(name))) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    trim(dir, KEPT)
}

/// Removes the oldest files of `dir` beyond `kept` (links are removed, not followed).
fn trim(dir: &Path, kept: usize) -> std::io::Result<()> {
    let mut files: Vec<(std::time::SystemTime, PathBuf)> =
        std::fs::read_dir(dir)?.filter_map(Result::ok).filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path()))).collect();
    if files.len() <= kept {
        return Ok(());
    }
    files.sort();
    for (_, path) in &files[..files.len() - kept] {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_folder_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10 {
            let path = dir.path().join(format!("f{i}"));
            std::fs::write(&path, b"x").unwrap();
            let at = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + i);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(at).unwrap();
        }
        trim(dir.path(), 4).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["f6", "f7", "f8", "f9"]);
    }

    #[test]
    fn only_public_addresses_are_public() {
        let refused = [
            "0.0.0.0",
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.100.100.200",
            "192.0.0.192",
            "198.18.0.1",
            "192.0.2.1",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ];
        for text in refused {
            assert!(!is_public(ip(text)), "{text} was taken for public");
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "192.169.0.1",
            "223.255.255.254",
            "2606:4700:4700::1111",
            "2a00:1450:4007:80e::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for text in public {
            assert!(is_public(ip(text)), "{text} was refused");
        }
    }

    #[test]
    fn a_strangers_url_must_be_https_and_not_a_private_literal() {
        let check = |u: &str| check_public(&Url::parse(u).unwrap());
        assert_eq!(check("http://images.example.com/a.png"), Err(Refusal::NotHttps));
        assert_eq!(check("http://169.254.169.254/latest/meta-data/"), Err(Refusal::NotHttps));
        assert_eq!(check("ftp://example.com/a.png"), Err(Refusal::NotHttps));
        assert_eq!(check("https://169.254.169.254/latest/meta-data/"), Err(Refusal::NotPublic(ip("169.254.169.254"))));
        assert_eq!(check("https://10.0.0.1/a.png"), Err(Refusal::NotPublic(ip("10.0.0.1"))));
        assert_eq!(check("https://[::1]:8443/a.png"), Err(Refusal::NotPublic(ip("::1"))));
        assert_eq!(check("https://[fd00:ec2::254]/"), Err(Refusal::NotPublic(ip("fd00:ec2::254"))));
        assert_eq!(check("https://[::ffff:7f00:1]/a.png"), Err(Refusal::NotPublic(ip("::ffff:127.0.0.1"))));
        // Other spellings of loopback, as the URL parser reads them.
        assert_eq!(check("https://2130706433/a.png"), Err(Refusal::NotPublic(ip("127.0.0.1"))));
        assert_eq!(check("https://127.1/a.png"), Err(Refusal::NotPublic(ip("127.0.0.1"))));
        assert_eq!(check("https://0x7f.1/a.png"), Err(Refusal::NotPublic(ip("127.0.0.1"))));
        assert_eq!(check("https://images.example.com/a.png"), Ok(()));
        assert_eq!(check("https://8.8.8.8/a.png"), Ok(()));
    }

    #[test]
    fn redirects_are_few_and_each_is_checked() {
        let check = |u: &str, hops| check_redirect(&Url::parse(u).unwrap(), hops);
        assert_eq!(check("https://cdn.example.com/a.png", 1), Ok(()));
        assert_eq!(check("https://cdn.example.com/a.png", MAX_REDIRECTS), Ok(()));
        assert_eq!(check("https://cdn.example.com/a.png", MAX_REDIRECTS + 1), Err(Refusal::TooManyRedirects));
        assert_eq!(check("http://cdn.example.com/a.png", 1), Err(Refusal::NotHttps));
        assert_eq!(check("https://127.0.0.1/a.png", 1), Err(Refusal::NotPublic(ip("127.0.0.1"))));
        assert_eq!(check("https://169.254.169.254/", 1), Err(Refusal::NotPublic(ip("169.254.169.254"))));
    }

    #[test]
    fn a_configured_origin_is_the_base_urls_scheme_host_and_port() {
        let origin = ConfiguredOrigin::of("http://127.0.0.1:9000/v1").unwrap();
        assert!(origin.allows(&Url::parse("http://127.0.0.1:9000/out.png").unwrap()));
        assert!(!origin.allows(&Url::parse("http://127.0.0.1:9001/out.png").unwrap()));
        assert!(!origin.allows(&Url::parse("https://127.0.0.1:9000/out.png").unwrap()));
        assert!(!origin.allows(&Url::parse("http://localhost:9000/out.png").unwrap()));
        assert!(ConfiguredOrigin::of("not a url").is_none());
    }

    /// A loopback listener that records the peers of the connections it accepts.
    async fn recording_listener(addr: &str) -> Option<(SocketAddr, Arc<std::sync::Mutex<Vec<SocketAddr>>>)> {
        let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
        let at = listener.local_addr().unwrap();
        let peers: Arc<std::sync::Mutex<Vec<SocketAddr>>> = Arc::default();
        let seen = peers.clone();
        tokio::spawn(async move {
            while let Ok((_socket, peer)) = listener.accept().await {
                seen.lock().unwrap().push(peer);
            }
        });
        Some((at, peers))
    }

    /// Connects to `at` once and waits until the listener has accepted that connection (accepts
    /// come in order: whatever connected before has been accepted too); the peers it saw.
    async fn peers_after_own_connection(at: SocketAddr, peers: &std::sync::Mutex<Vec<SocketAddr>>) -> Vec<SocketAddr> {
        let own = tokio::net::TcpStream::connect(at).await.unwrap();
        let me = own.local_addr().unwrap();
        while !peers.lock().unwrap().contains(&me) {
            tokio::task::yield_now().await;
        }
        peers.lock().unwrap().iter().copied().filter(|p| *p != me).collect()
    }

    /// Private and metadata addresses are refused before any connection: the refusal is the
    /// check's (`FetchError::Refused`), not a failed connection's. Loopback ones are listened on,
    /// and no connection arrives.
    #[tokio::test]
    async fn private_and_metadata_urls_are_refused_before_connecting() {
        let cache = ImageCache::at(None);
        let (v4, v4_peers) = recording_listener("127.0.0.1:0").await.unwrap();
        let mut urls = vec![
            "https://169.254.169.254/latest/meta-data/iam/".to_owned(),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "https://10.0.0.1/a.png".to_owned(),
            "https://[fd00:ec2::254]/latest/meta-data/".to_owned(),
            "https://100.100.100.200/a.png".to_owned(),
            format!("https://127.0.0.1:{}/a.png", v4.port()),
            format!("http://127.0.0.1:{}/a.png", v4.port()),
        ];
        let v6 = recording_listener("[::1]:0").await;
        if let Some((at, _)) = &v6 {
            urls.push(format!("https://[::1]:{}/a.png", at.port()));
        }
        for url in &urls {
            match cache.fetch(url, None).await {
                Err(FetchError::Refused(_)) => {}
                other => panic!("{url}: {other:?}"),
            }
        }
        // A name that resolves to loopback only: refused by the resolver, before connecting.
        let by_name = format!("https://localhost:{}/a.png", v4.port());
        let answer = cache.fetch(&by_name, None).await;
        assert!(matches!(&answer, Err(FetchError::Failed(why)) if why.contains("no public address")), "{by_name}: {answer:?}");

        assert_eq!(peers_after_own_connection(v4, &v4_peers).await, [], "a refused image URL was connected to");
        if let Some((at, peers)) = v6 {
            assert_eq!(peers_after_own_connection(at, &peers).await, [], "a refused image URL was connected to on [::1]");
        }
    }

    #[test]
    fn the_folder_is_made_private_and_a_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache").join(FOLDER);
        own_private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        own_private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700, "an open folder is closed again");

        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
        let linked = root.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        assert!(own_private_dir(&linked).is_err(), "a folder that is a link is refused");
        assert!(store(&linked, "x", b"png").is_err());
        assert_eq!(std::fs::metadata(&elsewhere).unwrap().mode() & 0o777, 0o755, "the link's target is left alone");
        assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none(), "nothing was written through the link");
    }

    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(FOLDER);
        own_private_dir(&dir).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"the user's own file").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("copy")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(".copy.partial")).unwrap();

        store(&dir, "copy", b"image bytes").unwrap();

        assert_eq!(std::fs::read(&victim).unwrap(), b"the user's own file");
        let copy = std::fs::symlink_metadata(dir.join("copy")).unwrap();
        assert!(copy.file_type().is_file(), "the copy is a file of its own");
        assert_eq!(copy.mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(dir.join("copy")).unwrap(), b"image bytes");
    }
}
