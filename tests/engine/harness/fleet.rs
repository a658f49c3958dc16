//! A fleet as a user runs one: a PostgreSQL cluster and `nevermiss serve --database` processes on
//! it, each with its own data dir, log and ports (one engine per data dir), all with the generic
//! provider's secret. Each child is a `ServeChild`; its log holds its notifier's lines.

use std::collections::HashMap;
use std::path::PathBuf;

use nevermiss_engine::store::postgres::PoolLimits;
use nevermiss_engine::store::Store;

use super::app::SECRET;
use super::postgres::PgCluster;
use super::serve_child::{free_addr, ServeChild, ServeOptions};

/// Sends a signed generic delivery as a provider does: again, to the next receiver in turn and
/// after 250 ms, while it is answered 503 (bounded). Every answer with when it came, and the body
/// of the last, the 200.
pub async fn deliver_as_a_sender(
    http: &reqwest::Client,
    receivers: &[String],
    first: usize,
    (delivery_id, job_id, state, seq): (&str, &str, &str, i64),
) -> (Vec<(std::time::Instant, reqwest::StatusCode)>, nevermiss_engine::receiver::HookAnswer) {
    let mut answers = Vec::new();
    for attempt in 0..240 {
        let receiver = &receivers[(first + attempt) % receivers.len()];
        let (status, answer) = super::tunnel::deliver_to(http, receiver, delivery_id, job_id, state, seq).await;
        answers.push((std::time::Instant::now(), status));
        match status {
            reqwest::StatusCode::OK => return (answers, answer),
            reqwest::StatusCode::SERVICE_UNAVAILABLE => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
            other => panic!("{delivery_id} was answered {other}: {answer:?}"),
        }
    }
    panic!("{delivery_id} was not acknowledged after {} attempts", answers.len())
}

pub struct Fleet {
    pub cluster: PgCluster,
    pub servers: Vec<ServeChild>,
    pub temp: tempfile::TempDir,
    /// Every process's log, killed ones' too.
    logs: Vec<PathBuf>,
    /// The test's own connection to the database (`store`), made at the first read.
    reader: tokio::sync::OnceCell<Store>,
    env: Vec<(String, String)>,
}

impl Fleet {
    /// `size` serve processes on a new cluster, with `env` beside the database URL and secret.
    pub async fn start(size: usize, env: Vec<(String, String)>) -> Fleet {
        let cluster = PgCluster::start();
        let temp = tempfile::tempdir().unwrap();
        let mut env = env;
        env.push(("NEVERMISS_DATABASE_URL".into(), cluster.url.clone()));
        env.push(("NEVERMISS_GENERIC_WEBHOOK_SECRET".into(), SECRET.into()));
        let mut fleet = Fleet { cluster, servers: Vec::new(), temp, logs: Vec::new(), reader: tokio::sync::OnceCell::new(), env };
        for index in 0..size {
            let (data_dir, log) = fleet.paths(index);
            fleet.logs.push(log.clone());
            std::fs::create_dir_all(&data_dir).unwrap();
            let server = ServeChild::start(&ServeOptions {
                data_dir: &data_dir,
                log: &log,
                receiver_addr: free_addr(),
                api_addr: free_addr(),
                env: fleet.env.clone(),
                rust_log: "info",
            })
            .await;
            fleet.servers.push(server);
        }
        // One notification per job is what the fleet suites count: no summaries of a burst.
        fleet.servers[0].api.never_summarize().await;
        fleet
    }

    fn paths(&self, index: usize) -> (PathBuf, PathBuf) {
        (self.temp.path().join(format!("node-{index}")), self.temp.path().join(format!("node-{index}.log")))
    }

    /// A connection of the test's own to the fleet's database, to read what it holds.
    pub async fn store(&self) -> Store {
        self.reader
            .get_or_init(|| async {
                Store::connect(&self.cluster.url, PoolLimits { max_connections: 2, ..PoolLimits::default() }, "test")
                    .await
                    .unwrap_or_else(|e| panic!("{e}\n{}", self.cluster.log()))
            })
            .await
            .clone()
    }

    /// A one-integer query on the fleet's database.
    pub async fn count(&self, sql: &'static str) -> i64 {
        self.store().await.read(move |db| db.query_row(sql, [], |r| r.get(0))).await.unwrap()
    }

    /// The log notifier's lines per notification identity, across every process's log.
    pub fn notifier_lines(&self) -> HashMap<String, usize> {
        let mut lines = HashMap::new();
        for path in &self.logs {
            let log = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
            for identity in log.lines().flat_map(super::serve_child::notified_identities) {
                *lines.entry(identity).or_default() += 1;
            }
        }
        lines
    }

    /// Every process's log, for a failing test's message.
    pub fn logs(&self) -> String {
        let text = |path: &PathBuf| String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
        self.logs.iter().map(|path| format!("== {} ==\n{}", path.display(), text(path))).collect::<Vec<_>>().join("\n")
    }

    /// Each running process's receiver base URL.
    pub fn receiver_urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.receiver.clone()).collect()
    }

    /// Each running process's receiver address.
    pub fn receivers(&self) -> Vec<std::net::SocketAddr> {
        self.servers.iter().map(|s| s.receiver.trim_start_matches("http://").parse().unwrap()).collect()
    }
}
