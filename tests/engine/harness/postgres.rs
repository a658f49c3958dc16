//! A throwaway PostgreSQL cluster, as a user would run one: Debian's `initdb` and `pg_ctl` in a
//! temporary dir, on a free loopback port, its socket in that dir, stopped (`-m immediate`) and
//! removed when the test ends. PostgreSQL refuses to run as root: as root, the cluster is the
//! `postgres` system user's (`runuser -u postgres`). No mock database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// Where Debian puts a PostgreSQL's programs (`/usr/lib/postgresql/<major>/bin`), the newest.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").is_file())
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("PostgreSQL's initdb is missing: install Debian's postgresql (`make deps-test` does), the fleet tests run a real cluster")
}

/// Whether this process runs as root (`/proc/self` belongs to the process's user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// Runs a PostgreSQL program, as `postgres` when this process is root.
fn run(bin: &Path, program: &str, args: &[&str]) -> Output {
    let exe = bin.join(program);
    let mut command = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let output = command.args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub struct PgCluster {
    /// The CA that signed the server's certificate, when it serves TLS (`start_tls`).
    pub ca: Option<PathBuf>,
    bin: PathBuf,
    data: PathBuf,
    dir: TempDir,
    pub port: u16,
    /// `postgres://nevermiss@127.0.0.1:PORT/postgres` (trust authentication on loopback).
    pub url: String,
}

impl PgCluster {
    /// `initdb`, then `pg_ctl start` on a free port; waits until it accepts connections.
    pub fn start() -> PgCluster {
        PgCluster::start_with(false)
    }

    /// As `start`, serving TLS too (`ssl=on`) with a certificate for 127.0.0.1 signed by a CA
    /// of the test's own (`ca`), made with the `openssl` program.
    pub fn start_tls() -> PgCluster {
        PgCluster::start_with(true)
    }

    fn start_with(tls: bool) -> PgCluster {
        let bin = bin_dir();
        let dir = TempDir::new().unwrap();
        let ca = tls.then(|| make_certificates(dir.path()));
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status().unwrap();
            assert!(status.success(), "chown of the cluster's dir to postgres");
        }
        let data = dir.path().join("data");
        run(&bin, "initdb", &["-D", data.to_str().unwrap(), "--auth=trust", "--username=nevermiss", "--encoding=UTF8", "--no-sync", "-N"]);
        let port = super::serve_child::free_addr().port();
        let cluster = PgCluster { ca, url: format!("postgres://nevermiss@127.0.0.1:{port}/postgres"), bin, data, port, dir };
        cluster.pg_ctl_start();
        cluster
    }

    /// `fsync=off` (the OS's cache survives a server crash, which is all these tests make) but
    /// `synchronous_commit` stays on: a commit the store acknowledged is in the WAL before an
    /// immediate stop, as on a user's server.
    fn pg_ctl_start(&self) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        if self.ca.is_some() {
            let dir = self.dir.path().display();
            options.push_str(&format!(" -c ssl=on -c ssl_cert_file={dir}/server.crt -c ssl_key_file={dir}/server.key"));
        }
        let log = self.dir.path().join("postgres.log");
        run(
            &self.bin,
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-l", log.to_str().unwrap(), "-o", &options, "-w", "-t", "60", "start"],
        );
    }

    /// Stops the server at once (as a crash or a pulled cable would), keeping its data.
    pub fn stop(&self) {
        run(&self.bin, "pg_ctl", &["-D", self.data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
    }

    /// Starts it again on the same port and data.
    pub fn restart(&self) {
        self.pg_ctl_start();
    }

    /// Creates the database `name` (owned by the cluster's user); its URL.
    pub fn create_database(&self, name: &str) -> String {
        let port = self.port.to_string();
        run(&self.bin, "createdb", &["-h", "127.0.0.1", "-p", &port, "-U", "nevermiss", name]);
        format!("postgres://nevermiss@127.0.0.1:{}/{name}", self.port)
    }

    /// The server's log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }
}

/// A CA, and a server certificate for 127.0.0.1 and localhost signed by it, in `dir`
/// (`server.crt`, `server.key` readable by its owner only); the CA's certificate's path.
pub fn make_certificates(dir: &Path) -> PathBuf {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=NeverMiss test CA",
    ]);
    openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    dir.join("ca.pem")
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let exe = self.bin.join("pg_ctl");
        let data = self.data.to_str().unwrap().to_owned();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        // Already stopped by the test is fine; the dir goes with `dir`.
        let _ = if is_root() {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&exe).args(args).output()
        } else {
            Command::new(&exe).args(args).output()
        };
    }
}

/// A database of its own for one test, on the cluster the binary's tests share: started by the
/// first test that needs it, stopped when the last one holding it ends (a later one starts another).
pub struct TestDatabase {
    pub url: String,
    _cluster: std::sync::Arc<PgCluster>,
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        tokio::task::spawn_blocking(|| {
            use std::sync::atomic::{AtomicUsize, Ordering};
            use std::sync::{Arc, Mutex, Weak};
            static SHARED: Mutex<Weak<PgCluster>> = Mutex::new(Weak::new());
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let cluster = {
                let mut shared = SHARED.lock().unwrap();
                match shared.upgrade() {
                    Some(cluster) => cluster,
                    None => {
                        let cluster = Arc::new(PgCluster::start());
                        *shared = Arc::downgrade(&cluster);
                        cluster
                    }
                }
            };
            let url = cluster.create_database(&format!("test_{}", NEXT.fetch_add(1, Ordering::SeqCst)));
            TestDatabase { url, _cluster: cluster }
        })
        .await
        .unwrap()
    }
}
