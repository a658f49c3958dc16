//! The real binary (contract §1): `serve`, then `track`, `jobs` and `url` against it, a
//! clean stop on SIGTERM, and the errors a user meets: each a non-zero exit with one stderr line
//! that starts with `nevermiss:`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

const WAIT: Duration = Duration::from_secs(60);

/// The binary with a clean environment: no `NEVERMISS_*` setting or `RUST_LOG` of the machine
/// running the tests may change what it does.
fn nevermiss(args: &[&str]) -> Command {
    let mut command = crate::harness::serve_child::nevermiss_command();
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("NEVERMISS_") {
            command.env_remove(&name);
        }
    }
    command.env_remove("RUST_LOG").args(args).stdin(Stdio::null());
    command
}

fn run(args: &[&str]) -> Output {
    let child = nevermiss(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary starts");
    let pid = child.id();
    // Its output read while it runs (a long one, a completion script, would fill the pipe), and
    // bounded: a client command that hangs fails the test instead of the whole suite.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match finished.recv_timeout(WAIT) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("`nevermiss {}` did not finish within {WAIT:?}", args.join(" "));
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a command that must succeed; returns its stdout.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "`nevermiss {}` failed ({}): {}", args.join(" "), out.status, text(&out.stderr));
    text(&out.stdout)
}

/// Runs a command that must fail with one stderr line starting with `nevermiss:`; returns it.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "`nevermiss {}` should fail; stderr: {stderr}", args.join(" "));
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty() && !wine_reads_an_acl_as_open(l)).collect();
    assert_eq!(lines.len(), 1, "`nevermiss {}`: one stderr line, got {stderr:?}", args.join(" "));
    assert!(lines[0].starts_with("nevermiss: "), "`nevermiss {}`: {stderr:?}", args.join(" "));
    lines[0].to_owned()
}

/// Under Wine, the line a Windows build logs at every start on an existing data dir: Wine keeps
/// no ACL and reads every one back as open to Everyone (the book's development/windows.md).
fn wine_reads_an_acl_as_open(line: &str) -> bool {
    line.contains("the data dir was open to other users")
        && crate::harness::serve_child::skipped_under_wrapper(
            "this line of the data dir's owner-only ACL, said again at each start",
            "Wine reads every ACL back as open to Everyone",
        )
}

/// A path as the child is given it (`child_path`: under Wine, `Z:\...`).
fn path_arg(p: &Path) -> String {
    crate::harness::serve_child::child_path(p).into_string().expect("a UTF-8 temp path")
}

/// An address nothing listens on (bound, then released).
fn closed_addr() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `nevermiss serve` on ports the OS picks, stopped with SIGTERM on drop if a test fails.
struct Server {
    child: Child,
    spawned_at: std::time::SystemTime,
    data_dir: PathBuf,
    log: PathBuf,
    _logs: TempDir,
}

impl Server {
    fn start(data_dir: &Path) -> (Server, Value) {
        let logs = TempDir::new().unwrap();
        let log = logs.path().join("serve.log");
        let spawned_at = std::time::SystemTime::now();
        let child = nevermiss(&["serve", "--data-dir", &path_arg(data_dir), "--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        let mut server = Server { child, spawned_at, data_dir: data_dir.to_owned(), log, _logs: logs };
        let instance = server.wait_for_instance();
        (server, instance)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `<data-dir>/instance.json` to appear whole, written by this very child (a
    /// killed predecessor leaves its own behind).
    fn wait_for_instance(&mut self) -> Value {
        let path = self.data_dir.join("instance.json");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(bytes) = std::fs::read(&path) {
                if let Ok(instance) = serde_json::from_slice::<Value>(&bytes) {
                    if crate::harness::serve_child::written_by(&instance, &self.child, &path, self.spawned_at) {
                        return instance;
                    }
                }
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("`nevermiss serve` exited ({status}) before it was ready: {}", self.log());
            }
            assert!(Instant::now() < deadline, "no instance.json within {WAIT:?}: {}", self.log());
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGKILL: no shutdown code runs; the OS ends the process and releases what it held.
    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM (under Wine SIGINT: `serve_child::stop_signal`).
    fn sigterm(&self) {
        let signal = crate::harness::serve_child::stop_signal();
        let status = Command::new("kill").args([signal, &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill {signal}");
    }

    /// SIGTERM, then a bounded wait for a clean exit.
    fn stop(mut self) -> std::process::ExitStatus {
        self.sigterm();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "`nevermiss serve` did not stop within {WAIT:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn serve_then_track_jobs_and_url_then_stop_on_sigterm() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let (server, instance) = Server::start(dir.path());
    let receiver_url = instance["receiver_url"].as_str().expect("instance.json names the receiver URL").to_owned();
    assert!(receiver_url.starts_with("http://127.0.0.1:"), "{instance}");
    // Its own pid (under Wine a Windows pid of Wine's numbering, which the test cannot know).
    if crate::harness::serve_child::wrapper().is_none() {
        assert_eq!(instance["pid"].as_u64(), Some(server.child.id() as u64));
    }

    let out = ok(&["track", "generic", "job-1", "--label", "x", "--data-dir", d]);
    assert!(out.contains("now tracking"), "{out:?}");
    assert!(out.contains("job-1"), "{out:?}");
    let out = ok(&["track", "generic", "job-1", "--data-dir", d]);
    assert!(out.contains("already tracking"), "{out:?}");

    let out = ok(&["jobs", "--json", "--data-dir", d]);
    let page: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("`jobs --json` prints JSON ({e}): {out}"));
    let jobs = page["jobs"].as_array().expect("a jobs array");
    assert_eq!(jobs.len(), 1, "{page}");
    assert_eq!(jobs[0]["provider"], "generic");
    assert_eq!(jobs[0]["job_id"], "job-1");
    assert_eq!(jobs[0]["label"], "x");
    assert_eq!(jobs[0]["state"], "unknown");

    let table = ok(&["jobs", "--data-dir", d]);
    assert!(table.contains("job-1") && table.contains("unknown"), "{table}");
    // A filter that matches nothing says so (not "no jobs yet"); a provider the instance does
    // not have is an error naming those it has; a limit of 0 is a usage error (exit 2).
    let none = ok(&["jobs", "--state", "failed", "--data-dir", d]);
    assert!(none.contains("no jobs match"), "{none}");
    let message = fails(&["jobs", "--provider", "nope", "--data-dir", d]);
    assert!(message.contains("no provider is named \"nope\"") && message.contains("generic"), "{message}");
    let zero = run(&["jobs", "--limit", "0", "--data-dir", d]);
    assert_eq!(zero.status.code(), Some(2), "{}", text(&zero.stderr));

    let out = ok(&["url", "--data-dir", d]);
    assert_eq!(out.trim(), receiver_url, "with no tunnel, the public URL is the local receiver");

    let status = server.stop();
    assert!(status.success(), "a clean exit on SIGTERM: {status}");
    assert!(!dir.path().join("instance.json").exists(), "instance.json is removed on a clean stop");

    // Nothing runs there any more: the client says so.
    let message = fails(&["track", "generic", "job-2", "--data-dir", d, "--api-addr", &closed_addr()]);
    assert!(message.contains("no NeverMiss is running"), "{message}");
}

#[test]
fn a_port_in_use_is_a_one_line_error() {
    let dir = TempDir::new().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let d = dir.path().join("data");

    let message = fails(&["serve", "--data-dir", &path_arg(&d), "--receiver-addr", &addr, "--api-addr", "127.0.0.1:0"]);
    assert!(message.contains(&addr) && message.contains("in use"), "{message}");
    let message = fails(&["serve", "--data-dir", &path_arg(&d), "--receiver-addr", "127.0.0.1:0", "--api-addr", &addr]);
    assert!(message.contains(&addr) && message.contains("in use"), "{message}");
    drop(taken);
}

#[test]
fn a_data_dir_that_cannot_be_written_is_a_one_line_error() {
    // Tests run as root, whom permission bits do not stop: a path under a regular file can never
    // be a directory, for anyone.
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let bad = file.join("sub");
    let message = fails(&["serve", "--data-dir", &path_arg(&bad), "--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"]);
    assert!(message.contains("not writable") && message.contains(&path_arg(&bad)), "{message}");
    // Said once, not twice.
    let cause = "Not a directory";
    assert!(message.matches(cause).count() <= 1, "the cause is repeated: {message}");
}

#[test]
fn a_bad_address_is_a_one_line_error() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let message = fails(&["serve", "--data-dir", d, "--api-addr", "nonsense"]);
    assert!(message.contains("nonsense"), "{message}");
    let message = fails(&["serve", "--data-dir", d, "--receiver-addr", "127.0.0.1:notaport"]);
    assert!(message.contains("notaport"), "{message}");
    assert!(!dir.path().join("instance.json").exists());
}

#[test]
fn client_commands_with_nothing_running_are_one_line_errors() {
    // A data dir where NeverMiss never ran: there is no token to talk with.
    let fresh = TempDir::new().unwrap();
    let d = &path_arg(fresh.path());
    let message = fails(&["track", "generic", "job-1", "--data-dir", d]);
    assert!(message.contains("api-token"), "{message}");
    fails(&["jobs", "--data-dir", d]);
    fails(&["url", "--data-dir", d]);

    // A token but no instance listening.
    std::fs::write(fresh.path().join("api-token"), "0123456789abcdef").unwrap();
    let closed = closed_addr();
    for args in [
        vec!["track", "generic", "job-1", "--data-dir", d, "--api-addr", &closed],
        vec!["jobs", "--json", "--data-dir", d, "--api-addr", &closed],
        vec!["url", "--data-dir", d, "--api-addr", &closed],
    ] {
        let message = fails(&args);
        assert!(message.contains("no NeverMiss is running"), "{message}");
    }

    // One exit code for one cause, whatever the command: 69, no running instance reachable.
    for args in [
        vec!["track", "generic", "job-1"],
        vec!["jobs"],
        vec!["url"],
        vec!["open"],
        vec!["providers"],
        vec!["providers", "test", "generic", "job-1"],
        vec!["wait", "generic", "job-1"],
        vec!["cancel", "generic", "job-1"],
    ] {
        let args: Vec<&str> = args.into_iter().chain(["--data-dir", d, "--api-addr", &closed]).collect();
        let out = run(&args);
        assert_eq!(out.status.code(), Some(69), "`nevermiss {}`: {}", args.join(" "), text(&out.stderr));
    }
}

/// Contract §4: one engine per data dir. A second `serve` on a data dir in use refuses with
/// one line naming the first (its pid and ports) and exits non-zero, leaving the first's
/// `instance.json` alone; once the first is killed (SIGKILL: the OS releases its lock), a new one
/// starts there.
#[test]
fn a_second_serve_on_a_data_dir_in_use_refuses_naming_the_first() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let (first, instance) = Server::start(dir.path());
    let api_url = instance["api_url"].as_str().unwrap().to_owned();
    let receiver_url = instance["receiver_url"].as_str().unwrap().to_owned();

    let message = fails(&["serve", "--data-dir", d, "--receiver-addr", "127.0.0.1:0", "--api-addr", "127.0.0.1:0"]);
    assert!(message.contains("in use"), "{message}");
    // The pid it wrote (under Wine a Windows pid, not the Linux one the test holds).
    let first_pid = instance["pid"].as_u64().unwrap();
    assert!(message.contains(&format!("pid {first_pid}")), "names the running one's pid: {message}");
    assert!(message.contains(&api_url) && message.contains(&receiver_url), "names its ports: {message}");
    let still: Value = serde_json::from_slice(&std::fs::read(dir.path().join("instance.json")).unwrap()).unwrap();
    assert_eq!(still, instance, "the refused one did not touch instance.json");
    // The first goes on serving.
    let out = ok(&["jobs", "--json", "--data-dir", d]);
    assert!(out.contains("\"jobs\""), "{out}");

    first.kill9();
    let (second, instance) = Server::start(dir.path());
    assert_ne!(instance["pid"].as_u64(), Some(first_pid), "the second one's instance.json");
    let status = second.stop();
    assert!(status.success(), "{status}");
}

/// The admin API is loopback only (contract §3): `--api-addr` on another address is one
/// line and a non-zero exit, before anything is created.
#[test]
fn a_non_loopback_api_addr_is_refused() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    for addr in ["0.0.0.0:0", "[::]:0"] {
        let message = fails(&["serve", "--data-dir", &path_arg(&data), "--receiver-addr", "127.0.0.1:0", "--api-addr", addr]);
        assert!(message.contains(addr) && message.contains("loopback"), "{message}");
    }
    assert!(!data.exists(), "nothing was created in the data dir");
}

/// `nevermiss providers check FILE`: a valid recipe exits 0 and says what it maps; a
/// broken one exits 1 with one line naming the file, the key and what to write instead.
#[test]
fn providers_check_says_whether_a_recipe_is_valid_naming_the_file_and_the_key() {
    let dir = TempDir::new().unwrap();
    let good = r#"
name = "acme-batch"
ids = ["ab-"]
base_url = "https://api.acme.example"

[poll]
url = "{base_url}/v1/batches/{job_id}"
headers = { Authorization = "Bearer {api_key}" }

[read]
state = ".status"

[states]
running = "running"
done = "succeeded"
broken = "failed"
"#;
    let path = dir.path().join("acme.toml");
    std::fs::write(&path, good).unwrap();
    let said = ok(&["providers", "check", path.to_str().unwrap()]);
    assert!(said.contains("\"acme-batch\" is valid") && said.contains("3 values mapped (2 of them an end)"), "{said}");

    let inline = good.replace("Bearer {api_key}", "Bearer sk-live-1234");
    std::fs::write(&path, inline).unwrap();
    let line = fails(&["providers", "check", path.to_str().unwrap()]);
    // `file:line:column: key: problem`, as a compiler says it.
    assert!(line.contains("acme.toml:8:13: poll.headers.Authorization: a secret written inline: write {api_key}"), "{line}");
    assert!(!line.contains("sk-live-1234"), "the secret is not repeated: {line}");

    std::fs::write(&path, good.replace("[read]", "[read]\ncolour = \"blue\"")).unwrap();
    let line = fails(&["providers", "check", path.to_str().unwrap()]);
    assert!(line.contains("acme.toml:11:1: read.colour: unknown field"), "{line}");
    // Not TOML at all: where, without a key guessed.
    std::fs::write(&path, good.replace("state = \".status\"", "state = \".status")).unwrap();
    let line = fails(&["providers", "check", path.to_str().unwrap()]);
    assert!(line.contains("acme.toml:11:") && !line.contains("acme.toml: "), "{line}");

    let line = fails(&["providers", "check", dir.path().join("missing.toml").to_str().unwrap()]);
    assert!(line.contains("cannot read"), "{line}");

    // An expression whose output could outgrow the answer out of all proportion (each `.+.`
    // doubles it): refused when checked, as when loaded, naming the key and why.
    let doubling = [".+."; 7].join(" | ");
    std::fs::write(&path, good.replace("state = \".status\"", &format!("state = \".status\"\nresult_text = \"{doubling}\""))).unwrap();
    let line = fails(&["providers", "check", path.to_str().unwrap()]);
    assert!(line.contains("read.result_text") && line.contains("128 times the answer"), "{line}");
    std::fs::write(&path, good.replace("state = \".status\"", "state = \"reduce .[] as $x (.; . + .)\"")).unwrap();
    let line = fails(&["providers", "check", path.to_str().unwrap()]);
    assert!(line.contains("read.state") && line.contains("reduce"), "{line}");
}

/// Every command that prints data prints it as JSON with `--json`; `untrack` forgets a job; `wait`
/// says on stderr what it waits for; `jobs` shows local times with their offset; the first start
/// says nothing of the migrations that made its database.
#[test]
fn every_command_prints_json_untrack_forgets_and_wait_says_what_it_waits_for() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let (server, _) = Server::start(dir.path());
    let json = |args: &[&str]| -> Value {
        let out = ok(&args.iter().copied().chain(["--json", "--data-dir", d]).collect::<Vec<_>>());
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("`nevermiss {} --json` prints JSON ({e}): {out}", args.join(" ")))
    };

    let job = json(&["track", "generic", "job-1", "--label", "first"]);
    assert_eq!((job["provider"].as_str(), job["job_id"].as_str(), job["label"].as_str()), (Some("generic"), Some("job-1"), Some("first")));
    let url = json(&["url"]);
    assert_eq!(url["public"], false, "{url}");
    assert!(url["url"].as_str().is_some_and(|u| u.starts_with("http://127.0.0.1:")), "{url}");
    assert!(url["why_local"].as_str().is_some_and(|w| w.contains("no tunnel")), "{url}");
    let providers = json(&["providers"]);
    let names: Vec<&str> = providers["providers"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    for name in nevermiss_engine::providers::recipe::RESERVED_NAMES {
        assert!(names.contains(name), "`providers --json` lists {name}: {names:?}");
    }

    // The table's times are local, with their offset (the zone set for the child; Wine keeps its own).
    if crate::harness::serve_child::wrapper().is_none() {
        let out = nevermiss(&["jobs", "--data-dir", d]).env("TZ", "Asia/Kolkata").output().unwrap();
        let table = text(&out.stdout);
        assert!(table.contains("+05:30") && table.contains("job-1"), "{table}");
    }

    // Waiting for a job no one has heard of: said on stderr, then the time limit (124), with the
    // job as JSON on stdout.
    let out = run(&["wait", "generic", "job-2", "--timeout", "1", "--json", "--data-dir", d]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("waiting for generic job-2"), "{}", text(&out.stderr));

    // A cancel refused (the generic contract has no cancel call): exit 1, the answer as JSON.
    let out = run(&["cancel", "generic", "job-1", "--json", "--data-dir", d]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert!(answer["error"].is_string(), "{answer}");

    // Untrack: the job as it was, then gone from the list and from the API; a second time, 404.
    let gone = json(&["untrack", "generic", "job-1"]);
    assert_eq!(gone["job_id"], "job-1");
    let page = json(&["jobs"]);
    let ids: Vec<&str> = page["jobs"].as_array().unwrap().iter().filter_map(|j| j["job_id"].as_str()).collect();
    assert_eq!(ids, ["job-2"], "{page}");
    let message = fails(&["untrack", "generic", "job-1", "--data-dir", d]);
    assert!(message.contains("404") && message.contains("no such job"), "{message}");

    let log = server.log();
    assert!(!log.contains("migration"), "the first start says nothing of its migrations: {log}");
    assert!(server.stop().success());
}

/// Shell completions and the manual page come from the command line's definition; the help of
/// every command taking a provider names each provider the program knows.
#[test]
fn completions_man_page_and_help_name_every_command_and_provider() {
    let bash = ok(&["completions", "bash"]);
    assert!(bash.contains("_nevermiss") && bash.contains("untrack") && bash.contains("--json"), "{bash}");
    let zsh = ok(&["completions", "zsh"]);
    assert!(zsh.contains("#compdef nevermiss"), "{zsh}");
    let man = ok(&["man"]);
    assert!(man.contains(".TH nevermiss 1") && man.contains("untrack"), "{man}");
    let usage = run(&["completions", "tcsh"]);
    assert_eq!(usage.status.code(), Some(2), "an unknown shell is a usage error");
    for command in ["track", "untrack", "wait", "cancel"] {
        let help = ok(&[command, "--help"]);
        for name in nevermiss_engine::providers::recipe::RESERVED_NAMES {
            assert!(help.contains(name), "`nevermiss {command} --help` names {name}: {help}");
        }
    }
}

/// `nevermiss demo --headless` runs its simulated provider in `<data-dir>/demo`, and the client
/// commands reach it with the data dir alone, saying so.
#[test]
fn the_demo_runs_headless_and_the_commands_reach_it_without_flags() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let logs = TempDir::new().unwrap();
    let log = logs.path().join("demo.log");
    let mut demo = nevermiss(&["demo", "--headless", "--jobs", "2", "--every", "1", "--data-dir", d])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + WAIT;
    let listed = loop {
        if let Some(status) = demo.try_wait().unwrap() {
            panic!("the demo exited ({status}): {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "the demo's jobs never showed: {}", std::fs::read_to_string(&log).unwrap_or_default());
        if dir.path().join("demo").join("instance.json").exists() {
            let out = run(&["jobs", "--json", "--data-dir", d]);
            let page: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if page["jobs"].as_array().is_some_and(|jobs| !jobs.is_empty()) {
                break (page, text(&out.stderr));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (page, stderr) = listed;
    assert!(stderr.contains("talking to the demo"), "{stderr}");
    assert!(page["jobs"][0]["job_id"].as_str().is_some_and(|id| id.starts_with("sim")), "{page}");
    let signal = crate::harness::serve_child::stop_signal();
    assert!(Command::new("kill").args([signal, &demo.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + WAIT;
    while demo.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the demo did not stop on {signal}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A job that cannot be polled is said where the user is: `track` warns (exit 0: a webhook still
/// ends it) naming what is missing, and `jobs` says under its table which jobs are not watched;
/// an id of a shape the provider's ids never have is refused.
#[test]
fn a_job_that_cannot_be_polled_is_said_at_track_time_and_under_the_jobs_table() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let (server, _) = Server::start(dir.path());
    let out = run(&["track", "replicate", "gm3qorzdhgbfurvjtvhg6dckhu", "--data-dir", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("now tracking replicate gm3qorzdhgbfurvjtvhg6dckhu"), "{}", text(&out.stdout));
    let warning = text(&out.stderr);
    assert!(warning.starts_with("warning: replicate's first poll of it failed:") && warning.contains("no API key"), "{warning}");
    assert!(warning.contains("NEVERMISS_REPLICATE_API_KEY") && warning.contains("A webhook still ends it"), "{warning}");

    let table = ok(&["jobs", "--data-dir", d]);
    assert!(table.contains("! replicate: 1 unfinished job above cannot be polled (") && table.contains("no API key"), "{table}");
    // `--json` carries the same answer, for scripts.
    let answer: Value =
        serde_json::from_str(&ok(&["track", "replicate", "gm3qorzdhgbfurvjtvhg6dckhu", "--json", "--data-dir", d])).unwrap();
    assert!(answer["poll_problem"].as_str().is_some_and(|p| p.contains("no API key")), "{answer}");

    // An id the provider could not have is a typo: refused, saying what its ids look like, and
    // nothing is kept.
    for (provider, typo, shape) in [
        ("replicate", "bad id with spaces", "replicate job ids are letters and digits"),
        ("anthropic", "not-a-batch", "anthropic job ids are msgbatch_... (a Message Batch) or sesn_..."),
        ("openai", "résumé batch", "openai job ids are resp_..., batch_..."),
    ] {
        let said = fails(&["track", provider, typo, "--data-dir", d]);
        assert!(said.contains(shape), "{provider} {typo:?}: {said}");
    }
    let kept: Value = serde_json::from_str(&ok(&["jobs", "--json", "--data-dir", d])).unwrap();
    assert_eq!(kept["jobs"].as_array().map(Vec::len), Some(1), "only the good id is tracked: {kept}");
    assert!(server.stop().success());
}

/// A server needs no browser: settings, secrets (read from standard input, never the command
/// line) and channels are set from the CLI, and a refused value says why in one line.
#[test]
fn settings_secrets_and_channels_are_set_from_the_command_line() {
    let dir = TempDir::new().unwrap();
    let d = &path_arg(dir.path());
    let (server, _) = Server::start(dir.path());

    let set = ok(&["settings", "set", "sla_secs", "20m", "--data-dir", d]);
    assert!(set.contains("sla_secs = 1200") && set.contains("durations.sla_secs = 20m"), "{set}");
    assert!(ok(&["settings", "--data-dir", d]).contains("sla_secs = 1200"));
    let refused = fails(&["settings", "set", "sla_secs", "banana", "--data-dir", d]);
    assert!(refused.contains("sla_secs: must be a duration"), "{refused}");

    let piped = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = nevermiss(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = piped(&["secrets", "set", "replicate", "api-key", "--data-dir", d], "r8_from_stdin\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A key set means every job watched: the CLI says that discovery is now on, and how to turn it off.
    let said = text(&out.stderr);
    assert!(said.contains("Discovery is on for replicate") && said.contains("replicate.discover off"), "{said}");
    let listed = ok(&["secrets", "--data-dir", d]);
    let replicate = listed.lines().find(|l| l.starts_with("replicate")).unwrap_or_default().to_owned();
    assert!(replicate.contains("api key: set"), "{listed}");
    assert!(!listed.contains("r8_from_stdin"), "a secret is never printed");
    ok(&["secrets", "unset", "replicate", "api-key", "--data-dir", d]);
    assert!(ok(&["secrets", "--data-dir", d]).lines().any(|l| l.starts_with("replicate") && l.contains("api key: not set")));

    let added =
        ok(&["channels", "add", "phone", "ntfy", "--url", "https://ntfy.sh/nm-cli-test", "--outcomes", "failed,stuck", "--data-dir", d]);
    assert!(added.contains("phone") && added.contains("failed,stuck"), "{added}");
    let listed = ok(&["channels", "--data-dir", d]);
    assert!(listed.lines().any(|l| l.starts_with("phone") && l.contains("ntfy")), "{listed}");
    let refused = fails(&["channels", "add", "bad", "webhook", "--data-dir", d]);
    assert!(refused.contains("url: is required"), "{refused}");
    let removed = ok(&["channels", "remove", "phone", "--data-dir", d]);
    assert!(removed.contains("removed phone"), "{removed}");
    assert!(!ok(&["channels", "--data-dir", d]).contains("phone"));
    assert!(server.stop().success());
}
