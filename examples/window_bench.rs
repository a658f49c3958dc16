//! Benchmark: start-up of the desktop window (from launch until the window is on screen) and the
//! memory of all the app's processes once idle, for NeverMiss with 10,000 jobs in its database and
//! for a bare Tauri window measured the same way, on the same Xvfb display. Prints both and the
//! ratios. Linux only (Xvfb, /proc).
//!
//!     cargo build --example bare_window && cargo build --bin nevermiss && \
//!     cargo run --example window_bench -- [--jobs 10000] [--runs 3] [--idle-secs 10]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

// The same X server and process guard the window tests use.
#[path = "../tests/desktop/session/mod.rs"]
mod session;
use session::{start_xvfb, Killed};
use std::time::{Duration, Instant};

struct Args {
    app: PathBuf,
    bare: PathBuf,
    jobs: u64,
    runs: u32,
    idle: Duration,
}

fn args() -> Args {
    let mut a = Args {
        app: target_dir().join("nevermiss"),
        bare: target_dir().join("examples/bare_window"),
        jobs: 10_000,
        runs: 3,
        idle: Duration::from_secs(10),
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).and_then(|v| v.parse::<u64>().ok());
        match (pair[0].as_str(), v) {
            ("--app", _) if pair.len() == 2 => a.app = PathBuf::from(&pair[1]),
            ("--bare", _) if pair.len() == 2 => a.bare = PathBuf::from(&pair[1]),
            ("--jobs", Some(v)) => a.jobs = v,
            ("--runs", Some(v)) => a.runs = v as u32,
            ("--idle-secs", Some(v)) => a.idle = Duration::from_secs(v),
            _ => panic!("usage: window_bench [--app PATH] [--bare PATH] [--jobs N] [--runs N] [--idle-secs N]"),
        }
    }
    a
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug")
}

fn window_viewable(display: &str) -> bool {
    Command::new("xwininfo")
        .args(["-name", "NeverMiss"])
        .env("DISPLAY", display)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("IsViewable"))
        .unwrap_or(false)
}

/// Resident memory (kB) of a process and all its descendants (WebKit's web and network processes).
fn tree_rss_kb(root: u32) -> u64 {
    let mut total = 0;
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            total += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
        if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
            stack.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

fn seed(data_dir: &Path, jobs: u64) {
    let path = data_dir.join(nevermiss_engine::data_dir::DATABASE_FILE);
    let store = nevermiss_engine::store::Store::open(&path).unwrap();
    let mut conn = rusqlite::Connection::open(&path).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO jobs (provider, job_id, label, state, rank, seq, created_at, updated_at, finished_at, terminal_source)
                 VALUES ('generic', ?1, ?2, ?3, ?4, 1, ?5, ?5, ?6, ?7)",
            )
            .unwrap();
        for i in 0..jobs {
            let finished = i % 10 != 0;
            let at = now - (jobs - i) as i64 * 1000;
            insert
                .execute(rusqlite::params![
                    format!("job-{i}"),
                    format!("nightly run {i}"),
                    if finished { "succeeded" } else { "running" },
                    if finished { 3 } else { 2 },
                    at,
                    finished.then_some(at + 60_000),
                    finished.then_some("push")
                ])
                .unwrap();
        }
    }
    tx.commit().unwrap();
    drop(conn);
    store.close();
}

/// Launch-to-window time and idle memory, `runs` times.
fn measure(label: &str, display: &str, args: &Args, launch: &dyn Fn() -> Command) -> (Vec<Duration>, Vec<u64>) {
    let (mut times, mut rss) = (Vec::new(), Vec::new());
    for run in 0..args.runs {
        let started = Instant::now();
        let child =
            Killed(launch().env("DISPLAY", display).env("NO_AT_BRIDGE", "1").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
        while !window_viewable(display) {
            assert!(started.elapsed() < Duration::from_secs(120), "{label}: no window after 120 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        times.push(started.elapsed());
        std::thread::sleep(args.idle);
        rss.push(tree_rss_kb(child.0.id()));
        drop(child);
        while window_viewable(display) {
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{label} run {}: window after {:?}, idle RSS {} MB", run + 1, times[run as usize], rss[run as usize] / 1024);
    }
    (times, rss)
}

fn median<T: Copy + Ord>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args = args();
    let (_x, display) = start_xvfb();
    let (bare, app) = (args.bare.clone(), args.app.clone());
    assert!(bare.exists() && app.exists(), "build first: cargo build --example bare_window && cargo build --bin nevermiss");

    let (bare_times, bare_rss) = measure("bare Tauri window", &display, &args, &|| Command::new(&bare));

    let data = tempfile::tempdir().unwrap();
    seed(data.path(), args.jobs);
    let data_dir = data.path().to_owned();
    let (app_times, app_rss) = measure(&format!("NeverMiss, {} jobs", args.jobs), &display, &args, &|| {
        let mut c = Command::new(&app);
        c.args(["--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0", "--data-dir"])
            .arg(&data_dir)
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env("NEVERMISS_SECRET_STORE", "file");
        c
    });

    let (bt, at) = (median(bare_times), median(app_times));
    let (bm, am) = (median(bare_rss), median(app_rss));
    println!("desktop window, median of {} runs (debug build, Xvfb, idle {:?})", args.runs, args.idle);
    println!("{:<28} {:>18} {:>18}", "", "launch to window", "idle RSS (all)");
    println!("{:<28} {:>18.0?} {:>15} MB", "bare Tauri window", bt, bm / 1024);
    println!("{:<28} {:>18.0?} {:>15} MB", format!("NeverMiss, {} jobs", args.jobs), at, am / 1024);
    println!("ratio (NeverMiss / bare): start-up {:.2}, memory {:.2}", at.as_secs_f64() / bt.as_secs_f64(), am as f64 / bm as f64);
}
