//! The command line's definition (clap): global options, commands and their arguments.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand};

use nevermiss_engine::engine::EngineConfig;

pub const DEFAULT_RECEIVER_ADDR: &str = "127.0.0.1:8787";
pub const DEFAULT_API_ADDR: &str = "127.0.0.1:8788";
/// Where `demo` keeps its data, inside the data dir: apart from real jobs.
pub const DEMO_DIR: &str = "demo";

#[derive(Debug, Parser)]
#[command(
    name = "nevermiss",
    version,
    about = "Never miss the end of a long job on someone else's cloud.",
    long_about = "NeverMiss watches long jobs on the clouds it ships (`nevermiss track --help` names them), on any \
other job API through a recipe you write, or from your own agent through the generic signed-webhook contract. \
Webhooks arrive at the receiver (POST /hooks/{provider}); a reconcile \
scheduler polls every unfinished job; both meet at one guarded write, and each finished job gives one \
notification.\n\nWithout a command, `nevermiss` opens the desktop app with the engine inside it; without a display \
(a server over SSH) it runs as `nevermiss serve`.",
    after_help = "Secrets come from NEVERMISS_<PROVIDER>_WEBHOOK_SECRET and NEVERMISS_<PROVIDER>_API_KEY, else the \
secret store; NEVERMISS_<PROVIDER>_BASE_URL points a provider at another API (PROVIDER: GENERIC, REPLICATE, \
OPENAI, ANTHROPIC, FAL, or a recipe's name in capitals).\n\nExit codes, the same for every command: 0 done, 1 refused or \
failed (the reason on one line), 2 a usage error, 69 no running instance reachable (the commands that talk to one); \
`wait` adds 10 failed, 11 canceled, 124 timed out."
)]
pub struct Cli {
    #[command(flatten)]
    pub options: Options,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Args)]
pub struct Options {
    /// Where the database, the API token and the secret store live [default: the OS data dir,
    /// ~/.local/share/nevermiss on Linux]
    #[arg(long, global = true, env = "NEVERMISS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Address of the webhook receiver, the only port a tunnel may expose [default: 127.0.0.1:8787]
    #[arg(long, global = true, env = "NEVERMISS_RECEIVER_ADDR", value_name = "ADDR", value_parser = parse_addr)]
    pub receiver_addr: Option<SocketAddr>,

    /// Address of the admin API and web UI, loopback only unless `serve --public-api` (a hub)
    /// [default: 127.0.0.1:8788]
    #[arg(long, global = true, env = "NEVERMISS_API_ADDR", value_name = "ADDR", value_parser = parse_addr)]
    pub api_addr: Option<SocketAddr>,

    /// Seconds between reconcile passes, at least 5 [default: the stored setting, else 60]
    #[arg(long, global = true, env = "NEVERMISS_POLL_INTERVAL", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(5..))]
    pub poll_interval: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the engine without a window (a server, a CI job, a machine without a display)
    Serve {
        /// The database: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB` to run as one of a fleet of
        /// `serve` processes on one PostgreSQL database [default: SQLite in the data dir]
        #[arg(long, env = "NEVERMISS_DATABASE_URL", value_name = "URL", hide_env_values = true)]
        database: Option<String>,
        /// Let the admin API listen on a non-loopback --api-addr, as a hub other machines' apps
        /// connect to with device tokens (`nevermiss devices add NAME`). Never by accident: the
        /// API stays loopback only without it
        #[arg(long, env = "NEVERMISS_PUBLIC_API")]
        public_api: bool,
        /// With --public-api: answer plain HTTP from other machines too. Without it only loopback
        /// peers (a TLS reverse proxy on this machine) are answered; see the book's page "A hub"
        /// (docs/src/hub.md)
        #[arg(long, env = "NEVERMISS_INSECURE_HTTP", requires = "public_api")]
        insecure_http: bool,
    },
    /// A hub's devices: `add NAME` prints the new device's token (once), `list`, `revoke NAME`
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Start watching a job; it is polled even if no webhook ever arrives
    Track {
        #[arg(help = provider_help())]
        provider: String,
        /// The provider's id of the job (prediction, response, batch, session, request id)
        job_id: String,
        /// A name to recognise it by
        #[arg(long, value_name = "TEXT")]
        label: Option<String>,
        /// Where to poll it, when the id alone does not say (fal: the `status_url` of the submission)
        #[arg(long, value_name = "URL")]
        status_url: Option<String>,
        /// Put it in a group (a sweep, a batch per shard): the group's end is announced once
        #[arg(long, value_name = "NAME")]
        group: Option<String>,
        /// Print the tracked job as JSON
        #[arg(long)]
        json: bool,
    },
    /// Stop watching a job and forget it: its row, timeline and pending notifications go (a
    /// webhook that comes later for it starts a new job)
    Untrack {
        #[arg(help = provider_help())]
        provider: String,
        /// The provider's id of the job
        job_id: String,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// List jobs, newest first
    Jobs {
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
        /// Only jobs in this state (unknown, queued, running, succeeded, failed, canceled)
        #[arg(long)]
        state: Option<String>,
        /// Only jobs of this provider
        #[arg(long)]
        provider: Option<String>,
        /// At most this many jobs (1 or more)
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Print the public webhook base URL (the tunnel's, or the local one when no tunnel runs)
    Url {
        /// Print the URL, whether it is public and why not, as JSON
        #[arg(long)]
        json: bool,
    },
    /// Track a job if needed and wait until it ends, or wait until every job of a group has
    /// ended (--group); print the final states. Exit 0 all succeeded, 10 any failed or needs
    /// input, 11 any canceled and none failed, 124 timed out, 69 no running instance reachable
    Wait {
        #[arg(required_unless_present = "group", help = provider_help())]
        provider: Option<String>,
        /// The provider's id of the job
        #[arg(required_unless_present = "group")]
        job_id: Option<String>,
        /// Wait for every job of this group instead of one job
        #[arg(long, value_name = "NAME", conflicts_with_all = ["provider", "job_id"])]
        group: Option<String>,
        /// Give up after this many seconds (exit 124)
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Print the job (or the group and its jobs) as JSON at the end
        #[arg(long)]
        json: bool,
    },
    /// Ask the provider to cancel a running job (its own cancel call); the job then ends as the
    /// provider says. Exit 0 the provider accepted, 1 otherwise (the answer printed), 69 no
    /// running instance reachable
    Cancel {
        #[arg(help = provider_help())]
        provider: String,
        /// The provider's id of the job
        job_id: String,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Open the web UI of the running instance in the browser (prints its URL with a one-time
    /// code, valid for a minute)
    Open,
    /// The providers of the running instance (where each comes from, whether its key is set, the
    /// recipes it refused); `check FILE` says whether a recipe is valid (exit 0) or why not, one
    /// line naming the file and the key (exit 1)
    Providers {
        #[command(subcommand)]
        command: Option<ProvidersCommand>,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Start the app with a simulated provider that runs jobs and sends flaky webhooks, to see
    /// duplicates refused, stale events ignored and, with drops on, reconcile rescues climb.
    /// Its data lives in `<data-dir>/demo`, apart from real jobs; while it runs, the other commands
    /// talk to it when nothing runs in the data dir itself.
    Demo(DemoArgs),
    /// The running instance's settings: listed, or `set KEY VALUE` (durations as `30m`, `1h 30m`,
    /// `3d` or seconds; `poll_interval_secs`, `sla_secs`, `stuck_threshold_secs.openai`, ...)
    Settings {
        #[command(subcommand)]
        command: Option<SettingsCommand>,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// The providers' secrets: which are set and where they are kept, or `set PROVIDER NAME` (the
    /// value read from standard input, never from the command line) and `unset PROVIDER NAME`
    Secrets {
        #[command(subcommand)]
        command: Option<SecretsCommand>,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Where notifications go besides the desktop: listed, or `add NAME KIND ...`, `test NAME`,
    /// `remove NAME` (a server needs no browser to set them up)
    Channels {
        #[command(subcommand)]
        command: Option<ChannelsCommand>,
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Print a shell's completion script: `nevermiss completions bash > ~/.local/share/bash-completion/completions/nevermiss`
    /// (zsh: a file `_nevermiss` in a directory of $fpath; fish: ~/.config/fish/completions/nevermiss.fish)
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `nevermiss man > ~/.local/share/man/man1/nevermiss.1`
    Man,
}

/// The help of a PROVIDER argument: every provider the program knows by name.
fn provider_help() -> String {
    format!(
        "The provider: {}, or the name of a recipe of your own (`nevermiss providers` lists the running instance's)",
        nevermiss_engine::providers::recipe::RESERVED_NAMES.join(", ")
    )
}

#[derive(Debug, Subcommand)]
pub enum ProvidersCommand {
    /// Check a recipe (a provider described in a TOML file) without starting anything
    Check {
        /// The recipe's file
        file: PathBuf,
    },
    /// Poll one job through the running instance and print what each of the recipe's
    /// expressions read (nothing is merged)
    Test {
        /// The provider's name
        name: String,
        /// The job's id, as the provider writes it
        job_id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SettingsCommand {
    /// Change one setting (answered with the field's error when the value is refused)
    Set {
        /// The setting's name, as `nevermiss settings` lists it
        key: String,
        value: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Set a secret: its value is read from standard input (typed unseen on a terminal, or piped:
    /// `pass show replicate | nevermiss secrets set replicate api-key`)
    Set {
        provider: String,
        /// `api-key`, `webhook-secret`, or a recipe's named secret (`org` for `{secret.org}`)
        name: String,
    },
    /// Forget a stored secret (a variable that sets it still does)
    Unset { provider: String, name: String },
}

#[derive(Debug, Subcommand)]
pub enum ChannelsCommand {
    /// Add a channel, or replace the one of that name: `channels add phone ntfy --url
    /// https://ntfy.sh/my-topic`, `channels add ci webhook --url https://... --secret-stdin`,
    /// `channels add mail email --host smtp.example.com --from a@example.com --to me@example.com
    /// --username me --secret-stdin`
    Add(ChannelAdd),
    /// Send a test notification through a channel and print its answer
    Test { name: String },
    /// Remove a channel (what waited for it is dropped)
    Remove { name: String },
}

#[derive(Debug, Clone, Args)]
pub struct ChannelAdd {
    /// Lower-case letters, digits, - and _
    pub name: String,
    /// webhook, ntfy, slack, discord or email
    pub kind: String,
    /// The address it posts to (webhook, ntfy's topic URL, Slack's or Discord's incoming webhook)
    #[arg(long)]
    pub url: Option<String>,
    /// email: the SMTP server
    #[arg(long)]
    pub host: Option<String>,
    /// email: its port [default: by --tls]
    #[arg(long)]
    pub port: Option<u16>,
    /// email: starttls, tls or none
    #[arg(long)]
    pub tls: Option<String>,
    /// email: the SMTP user
    #[arg(long)]
    pub username: Option<String>,
    /// email: the sender's address
    #[arg(long)]
    pub from: Option<String>,
    /// email: where it goes
    #[arg(long)]
    pub to: Option<String>,
    /// Which ends it announces, comma-separated: succeeded, failed, canceled, stuck, needs_input
    /// [default: all]
    #[arg(long, value_delimiter = ',')]
    pub outcomes: Vec<String>,
    /// Read its secret from standard input: the webhook's signing secret, ntfy's access token or
    /// the SMTP password
    #[arg(long)]
    pub secret_stdin: bool,
}

#[derive(Debug, Subcommand)]
pub enum DevicesCommand {
    /// Add a device and print its token (shown once; paste it in the device's Settings, Hub)
    Add {
        /// Lower-case letters, digits, - and _
        name: String,
    },
    /// List the devices, with what waits for each
    List {
        /// Print the API's JSON answer
        #[arg(long)]
        json: bool,
    },
    /// Revoke a device: its token stops working and what waited for it is dropped
    Revoke { name: String },
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Share of webhooks never sent (reconciliation must rescue those jobs)
    #[arg(long, default_value_t = 0.3)]
    pub drop_rate: f64,
    /// Share of webhooks sent twice
    #[arg(long, default_value_t = 0.2)]
    pub duplicate_rate: f64,
    /// Share of webhooks held back until after the next one
    #[arg(long, default_value_t = 0.1)]
    pub reorder_rate: f64,
    /// Share of webhooks delayed by up to 5 seconds
    #[arg(long, default_value_t = 0.2)]
    pub delay_rate: f64,
    /// Jobs to run in all [default: until stopped]
    #[arg(long)]
    pub jobs: Option<u64>,
    /// Seconds between new jobs
    #[arg(long, default_value_t = 3)]
    pub every: u64,
    /// No window, even where there is a display
    #[arg(long)]
    pub headless: bool,
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let resolved = s.to_socket_addrs().ok().and_then(|mut addrs| addrs.next());
    resolved.ok_or_else(|| format!("bad address {s:?}: expected HOST:PORT, like 127.0.0.1:8787"))
}

impl Options {
    pub fn data_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(dir) = &self.data_dir {
            return Ok(dir.clone());
        }
        directories::BaseDirs::new()
            .map(|dirs| dirs.data_dir().join("nevermiss"))
            .ok_or_else(|| anyhow!("cannot find the OS data dir; pass --data-dir"))
    }

    pub fn engine_config(&self) -> anyhow::Result<EngineConfig> {
        Ok(EngineConfig {
            data_dir: self.data_dir()?,
            receiver_addr: self.receiver_addr.unwrap_or_else(|| DEFAULT_RECEIVER_ADDR.parse().unwrap()),
            api_addr: self.api_addr.unwrap_or_else(|| DEFAULT_API_ADDR.parse().unwrap()),
            poll_interval_override: self.poll_interval,
            simulation: false,
            max_receiver_connections: nevermiss_engine::receiver::MAX_CONNECTIONS,
            receiver_body_budget: nevermiss_engine::receiver::BODIES_IN_FLIGHT,
            notifications_gated: false,
            database_url: None,
            public_api: false,
            insecure_http: false,
            notify_retry_unit: nevermiss_engine::outbox::RETRY_UNIT,
            ui_code_ttl: nevermiss_engine::api::handover::UI_CODE_TTL,
        })
    }
}
