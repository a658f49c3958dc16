//! The command line (contract §1): `nevermiss` (the desktop app), `serve`, and the client
//! commands that talk to a running instance through its admin API (`track`, `jobs`, `url`, `open`).
//! An option beats its variable, a variable beats the stored setting.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Parser, Subcommand};
use serde_json::Value;

use nevermiss_engine::engine::{Engine, EngineConfig, InstanceInfo, INSTANCE_FILE, TOKEN_FILE};
use nevermiss_engine::job::Job;
use nevermiss_engine::store::jobs::JobPage;

pub const DEFAULT_RECEIVER_ADDR: &str = "127.0.0.1:8787";
pub const DEFAULT_API_ADDR: &str = "127.0.0.1:8788";

#[derive(Debug, Parser)]
#[command(
    name = "nevermiss",
    version,
    about = "Never miss the end of a long job on someone else's cloud.",
    long_about = "NeverMiss watches long jobs (Replicate, OpenAI, Anthropic, fal, or your own agent through the \
generic signed-webhook contract). Webhooks arrive at the receiver (POST /hooks/{provider}); a reconcile \
scheduler polls every unfinished job; both meet at one guarded write, and each finished job gives one \
notification.\n\nWithout a command, `nevermiss` opens the desktop app with the engine inside it.",
    after_help = "Secrets come from NEVERMISS_<PROVIDER>_WEBHOOK_SECRET and NEVERMISS_<PROVIDER>_API_KEY, else the \
secret store; NEVERMISS_<PROVIDER>_BASE_URL points a provider at another API (PROVIDER: GENERIC, REPLICATE, \
OPENAI, ANTHROPIC, FAL).\n\nExit codes, the same for every command: 0 done, 1 refused or failed (the reason on one \
line), 2 a usage error, 69 no running instance reachable (the commands that talk to one); `wait` adds 10 failed, 11 \
canceled, 124 timed out."
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
        /// peers (a TLS reverse proxy on this machine) are answered; see the README's "A hub"
        #[arg(long, env = "NEVERMISS_INSECURE_HTTP", requires = "public_api")]
        insecure_http: bool,
    },
    /// A hub's devices: `add NAME` prints the new device's token (once), `list`, `revoke NAME`
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// Start watching a job; it is polled even if no webhook ever arrives
    Track {
        /// generic, replicate, openai, anthropic or fal
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
    Url,
    /// Track a job if needed and wait until it ends, or wait until every job of a group has
    /// ended (--group); print the final states. Exit 0 all succeeded, 10 any failed or needs
    /// input, 11 any canceled and none failed, 124 timed out, 69 no running instance reachable
    Wait {
        /// generic, replicate, openai, anthropic or fal
        #[arg(required_unless_present = "group")]
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
        /// With --group: print the group and its jobs as JSON at the end
        #[arg(long, requires = "group")]
        json: bool,
    },
    /// Ask the provider to cancel a running job (its own cancel call); the job then ends as the
    /// provider says. Exit 0 the provider accepted, 1 otherwise (the answer printed), 69 no
    /// running instance reachable
    Cancel {
        /// replicate, openai, anthropic or fal
        provider: String,
        /// The provider's id of the job
        job_id: String,
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
    },
    /// Start the app with a simulated provider that runs jobs and sends flaky webhooks, to see
    /// duplicates refused, stale events ignored and, with drops on, reconcile rescues climb.
    /// Its data lives in `<data-dir>/demo`, apart from real jobs.
    Demo(DemoArgs),
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

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to stdout and succeed.
        Err(e) if !e.use_stderr() => e.exit(),
        // A usage error is one line like every other error (clap's own is several).
        Err(e) => {
            let rendered = e.to_string();
            // The message is the first paragraph (clap lists missing arguments under it).
            let message: Vec<&str> = rendered.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
            eprintln!("nevermiss: {} (see --help)", message.join(" ").trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let verbose = matches!(cli.command, None | Some(Command::Serve { .. }));
    init_tracing(if verbose { "info" } else { "warn" });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<crate::wait::Ended>().is_some() => {
            let ended = e.downcast_ref::<crate::wait::Ended>().expect("checked above");
            eprintln!("nevermiss: {ended}");
            ExitCode::from(ended.code)
        }
        Err(e) => {
            eprintln!("nevermiss: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        // An error's message often includes its source already: say each cause once.
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

pub fn init_tracing(default: &str) {
    use tracing_subscriber::field::MakeExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Every field's value escaped (`plain_text::escaped`): a label holding a newline and a fake
    // timestamp cannot become a log line of its own.
    let fields = tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        let text = nevermiss_engine::plain_text::escaped(&text);
        match field.name() {
            "message" => write!(writer, "{text}"),
            name => write!(writer, "{name}={text}"),
        }
    })
    .delimited(" ");
    let _ = tracing_subscriber::fmt()
        .fmt_fields(fields)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// `nevermiss providers`: the running instance's providers, one a line, then the recipes it refused.
async fn list_providers(options: Options) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    let list: nevermiss_engine::api::providers::ProviderList =
        serde_json::from_value(client.get("/api/providers").await?).context("the instance's list of providers is not one")?;
    let width = list.providers.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for p in &list.providers {
        let key = if p.api_key_set { "API key set" } else { "no API key" };
        println!("{:width$}  {key:<11}  {}", p.name, p.origin);
    }
    for line in &list.refused_recipes {
        println!("refused: {line}");
    }
    Ok(())
}

/// `nevermiss providers test NAME JOB_ID`: one poll through the running instance, each
/// expression's output on the provider's real answer, and what NeverMiss concludes.
async fn test_provider(options: Options, name: &str, job_id: &str) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    let path = format!("/api/providers/{}/test", crate::wait::encode(name));
    let request = client.http.post(format!("{}{path}", client.base)).json(&serde_json::json!({ "job_id": job_id }));
    let trace: nevermiss_engine::providers::PollTrace =
        serde_json::from_value(client.send(request).await?.1).context("the instance's answer is not a poll's trace")?;
    match trace.status {
        Some(status) => println!("{} -> {status}", trace.request),
        None => println!("{}", trace.request),
    }
    let width = trace.reads.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let expression_width = trace.reads.iter().map(|r| r.expression.chars().count().min(40)).max().unwrap_or(0);
    for read in &trace.reads {
        let output = match &read.output {
            Ok(value) => value.clone(),
            Err(e) => format!("error: {e}"),
        };
        println!("{:width$}  {:expression_width$}  {}", read.key, read.expression, nevermiss_engine::plain_text::one_line(&output));
    }
    println!("{}", trace.conclusion);
    Ok(())
}

/// `nevermiss providers check FILE`: the recipe read and checked as the engine would load it.
fn check_recipe(file: &Path) -> anyhow::Result<()> {
    use nevermiss_engine::providers::recipe::Recipe;
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let recipe = Recipe::parse(&file.display().to_string(), &text)?;
    let ends = recipe.states.iter().filter(|(_, s)| s.is_terminal()).count();
    println!(
        "{}: the recipe of {:?} is valid: {} values mapped ({} of them an end), a value it does not know is {}",
        file.display(),
        recipe.name,
        recipe.states.len(),
        ends,
        recipe.when_unknown.as_str()
    );
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let options = cli.options;
    match cli.command {
        None => run_desktop(options),
        Some(Command::Serve { database, public_api, insecure_http }) => {
            runtime()?.block_on(serve(options, database, public_api, insecure_http))
        }
        Some(Command::Devices(command)) => runtime()?.block_on(devices(options, command)),
        Some(Command::Providers { command: Some(ProvidersCommand::Check { file }) }) => check_recipe(&file),
        Some(Command::Providers { command: None }) => runtime()?.block_on(list_providers(options)),
        Some(Command::Providers { command: Some(ProvidersCommand::Test { name, job_id }) }) => {
            runtime()?.block_on(test_provider(options, &name, &job_id))
        }
        Some(Command::Track { provider, job_id, label, status_url, group }) => {
            runtime()?.block_on(track(options, provider, job_id, TrackOptions { label, status_url, group }))
        }
        Some(Command::Jobs { json, state, provider, limit }) => runtime()?.block_on(jobs(options, json, state, provider, limit)),
        Some(Command::Url) => runtime()?.block_on(url(options)),
        Some(Command::Wait { provider, job_id, group, timeout, json }) => runtime()?.block_on(async {
            let client = Client::connect(&options).await?;
            let timeout = timeout.map(std::time::Duration::from_secs);
            match (group, provider, job_id) {
                (Some(group), _, _) => crate::wait::wait_group(&client, group, timeout, json).await,
                (None, Some(provider), Some(job_id)) => crate::wait::wait(&client, provider, job_id, timeout).await,
                _ => anyhow::bail!("wait needs PROVIDER JOB_ID, or --group NAME"),
            }
        }),
        Some(Command::Cancel { provider, job_id }) => runtime()?.block_on(async {
            let client = Client::connect(&options).await?;
            crate::cancel::cancel(&client, &provider, &job_id).await
        }),
        Some(Command::Open) => runtime()?.block_on(open_ui(options)),
        Some(Command::Demo(args)) => demo(options, args),
    }
}

#[cfg(feature = "desktop")]
fn has_display() -> bool {
    std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
}

fn demo(options: Options, args: DemoArgs) -> anyhow::Result<()> {
    use nevermiss_engine::secrets::SecretKind;
    use nevermiss_engine::simulator::{Simulator, SimulatorConfig};

    let runtime = runtime()?;
    let mut config = options.engine_config()?;
    config.data_dir = config.data_dir.join("demo");
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    config.receiver_addr = options.receiver_addr.unwrap_or(any_port);
    config.api_addr = options.api_addr.unwrap_or(any_port);
    config.poll_interval_override = Some(options.poll_interval.unwrap_or(10));
    config.simulation = true;
    #[cfg(feature = "desktop")]
    let windowed = !args.headless && has_display();
    #[cfg(not(feature = "desktop"))]
    let windowed = false;
    // With a window, notifications wait for it (they open their job when clicked).
    config.notifications_gated = windowed;
    let open_job = std::sync::Arc::new(nevermiss_engine::channels::desktop::OpenJob::default());
    let engine = runtime.block_on(Engine::start(config, nevermiss_engine::channels::desktop::desktop_notifier(open_job.clone())))?;
    let simulator = runtime.block_on(async {
        let services = &engine.services;
        for kind in [SecretKind::WebhookSecret, SecretKind::ApiKey] {
            if services.secrets.get("generic", kind).is_none() {
                services.secrets.set("generic", kind, Some(&hex::encode(rand::random::<[u8; 16]>())))?;
            }
        }
        let simulator = Simulator::start(SimulatorConfig {
            target_url: format!("http://{}", engine.receiver_addr),
            secret: services.secrets.get("generic", SecretKind::WebhookSecret).unwrap_or_default(),
            api_key: services.secrets.get("generic", SecretKind::ApiKey).unwrap_or_default(),
            jobs: args.jobs,
            new_job_every: std::time::Duration::from_secs(args.every.max(1)),
            duplicate_rate: args.duplicate_rate,
            reorder_rate: args.reorder_rate,
            delay_rate: args.delay_rate,
            drop_rate: args.drop_rate,
            job_prefix: "sim".into(),
            ..SimulatorConfig::default()
        })
        .await?;
        services.settings.set("generic.base_url", &simulator.base_url).await?;
        anyhow::Ok(simulator)
    })?;
    // Like a user who tracks each job when launching it: even a job whose every webhook is lost
    // is known, and reconciliation rescues it.
    let (services, truth, stop) = (engine.services.clone(), simulator.truth_handle(), engine.shutdown_token());
    runtime.spawn(async move {
        let mut known = std::collections::HashSet::new();
        loop {
            let started: Vec<_> = truth.lock().unwrap().values().map(|j| (j.job_id.clone(), j.label.clone())).collect();
            for (job_id, label) in started {
                if known.insert(job_id.clone()) {
                    let key = nevermiss_engine::job::JobKey::new("generic", job_id);
                    let tracked = services
                        .store
                        .write(move |conn| {
                            nevermiss_engine::merge_point::track(conn, &key, Some(&label), None, None, nevermiss_engine::job::now_ms())
                        })
                        .await;
                    match tracked {
                        Ok((_, Some(job))) => services.changes.job_changed(job),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "demo: cannot track a simulated job"),
                    }
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
            }
        }
    });
    eprintln!(
        "SIMULATION: a simulated provider runs jobs and sends flaky webhooks to http://{}/hooks/generic (drop {:.0}%, duplicate {:.0}%, reorder {:.0}%, delay {:.0}%).\nUI: http://{}/#token={}",
        engine.receiver_addr,
        args.drop_rate * 100.0,
        args.duplicate_rate * 100.0,
        args.reorder_rate * 100.0,
        args.delay_rate * 100.0,
        engine.api_addr,
        engine.token
    );
    #[cfg(feature = "desktop")]
    if windowed {
        return crate::desktop::run(runtime, open_job, move || Ok((engine, simulator)));
    }
    drop(open_job); // no window, nothing to open on a click
    runtime.block_on(async {
        wait_for_stop_signal().await;
        simulator.stop();
        engine.shutdown().await;
    });
    Ok(())
}

#[cfg(feature = "desktop")]
fn run_desktop(options: Options) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let open_job = std::sync::Arc::new(nevermiss_engine::channels::desktop::OpenJob::default());
    let notifier = nevermiss_engine::channels::desktop::desktop_notifier(open_job.clone());
    let mut config = options.engine_config()?;
    // Notifications wait for the window: the shell opens the gate once a click can open it.
    config.notifications_gated = true;
    let handle = runtime.handle().clone();
    crate::desktop::run(runtime, open_job, move || Ok((handle.block_on(Engine::start(config, notifier))?, ())))
}

#[cfg(not(feature = "desktop"))]
fn run_desktop(_options: Options) -> anyhow::Result<()> {
    bail!("this build has no window (built without the `desktop` feature); run `nevermiss serve`")
}

async fn serve(options: Options, database: Option<String>, public_api: bool, insecure_http: bool) -> anyhow::Result<()> {
    // Before the engine writes instance.json: a SIGTERM right after start is a clean stop too.
    let stop = stop_signal();
    let config =
        EngineConfig { database_url: database.filter(|url| !url.trim().is_empty()), public_api, insecure_http, ..options.engine_config()? };
    let engine = Engine::start(config, nevermiss_engine::channels::desktop::default_notifier()).await?;
    eprintln!(
        "NeverMiss is running. Webhooks: http://{}/hooks/<provider>  UI: http://{}/#token=…  (Ctrl-C stops)",
        engine.receiver_addr, engine.api_addr
    );
    stop.await;
    engine.shutdown().await;
    Ok(())
}

/// `nevermiss devices ...`, through the running hub's admin API.
async fn devices(options: Options, command: DevicesCommand) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    match command {
        DevicesCommand::Add { name } => {
            let (_, body) =
                client.send(client.http.post(format!("{}/api/devices", client.base)).json(&serde_json::json!({ "name": name }))).await?;
            let token = body.get("token").and_then(Value::as_str).ok_or_else(|| anyhow!("the hub answered no token"))?;
            println!("{token}");
            eprintln!("Device {name:?} added. Paste this token in that machine's NeverMiss: Settings, Hub (it is not shown again).");
        }
        DevicesCommand::List { json } => {
            let (_, body) = client.send(client.http.get(format!("{}/api/devices", client.base))).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&body)?);
                return Ok(());
            }
            let devices = body.get("devices").and_then(Value::as_array).cloned().unwrap_or_default();
            if devices.is_empty() {
                println!("no devices (add one with `nevermiss devices add NAME`)");
            }
            for d in devices {
                let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
                let number = |k: &str| d.get(k).and_then(Value::as_i64).unwrap_or(0);
                println!(
                    "{:<20} {:<8} last seen {:<25} pending {:<5} delivered {}",
                    text("name"),
                    if d.get("enabled").and_then(Value::as_bool).unwrap_or(false) { "on" } else { "off" },
                    text("last_seen_at"),
                    number("pending"),
                    number("delivered")
                );
            }
        }
        DevicesCommand::Revoke { name } => {
            let (_, body) = client.send(client.http.delete(format!("{}/api/devices/{name}", client.base))).await?;
            let dropped = body.get("dropped").and_then(Value::as_i64).unwrap_or(0);
            println!("revoked {name} ({dropped} pending notifications dropped)");
        }
    }
    Ok(())
}

async fn wait_for_stop_signal() {
    stop_signal().await
}

/// Installs the SIGINT and SIGTERM handlers (Windows: its console events) at once (not at the first poll) and returns the wait
/// for either. Called inside the runtime.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler installs");
        let mut interrupt = signal(SignalKind::interrupt()).expect("a SIGINT handler installs");
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    // Windows: Ctrl-C and Ctrl-Break, and the console's close, a logoff or a shutdown.
    #[cfg(windows)]
    {
        use tokio::signal::windows::{ctrl_break, ctrl_c};
        let mut interrupt = ctrl_c().expect("a Ctrl-C handler installs");
        let mut brk = ctrl_break().expect("a Ctrl-Break handler installs");
        let closed = crate::console_events::closed();
        async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = brk.recv() => {}
                _ = closed => {}
            }
        }
    }
    #[cfg(not(any(unix, windows)))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A client of a running instance's admin API.
pub(crate) struct Client {
    pub(crate) base: String,
    token: String,
    pub(crate) http: reqwest::Client,
}

impl Client {
    /// The data dir's running instance, proven to be it: every client command comes through here.
    /// When none can be reached, an error that exits 69 (`wait::UNREACHABLE`), the same for every
    /// command.
    async fn connect(options: &Options) -> anyhow::Result<Client> {
        Client::reach(options).await.map_err(|e| crate::wait::Ended { code: crate::wait::UNREACHABLE, message: one_line(&e) }.into())
    }

    /// The API address: `--api-addr`/variable, else what the running instance wrote in the data
    /// dir, else the default. The token is read from the data dir, and sent only once what
    /// answers there has proved it is this data dir's instance (`verify_instance`).
    async fn reach(options: &Options) -> anyhow::Result<Client> {
        let data_dir = options.data_dir()?;
        let base = match options.api_addr {
            Some(addr) => format!("http://{addr}"),
            None => read_instance(&data_dir).map(|i| i.api_url).unwrap_or_else(|| format!("http://{DEFAULT_API_ADDR}")),
        };
        let token_path = data_dir.join(TOKEN_FILE);
        let token = std::fs::read_to_string(&token_path)
            .with_context(|| format!("cannot read the API token {} (has NeverMiss run with this data dir?)", token_path.display()))?
            .trim()
            .to_owned();
        let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(120)).build()?;
        let client = Client { base, token, http };
        client.verify_instance(&data_dir).await?;
        Ok(client)
    }

    /// Asks what answers at the API address to prove it holds this data dir's token, without
    /// sending it: `GET /api/whoami?challenge=R`, answered with HMAC-SHA256(token, R "\n" the
    /// address it listens on), compared in constant time with the same computed here
    /// (`nevermiss_engine::api::handover`). Another program on the port (another user's, or one
    /// left where the instance used to be) is refused before the token leaves.
    async fn verify_instance(&self, data_dir: &Path) -> anyhow::Result<()> {
        use subtle::ConstantTimeEq;
        let challenge = hex::encode(rand::random::<[u8; 32]>());
        let response = self
            .http
            .get(format!("{}/api/whoami", self.base))
            .query(&[("challenge", &challenge)])
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let proof: Option<String> =
            response.json::<Value>().await.ok().and_then(|body| body.get("proof").and_then(Value::as_str).map(str::to_owned));
        let addr = self.base.strip_prefix("http://").unwrap_or(&self.base);
        let expected = nevermiss_engine::api::handover::whoami_proof(&self.token, &challenge, addr);
        match proof {
            Some(proof) if bool::from(proof.as_bytes().ct_eq(expected.as_bytes())) => Ok(()),
            _ => bail!(
                "what answers at {} is not the NeverMiss of the data dir {} (it cannot prove it holds that data dir's token); the token was not sent",
                self.base,
                data_dir.display()
            ),
        }
    }

    /// The error of a request that got no answer.
    fn unreachable(&self, e: reqwest::Error) -> anyhow::Error {
        if e.is_connect() {
            anyhow!("no NeverMiss is running at {} (start it with `nevermiss serve`)", self.base)
        } else {
            anyhow!("cannot talk to NeverMiss at {}: {}", self.base, e.without_url())
        }
    }

    /// The instance's live event stream (`GET /api/events`), open for as long as it runs.
    pub(crate) async fn events(&self) -> anyhow::Result<crate::wait::Events> {
        let response = reqwest::Client::new()
            .get(format!("{}/api/events", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| anyhow!("no NeverMiss is running at {} ({})", self.base, e.without_url()))?;
        if !response.status().is_success() {
            bail!("NeverMiss at {} answered {} to its event stream", self.base, response.status());
        }
        Ok(crate::wait::Events::new(response))
    }

    /// A request with the instance's token.
    pub(crate) fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        request.bearer_auth(&self.token)
    }

    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value)> {
        let response = request.bearer_auth(&self.token).send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status >= 400 {
            let message = body.get("error").and_then(Value::as_str).unwrap_or("no reason given");
            bail!("NeverMiss answered {status}: {message}");
        }
        Ok((status, body))
    }

    pub(crate) async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.send(self.http.get(format!("{}{path}", self.base))).await?.1)
    }
}

fn read_instance(data_dir: &Path) -> Option<InstanceInfo> {
    serde_json::from_slice(&std::fs::read(data_dir.join(INSTANCE_FILE)).ok()?).ok()
}

/// What `track` may say of a job besides its id.
struct TrackOptions {
    label: Option<String>,
    status_url: Option<String>,
    group: Option<String>,
}

async fn track(options: Options, provider: String, job_id: String, with: TrackOptions) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    let TrackOptions { label, status_url, group } = with;
    let body = serde_json::json!({ "provider": provider, "job_id": job_id, "label": label, "status_url": status_url, "group": group });
    let (status, job) = client.send(client.http.post(format!("{}/api/jobs", client.base)).json(&body)).await?;
    let job: Job = serde_json::from_value(job).context("unexpected answer from the API")?;
    let verb = if status == 201 { "now tracking" } else { "already tracking" };
    println!("{verb} {} {} ({})", job.provider, job.job_id, job.state);
    Ok(())
}

async fn jobs(options: Options, json: bool, state: Option<String>, provider: Option<String>, limit: u32) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    if let Some(provider) = &provider {
        // A provider the instance does not have is a mistake to say, not an empty list.
        let (_, body) = client.send(client.http.get(format!("{}/api/providers", client.base))).await?;
        let list: nevermiss_engine::api::providers::ProviderList =
            serde_json::from_value(body).context("unexpected answer from the API")?;
        if !list.providers.iter().any(|p| &p.name == provider) {
            let known: Vec<&str> = list.providers.iter().map(|p| p.name.as_str()).collect();
            bail!("no provider is named {provider:?} (known: {})", known.join(", "));
        }
    }
    let filtered = state.is_some() || provider.is_some();
    let mut query = vec![("limit", limit.to_string())];
    if let Some(state) = state {
        query.push(("state", state));
    }
    if let Some(provider) = provider {
        query.push(("provider", provider));
    }
    let request = client.http.get(format!("{}/api/jobs", client.base)).query(&query);
    let (_, body) = client.send(request).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let page: JobPage = serde_json::from_value(body).context("unexpected answer from the API")?;
    if page.jobs.is_empty() && filtered {
        println!("no jobs match (--state, --provider)");
        return Ok(());
    }
    if page.jobs.is_empty() {
        println!("no jobs yet: `nevermiss track PROVIDER JOB_ID`, or point a provider's webhook at `nevermiss url`");
        return Ok(());
    }
    println!("{:<10} {:<10} {:<36} {:<5} {:<24} LABEL", "STATE", "PROVIDER", "JOB", "BY", "UPDATED");
    for job in page.jobs {
        let by = job.terminal_source.map(|s| s.as_str()).unwrap_or("-");
        println!(
            "{:<10} {:<10} {:<36} {:<5} {:<24} {}",
            job.state.as_str(),
            job.provider,
            job.job_id,
            by,
            job.updated_at,
            job.label.unwrap_or_default()
        );
    }
    if page.next_cursor.is_some() {
        println!("(more: --limit or --state/--provider to narrow)");
    }
    Ok(())
}

async fn url(options: Options) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    let info = client.get("/api/info").await?;
    let base = info
        .get("public_url")
        .and_then(Value::as_str)
        .or_else(|| info.get("receiver_url").and_then(Value::as_str))
        .ok_or_else(|| anyhow!("the instance did not say its receiver URL"))?;
    println!("{base}");
    if info.get("public_url").and_then(Value::as_str).is_none() {
        // Why there is no public URL: none configured, or the tunnel is starting or down.
        let tunnel = client.get("/api/tunnel").await.unwrap_or(Value::Null);
        let status = tunnel.get("status").and_then(Value::as_str).unwrap_or("off");
        let kind = tunnel.get("kind").and_then(Value::as_str).unwrap_or("none");
        let why = match status {
            "down" => {
                format!("the {kind} tunnel is down: {}", tunnel.get("last_error").and_then(Value::as_str).unwrap_or("no reason given"))
            }
            "starting" => format!("the {kind} tunnel is starting"),
            _ => "no tunnel runs (NEVERMISS_TUNNEL)".to_owned(),
        };
        eprintln!("(local only: {why}; providers on the internet cannot reach it) webhooks go to {base}/hooks/<provider>");
    } else if tunnel_url_changed(&client).await {
        eprintln!("(the public URL changed: update the webhook URL at the provider to {base}/hooks/<provider>)");
    }
    Ok(())
}

async fn tunnel_url_changed(client: &Client) -> bool {
    let tunnel = client.get("/api/tunnel").await.unwrap_or(Value::Null);
    tunnel.get("url_changed").and_then(Value::as_bool).unwrap_or(false)
}

/// Opens the UI with a one-time code (valid 60 s, once), never the token, and never the code on
/// a command line either: a browser's command line is visible to every user of the machine
/// (`/proc/*/cmdline`, `ps`), who could redeem the code first. The browser is started on a page
/// in the data dir that only the user can read (`OPEN_PAGE`, 0600), which sends it on to the code
/// URL, as Jupyter hands its token over.
async fn open_ui(options: Options) -> anyhow::Result<()> {
    let client = Client::connect(&options).await?;
    let (_, body) = client.send(client.http.post(format!("{}/api/ui-codes", client.base))).await?;
    let code = body.get("code").and_then(Value::as_str).ok_or_else(|| anyhow!("the instance answered no code for the UI"))?;
    let url = format!("{}/#code={code}", client.base);
    println!("{url}");
    let page = options.data_dir()?.join(nevermiss_engine::data_dir::OPEN_PAGE);
    nevermiss_engine::secrets::write_private(&page, redirect_page(&url).as_bytes())
        .with_context(|| format!("cannot write {}", page.display()))?;
    if let Err(e) = open::that_detached(&page) {
        eprintln!("(could not open a browser: {e}; open the URL above)");
    }
    Ok(())
}

/// A page that sends the browser on to `url` at once (`url` is the API's own, with a hex code: no
/// character of it needs escaping in HTML or in a script's string).
fn redirect_page(url: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>NeverMiss</title></head>\n<body><p>Opening <a href=\"{url}\">NeverMiss</a>...</p>\
         <script>location.replace(\"{url}\")</script></body></html>\n"
    )
}
