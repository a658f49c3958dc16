//! Results' images in real notifications (a private session bus with dunst; the `Notify` calls
//! watched on the bus), as a stranger's result would name them:
//! - an image URL on loopback (`http://127.0.0.1`, `https://127.0.0.1`, a name that resolves to
//!   loopback, `[::1]`) or a configured stand-in's redirect to loopback is never connected to: a
//!   listener there sees no connection, and each notification still goes out, without its image;
//!   (private and metadata addresses, which a test may not send traffic to, are refused by the
//!   same checks before any connection: the engine's unit tests of `image_cache`);
//! - the copies live in the user's own cache dir, in a folder set to 0700, each file 0600, and a
//!   link planted at a copy's name (or at the name of the file it used to be written to first) is
//!   replaced, never written through: the link's target keeps its bytes.
#![cfg(all(feature = "desktop", target_os = "linux"))]

use crate::notification_clicks::{desk, finished, image_server_redirecting, notify_call, Desk, PNG};
use crate::session;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use nevermiss_engine::channels::desktop::{DesktopNotifier, OpenJob};
use nevermiss_engine::notification::Message;
use nevermiss_engine::notification::Notifier;
use nevermiss_engine::store::job::JobResult;

use sha2::{Digest, Sha256};

/// An environment variable of this process for the length of a test (the desktop tests run one
/// at a time, `session::one_at_a_time`), removed again even when the test fails.
pub(crate) struct EnvVar(&'static str);

impl EnvVar {
    pub(crate) fn set(name: &'static str, value: &str) -> EnvVar {
        std::env::set_var(name, value);
        EnvVar(name)
    }
}

impl Drop for EnvVar {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}

/// A loopback listener that records the peer of every connection it accepts.
async fn trap(addr: &str) -> Option<(SocketAddr, Arc<Mutex<Vec<SocketAddr>>>)> {
    let listener = tokio::net::TcpListener::bind(addr).await.ok()?;
    let at = listener.local_addr().unwrap();
    let peers: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
    let seen = peers.clone();
    tokio::spawn(async move {
        while let Ok((_socket, peer)) = listener.accept().await {
            seen.lock().unwrap().push(peer);
        }
    });
    Some((at, peers))
}

/// The peers `trap` saw before one connection of the test's own (accepts come in order, so what
/// connected earlier has been accepted by the time this one is).
async fn trapped(at: SocketAddr, peers: &Mutex<Vec<SocketAddr>>) -> Vec<SocketAddr> {
    let own = tokio::net::TcpStream::connect(at).await.unwrap();
    let me = own.local_addr().unwrap();
    session::wait_for("the trap to accept the test's own connection", std::time::Duration::from_secs(30), || {
        peers.lock().unwrap().contains(&me).then_some(())
    });
    peers.lock().unwrap().iter().copied().filter(|p| *p != me).collect()
}

fn with_image(outbox_id: i64, job_id: &str, url: &str) -> nevermiss_engine::notification::Notification {
    let mut n = finished(outbox_id, job_id);
    n.result = Some(JobResult { text: None, urls: vec![url.to_owned()], image: Some(url.to_owned()) });
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_urls_on_loopback_are_never_fetched_and_the_notification_still_goes_out() {
    let _alone = session::one_at_a_time();
    let Desk { bus, calls, .. } = &desk();
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", bus);
    let cache = tempfile::tempdir().unwrap();
    let _cache = EnvVar::set("XDG_CACHE_HOME", cache.path().to_str().unwrap());
    let (v4, v4_peers) = trap("127.0.0.1:0").await.unwrap();
    let v6 = trap("[::1]:0").await;
    // The job's provider is configured at a loopback stand-in, which redirects `/away` to the trap.
    let provider = image_server_redirecting(Some(format!("http://{v4}/out.png"))).await;
    let _provider = EnvVar::set("NEVERMISS_GENERIC_BASE_URL", &provider);
    let notifier = DesktopNotifier::new(Arc::new(OpenJob::default()));

    let mut urls = vec![
        format!("http://{v4}/out.png"),
        format!("https://{v4}/out.png"),
        format!("https://localhost:{}/out.png", v4.port()),
        format!("{provider}/away"),
    ];
    if let Some((at, _)) = &v6 {
        urls.push(format!("http://{at}/out.png"));
        urls.push(format!("https://{at}/out.png"));
    }
    for (i, url) in urls.iter().enumerate() {
        let job_id = format!("hostile-{i}");
        notifier.notify(&Message::One(&with_image(i as i64 + 1, &job_id, url))).await.unwrap();
        let call = notify_call(calls, &job_id);
        assert!(!call.contains("image-path"), "{url} gave the notification an image: {call}");
    }
    assert_eq!(trapped(v4, &v4_peers).await, [], "an image URL on 127.0.0.1 was connected to");
    if let Some((at, peers)) = &v6 {
        assert_eq!(trapped(*at, peers).await, [], "an image URL on [::1] was connected to");
    }

    // Where the user pointed the provider, its image is shown.
    let url = format!("{provider}/out.png");
    notifier.notify(&Message::One(&with_image(100, "configured", &url))).await.unwrap();
    let call = notify_call(calls, "configured");
    assert!(call.contains("image-path"), "the configured provider's image is shown: {call}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_planted_in_the_image_folder_is_not_written_through() {
    let _alone = session::one_at_a_time();
    let Desk { bus, calls, .. } = &desk();
    std::env::set_var("DBUS_SESSION_BUS_ADDRESS", bus);
    let cache = tempfile::tempdir().unwrap();
    let _cache = EnvVar::set("XDG_CACHE_HOME", cache.path().to_str().unwrap());
    let provider = image_server_redirecting(None).await;
    let _provider = EnvVar::set("NEVERMISS_GENERIC_BASE_URL", &provider);
    let url = format!("{provider}/out.png");

    // The folder exists, open to others, with links at the copy's name and at the name the copy
    // used to be written to first, both to a file of the user's.
    let folder = cache.path().join("nevermiss").join("notification-images");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = cache.path().join("victim.txt");
    std::fs::write(&victim, b"the user's own file").unwrap();
    let name = hex::encode(Sha256::digest(url.as_bytes()));
    std::os::unix::fs::symlink(&victim, folder.join(&name)).unwrap();
    std::os::unix::fs::symlink(&victim, folder.join(format!(".{name}.partial"))).unwrap();

    let notifier = DesktopNotifier::new(Arc::new(OpenJob::default()));
    notifier.notify(&Message::One(&with_image(1, "planted", &url))).await.unwrap();
    let call = notify_call(calls, "planted");

    assert_eq!(std::fs::read(&victim).unwrap(), b"the user's own file", "the image was written through a link");
    let image_path = call.split("string \"image-path\"").nth(1).expect("an image-path hint");
    let uri = image_path.split('"').nth(1).expect("the hint's value");
    let file = std::path::PathBuf::from(uri.strip_prefix("file://").expect("a file:// URI"));
    assert_eq!(file, folder.join(&name), "the copy is in the user's cache dir");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "the copy is a file of its own, not the planted link");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read(&file).unwrap(), PNG);
    assert_eq!(std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777, 0o700, "the folder is closed to others");
}
