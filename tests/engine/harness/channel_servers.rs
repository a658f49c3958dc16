//! The servers the channel senders talk to in their tests, real and on loopback:
//! - `Recorder`: an HTTP server (axum) that records every request whole (method, path, query,
//!   headers, body) and answers what the test queued (a status, headers, a body), else 200;
//!   it stands for ntfy, a webhook receiver, Slack and Discord, each test checking the shape
//!   that service documents;
//! - `SmtpServer`: Python's aiosmtpd (Debian's `python3-aiosmtpd`, installed by `make deps-test`) as
//!   a child process, plain, with STARTTLS or with TLS from the first byte (a certificate from a
//!   CA of its own, made by openssl), writing each message it accepts, parsed by Python's own
//!   `email` package, to a file; killed when dropped.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::serve_child::free_addr;
use super::stand_in::serve;
use super::waiting::{wait_for, wait_until};

/// One request a `Recorder` received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status it was answered.
    pub status: u16,
}

impl Request {
    /// A header's value as text (empty when absent).
    pub fn header(&self, name: &str) -> String {
        super::stand_in::header(&self.headers, name)
    }

    /// The body as JSON; panics (showing it) when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("the body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// What a `Recorder` answers to one request.
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// An HTTP server that records every request and answers: a refusal set for requests whose
/// body holds some text (`refuse_matching`), else the one set for every request (`refuse_all`),
/// else the queued answers in turn, then 200 with `ok`.
#[derive(Default)]
pub struct Recorder {
    requests: Mutex<Vec<Request>>,
    answers: Mutex<VecDeque<Canned>>,
    refusing: Mutex<Option<Canned>>,
    refusing_matching: Mutex<Vec<(String, Canned)>>,
}

fn canned(status: u16, body: &str) -> Canned {
    Canned { status, headers: vec![], body: body.to_owned() }
}

impl Recorder {
    /// A new recorder on `127.0.0.1:0`; returns it and its base URL (`http://127.0.0.1:PORT`).
    pub async fn start() -> (Arc<Recorder>, String) {
        let recorder = Arc::new(Recorder::default());
        let router = axum::Router::new().fallback(record).with_state(recorder.clone());
        (recorder, serve(router).await)
    }

    /// Queues the answer to the next request not yet answered.
    pub fn answer(&self, status: u16, headers: &[(&'static str, &str)], body: &str) {
        self.answers.lock().unwrap().push_back(Canned {
            status,
            headers: headers.iter().map(|(n, v)| (*n, (*v).to_owned())).collect(),
            body: body.to_owned(),
        });
    }

    /// Answers `status` and `body` to every request until `accept` (a service that is down).
    pub fn refuse_all(&self, status: u16, body: &str) {
        *self.refusing.lock().unwrap() = Some(canned(status, body));
    }

    /// Answers `status` and `body` to every request whose body holds `needle`, until `accept`
    /// (a service that refuses one message).
    pub fn refuse_matching(&self, needle: &str, status: u16, body: &str) {
        self.refusing_matching.lock().unwrap().push((needle.to_owned(), canned(status, body)));
    }

    /// Stops refusing (`refuse_all`, `refuse_matching`).
    pub fn accept(&self) {
        *self.refusing.lock().unwrap() = None;
        self.refusing_matching.lock().unwrap().clear();
    }

    /// Every request received, oldest first.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The only request received; panics naming how many there were otherwise.
    pub fn only(&self) -> Request {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected one request, got {requests:#?}");
        requests.into_iter().next().unwrap()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        self.requests.lock().unwrap().clear();
    }
}

async fn record(State(recorder): State<Arc<Recorder>>, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body).into_owned();
    let matching =
        recorder.refusing_matching.lock().unwrap().iter().find(|(needle, _)| text.contains(needle.as_str())).map(|(_, c)| c.clone());
    let canned = matching
        .or_else(|| recorder.refusing.lock().unwrap().clone())
        .or_else(|| recorder.answers.lock().unwrap().pop_front())
        .unwrap_or_else(|| canned(200, "ok"));
    recorder.requests.lock().unwrap().push(Request {
        method,
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers,
        body,
        status: canned.status,
    });
    let Canned { status, headers, body } = canned;
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    for (name, value) in headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

/// The SMTP server's program: aiosmtpd's `SMTP` protocol on asyncio, in one of three modes
/// (`SmtpMode`): plain, offering AUTH (PLAIN, LOGIN) without TLS; STARTTLS required before
/// anything else, and AUTH only after it; or TLS from the first byte. It takes only
/// `SMTP_LOGIN`/`SMTP_PASSWORD` (a client may also not log in) and writes each AUTH attempt (who,
/// and whether the connection was encrypted) as a line of `<dir>/auth.jsonl`. Its handler refuses
/// recipients at `nobody@` (550) and writes each accepted message as JSON (who logged in, whether
/// over TLS, the envelope, and the headers and text as Python's `email` parser decodes them) to
/// `<dir>/<n>.json`, answering `250 OK: queued as nevermiss-<n>`. With TLS its certificate is
/// `<dir>/server.crt` for localhost and 127.0.0.1, signed by `<dir>/ca.pem`.
const SMTP_SERVER: &str = r#"
import asyncio, email, email.policy, json, os, ssl, sys
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

out, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def encrypted(server):
    return server.transport.get_extra_info("ssl_object") is not None

def authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"alice" and auth_data.password == b"s3cret p\xc3\xa4ss"
    login = auth_data.login.decode() if isinstance(auth_data, LoginPassword) else None
    with open(os.path.join(out, "auth.jsonl"), "a") as f:
        f.write(json.dumps({"login": login, "tls": encrypted(server), "ok": ok}) + "\n")
    return AuthResult(success=ok, handled=False, auth_data=auth_data)

class Handler:
    count = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("nobody@"):
            return "550 5.1.1 nobody here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        Handler.count += 1
        n = Handler.count
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        record = {
            "login": session.auth_data.login.decode() if session.authenticated else None,
            "tls": encrypted(server),
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "subject": str(parsed["subject"]),
            "from": str(parsed["from"]),
            "to": str(parsed["to"]),
            "content_type": parsed.get_content_type(),
            "text": parsed.get_content(),
        }
        path = os.path.join(out, "%d.json" % n)
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.rename(path + ".tmp", path)
        return "250 OK: queued as nevermiss-%d" % n

async def main():
    context = None
    if mode != "plain":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(os.path.join(out, "server.crt"), os.path.join(out, "server.key"))
    if mode == "starttls":
        smtp = lambda: SMTP(Handler(), hostname="smtp.test", authenticator=authenticator, tls_context=context, require_starttls=True, auth_require_tls=True)
    else:
        # aiosmtpd knows of STARTTLS only: with TLS from the first byte, AUTH is over TLS anyway.
        smtp = lambda: SMTP(Handler(), hostname="smtp.test", authenticator=authenticator, auth_require_tls=False)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(smtp, "127.0.0.1", port, ssl=context if mode == "tls" else None)
    await server.serve_forever()

asyncio.run(main())
"#;

/// How the SMTP server takes connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpMode {
    /// Plain text, no STARTTLS offered (a local relay).
    Plain,
    /// STARTTLS required before anything else, AUTH only over TLS (submission, 587).
    Starttls,
    /// TLS from the first byte (submissions, 465).
    Tls,
}

/// The login and password the SMTP server takes.
pub const SMTP_LOGIN: &str = "alice";
pub const SMTP_PASSWORD: &str = "s3cret päss";

/// A real SMTP server (aiosmtpd) on a free loopback port, stopped when dropped.
pub struct SmtpServer {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
    /// With TLS: the CA that signed its certificate (`ca.pem`).
    pub ca: Option<PathBuf>,
}

/// The first Python that can import aiosmtpd: `python3` on the PATH, else the system's (a
/// pyenv or venv python3 on the PATH does not see Debian's packages).
fn python_with_aiosmtpd() -> PathBuf {
    for python in ["python3", "/usr/bin/python3"] {
        let imports = Command::new(python).args(["-c", "import aiosmtpd"]).stdout(Stdio::null()).stderr(Stdio::null()).status();
        if matches!(imports, Ok(status) if status.success()) {
            return PathBuf::from(python);
        }
    }
    panic!("no python3 can import aiosmtpd, the SMTP server the e-mail channel is tested against: run `make deps-test` (it installs Debian's python3-aiosmtpd)");
}

impl SmtpServer {
    /// Starts a plain one and waits until its port accepts connections.
    pub async fn start() -> SmtpServer {
        SmtpServer::start_in(SmtpMode::Plain).await
    }

    /// Starts one in `mode` (with TLS, with a certificate from a CA of its own) and waits until
    /// its port accepts connections.
    pub async fn start_in(mode: SmtpMode) -> SmtpServer {
        SmtpServer::start_at(mode, free_addr().port()).await
    }

    /// As `start_in`, on `port` (one from `free_addr` that a channel was pointed at before its
    /// server was up).
    pub async fn start_at(mode: SmtpMode, port: u16) -> SmtpServer {
        let python = python_with_aiosmtpd();
        let dir = tempfile::tempdir().unwrap();
        let ca = (mode != SmtpMode::Plain).then(|| super::postgres::make_certificates(dir.path()));
        let script = dir.path().join("smtp_server.py");
        std::fs::write(&script, SMTP_SERVER).unwrap();
        let mode_arg = match mode {
            SmtpMode::Plain => "plain",
            SmtpMode::Starttls => "starttls",
            SmtpMode::Tls => "tls",
        };
        let child = Command::new(&python)
            .arg(&script)
            .arg(dir.path())
            .arg(port.to_string())
            .arg(mode_arg)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{} cannot start: {e}", python.display()));
        let mut server = SmtpServer { child, dir, port, ca };
        let stderr = server.dir.path().join("stderr.log");
        wait_until("the SMTP server accepts connections", || {
            let exited = server.child.try_wait().unwrap();
            if let Some(status) = exited {
                panic!("the SMTP server exited ({status}): {}", std::fs::read_to_string(&stderr).unwrap_or_default());
            }
            async move { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() }
        })
        .await;
        server
    }

    /// The `n`th message it accepted (from 1), as its handler recorded it; waits for it.
    pub async fn message(&self, n: usize) -> Value {
        let path = self.dir.path().join(format!("{n}.json"));
        wait_for(&format!("the SMTP server has received message {n}"), || {
            let found = std::fs::read(&path).ok().map(|bytes| serde_json::from_slice(&bytes).unwrap());
            async move { found }
        })
        .await
    }

    /// Every AUTH attempt so far, oldest first: `{"login", "tls", "ok"}`.
    pub fn auth_attempts(&self) -> Vec<Value> {
        let lines = std::fs::read_to_string(self.dir.path().join("auth.jsonl")).unwrap_or_default();
        lines.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    /// How many messages it accepted so far.
    pub fn count(&self) -> usize {
        std::fs::read_dir(self.dir.path()).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json")).count()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
