//! nginx as a user runs it in front of a fleet: the example configuration of the README
//! (`examples/fleet/nginx.conf`), its ports replaced by the test's, started in the foreground
//! with its pid and logs in a temp dir, stopped when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The example's listen address and receivers, as written in it.
const EXAMPLE_LISTEN: &str = "127.0.0.1:8780";
const EXAMPLE_RECEIVERS: [&str; 3] = ["127.0.0.1:8787", "127.0.0.1:8797", "127.0.0.1:8807"];

pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

fn example() -> String {
    read_example("fleet")
}

fn read_example(which: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../examples/{which}/nginx.conf"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl Nginx {
    /// The example configuration, listening on `listen`, in front of `receivers` (three).
    pub async fn start_example(listen: SocketAddr, receivers: &[SocketAddr]) -> Nginx {
        assert_eq!(receivers.len(), EXAMPLE_RECEIVERS.len(), "the example names three receivers");
        let mut config = example();
        assert!(config.contains(EXAMPLE_LISTEN), "the example listens on {EXAMPLE_LISTEN}");
        config = config.replace(EXAMPLE_LISTEN, &listen.to_string());
        for (example, receiver) in EXAMPLE_RECEIVERS.iter().zip(receivers) {
            assert!(config.contains(example), "the example names {example}");
            config = config.replace(example, &receiver.to_string());
        }
        Nginx::start_config(config, listen, "http").await
    }

    /// The hub's example configuration (`examples/hub/nginx.conf`): TLS on `listen` with the
    /// certificate `cert` and key `key`, in front of the hub's admin API at `api`.
    pub async fn start_hub_example(listen: SocketAddr, api: SocketAddr, cert: &std::path::Path, key: &std::path::Path) -> Nginx {
        let mut config = read_example("hub");
        for (example, ours) in [
            ("127.0.0.1:8443", listen.to_string()),
            ("127.0.0.1:8788", api.to_string()),
            ("/etc/nevermiss/hub.crt", cert.display().to_string()),
            ("/etc/nevermiss/hub.key", key.display().to_string()),
        ] {
            assert!(config.contains(example), "the hub's example names {example}");
            config = config.replace(example, &ours);
        }
        Nginx::start_config(config, listen, "https").await
    }

    async fn start_config(config: String, listen: SocketAddr, scheme: &str) -> Nginx {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let globals = format!(
            "daemon off; pid {}; error_log {} info;",
            dir.path().join("nginx.pid").display(),
            dir.path().join("error.log").display()
        );
        let child = Command::new(nginx_bin())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .args(["-g", &globals])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let nginx = Nginx { child, dir, url: format!("{scheme}://{listen}") };
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(listen).await.is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {listen}:\n{}", nginx.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        nginx
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.is_file()).expect(
        "nginx is missing: install Debian's nginx-light (`make deps-test` does); the fleet's example configuration is tested with it",
    )
}

impl Drop for Nginx {
    /// SIGTERM to the master, which stops its workers (a SIGKILL would leave them running,
    /// orphans still listening), then a bounded wait; SIGKILL only if it did not stop.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
