//! Stand-in executables for the tunnel programs that need an account or the internet: small
//! python3 scripts written to a temp dir that take the same flags, print the same log lines and
//! serve the same local endpoints as the real ones (cloudflared's metrics server with
//! `/quicktunnel` and `/ready`; the ngrok agent's `GET /api/tunnels` on the `web_addr` of its config
//! file). Each run records its arguments, the secret it found in its environment and its pid, so
//! a test can check what was passed and kill it.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

/// How a stand-in behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Like the real program on a good day.
    Normal,
    /// cloudflared without a metrics server (an old version): the URL only on stderr.
    StderrOnly,
    /// Up, then its metrics server or local API stops answering while the process lives on.
    GoesSilent,
    /// Refuses the token and exits, as the real one does.
    BadToken,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::StderrOnly => "stderr-only",
            Mode::GoesSilent => "goes-silent",
            Mode::BadToken => "bad-token",
        }
    }
}

pub struct StandIn {
    pub dir: TempDir,
    pub program: PathBuf,
}

impl StandIn {
    pub fn cloudflared(mode: Mode) -> StandIn {
        StandIn::write("cloudflared", CLOUDFLARED, mode)
    }

    pub fn ngrok(mode: Mode) -> StandIn {
        StandIn::write("ngrok", NGROK, mode)
    }

    fn write(name: &str, script: &str, mode: Mode) -> StandIn {
        let dir = TempDir::new().unwrap();
        let runs = dir.path().join("runs");
        std::fs::create_dir(&runs).unwrap();
        let program = dir.path().join(name);
        let text = format!("{PRELUDE}{script}").replace("@RUNS@", &runs.display().to_string()).replace("@MODE@", mode.as_str());
        std::fs::write(&program, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        StandIn { dir, program }
    }

    pub fn path(&self) -> &str {
        self.program.to_str().unwrap()
    }

    /// What each run recorded (`argv`, `token`, `pid`), oldest first.
    pub fn runs(&self) -> Vec<Value> {
        let dir = self.dir.path().join("runs");
        let mut runs: Vec<(std::time::SystemTime, Value)> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| {
                let text = std::fs::read_to_string(e.path()).ok()?;
                let value: Value = serde_json::from_str(&text).ok()?;
                Some((e.metadata().ok()?.modified().ok()?, value))
            })
            .collect();
        runs.sort_by_key(|(t, v)| (*t, v["started"].as_f64().map(|f| (f * 1e6) as u64)));
        runs.into_iter().map(|(_, v)| v).collect()
    }

    pub fn last_run(&self) -> Value {
        self.runs().pop().expect("the stand-in ran")
    }

    /// SIGKILL to the last run, as a crash would.
    pub fn kill_last(&self) {
        let pid = self.last_run()["pid"].as_u64().unwrap();
        let status = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
        assert!(status.success(), "kill -9 {pid}");
    }
}

/// Whether `program` is found on PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

/// What both stand-ins start with: the mode and the runs dir (filled in by `StandIn::write`), the
/// record of a run, and the local HTTP server a test can ask (a handler's JSON answer, no log).
const PRELUDE: &str = r#"#!/usr/bin/env python3
import json, os, random, string, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODE = "@MODE@"
RUNS = "@RUNS@"
args = sys.argv[1:]

def record(token):
    with open(os.path.join(RUNS, f"run-{os.getpid()}.json"), "w") as f:
        json.dump({"argv": args, "token": token, "pid": os.getpid(), "started": time.time()}, f)

class Local(BaseHTTPRequestHandler):
    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass

def serve(addr, handler):
    host, port = addr.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server

"#;

/// cloudflared: `tunnel [--no-autoupdate] [--metrics ADDR] [--url URL]` (quick) or
/// `tunnel ... run --url URL` with `TUNNEL_TOKEN` (named). Log lines as cloudflared 2024.x prints
/// them; `/quicktunnel` answers `{"hostname": ""}` until the quick tunnel exists, `/ready` 503 until
/// a connection is registered.
const CLOUDFLARED: &str = r#"
def log(level, msg):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"{stamp} {level} {msg}", file=sys.stderr, flush=True)

def flag(name):
    if name in args:
        i = args.index(name)
        if i + 1 < len(args):
            return args[i + 1]
    return None

record(os.environ.get("TUNNEL_TOKEN"))

if not args or args[0] != "tunnel":
    print("Incorrect Usage: expected the tunnel command", file=sys.stderr)
    sys.exit(2)

named = "run" in args
metrics = flag("--metrics")
origin = flag("--url")
if MODE == "bad-token" or (named and not os.environ.get("TUNNEL_TOKEN")):
    log("ERR", "Couldn't start tunnel error=\"Provided Tunnel token is not valid.\"")
    print("Provided Tunnel token is not valid.", file=sys.stderr, flush=True)
    sys.exit(1)

state = {"hostname": "", "ready": False, "silent": False}

class Metrics(Local):
    def do_GET(self):
        if state["silent"]:
            # Hung, as a stuck cloudflared is: the connection is accepted and never answered, so
            # each probe lasts until the engine's timeout (and is still in flight when the
            # supervisor's own periodic check comes round).
            time.sleep(10)
            self.close_connection = True
            return
        if self.path == "/quicktunnel":
            code, body = 200, {"hostname": state["hostname"]}
        elif self.path == "/ready":
            code = 200 if state["ready"] else 503
            body = {"status": code, "readyConnections": 4 if state["ready"] else 0, "connectorId": "5d1b6a3c-0000-4000-8000-000000000000"}
        else:
            code, body = 404, {"error": "404 page not found"}
        self.answer(code, body)

log("INF", "Thank you for trying Cloudflare Tunnel. Doing so, without a Cloudflare account, is a quick way to experiment and try it out.")
server = None
if metrics and MODE != "stderr-only":
    server = serve(metrics, Metrics)
    log("INF", f"Starting metrics server on {metrics}/metrics")
if not named:
    log("INF", "Requesting new quick Tunnel on trycloudflare.com...")
time.sleep(0.3)
if not named:
    name = "-".join("".join(random.choice(string.ascii_lowercase) for _ in range(6)) for _ in range(3)) + "-stand-in"
    state["hostname"] = f"{name}.trycloudflare.com"
    log("INF", "+--------------------------------------------------------------------------------------------+")
    log("INF", "|  Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):  |")
    log("INF", f"|  https://{state['hostname']}                                   |")
    log("INF", "+--------------------------------------------------------------------------------------------+")
log("INF", f"Version 2024.8.2-stand-in (origin {origin})")
time.sleep(0.2)
state["ready"] = True
log("INF", "Registered tunnel connection connIndex=0 connection=0f3c7c3a-stand-in event=0 ip=198.41.192.7 location=ams01 protocol=quic")
if MODE == "goes-silent":
    time.sleep(1)
    state["silent"] = True
    state["ready"] = False
    log("ERR", "Connection terminated error=\"stand-in went silent\" connIndex=0")
while True:
    time.sleep(1)
"#;

/// The ngrok agent (v3): `http ADDR --log stderr --log-format logfmt --config FILE... [--domain D]`
/// with `NGROK_AUTHTOKEN`; its local API on the `web_addr` of the last config file.
const NGROK: &str = r#"
token = os.environ.get("NGROK_AUTHTOKEN")
record(token)

def logfmt(level, msg, **fields):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())
    extra = " ".join(f'{k}="{v}"' if " " in str(v) else f"{k}={v}" for k, v in fields.items())
    print(f't={stamp} lvl={level} msg="{msg}" {extra}'.rstrip(), file=sys.stderr, flush=True)

if not args or args[0] != "http" or len(args) < 2:
    print("ERROR:  unknown command", file=sys.stderr)
    sys.exit(1)
addr = args[1]
configs = [args[i + 1] for i, a in enumerate(args) if a == "--config" and i + 1 < len(args)]
domain = args[args.index("--domain") + 1] if "--domain" in args else None
web_addr = "127.0.0.1:4040"
for path in configs:
    for line in open(path):
        if line.strip().startswith("web_addr:"):
            web_addr = line.split(":", 1)[1].strip().strip('"')

if MODE == "bad-token" or not token:
    print("ERROR:  authentication failed: The authtoken you specified does not look like a proper ngrok tunnel authtoken.", file=sys.stderr)
    print(f"ERROR:  Your authtoken: {token}", file=sys.stderr)
    print("ERROR:  Instructions to install your authtoken are on your ngrok dashboard:", file=sys.stderr)
    print("ERROR:  https://dashboard.ngrok.com/get-started/your-authtoken", file=sys.stderr)
    print("ERROR:", file=sys.stderr)
    print("ERROR:  ERR_NGROK_105", file=sys.stderr)
    print("ERROR:  https://ngrok.com/docs/errors/err_ngrok_105", file=sys.stderr, flush=True)
    sys.exit(1)

name = "".join(random.choice(string.hexdigits.lower()[:16]) for _ in range(12))
public = f"https://{domain}" if domain else f"https://{name}.ngrok-free.app"
state = {"silent": False}

class Api(Local):
    def do_GET(self):
        if state["silent"]:
            # The session closed: the tunnel is no longer listed, and slowly (a probe still in
            # flight when the supervisor's own periodic check comes round).
            time.sleep(1)
            body, code = {"tunnels": [], "uri": "/api/tunnels"}, 200
        elif self.path == "/api/tunnels":
            body, code = {"tunnels": [{"name": "command_line", "ID": "1a2b3c", "uri": "/api/tunnels/command_line",
                           "public_url": public, "proto": "https",
                           "config": {"addr": addr, "inspect": True},
                           "metrics": {"conns": {"count": 0}, "http": {"count": 0}}}],
                          "uri": "/api/tunnels"}, 200
        else:
            body, code = {"error_code": 100, "status_code": 404, "msg": "not found"}, 404
        self.answer(code, body)

logfmt("info", "no configuration paths supplied" if not configs else "open config file", path=",".join(configs), err="nil")
logfmt("info", "starting web service", obj="web", addr=web_addr, allow_hosts="[]")
server = serve(web_addr, Api)
time.sleep(0.3)
logfmt("info", "client session established", obj="tunnels.session")
logfmt("info", "tunnel session started", obj="tunnels.session")
logfmt("info", "started tunnel", obj="tunnels", name="command_line", addr=addr, url=public)
if MODE == "goes-silent":
    time.sleep(1)
    state["silent"] = True
    logfmt("eror", "session closing", obj="tunnels.session", err="stand-in went silent")
while True:
    time.sleep(1)
"#;
