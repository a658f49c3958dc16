//! The command line (the book's command line page): `nevermiss` (the desktop app), `serve`, and
//! the client commands that talk to a running instance through its admin API, one module per
//! command. An option beats its variable, a variable beats the stored setting.

mod args;
mod cancel;
mod channels;
mod client;
mod config;
mod devices;
mod events;
mod exit;
mod jobs;
mod manual;
mod open;
mod providers;
mod serve;
mod wait;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

pub use args::Cli;
use args::{Command, ProvidersCommand};
pub(crate) use client::Client;

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
            return ExitCode::from(exit::USAGE);
        }
    };
    let verbose = matches!(cli.command, None | Some(Command::Serve { .. }));
    // The migrations' runner says each file it applies at info level: only its warnings.
    init_tracing(if verbose { "info,refinery_core=warn" } else { "warn" });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (code, line) = exit::code_and_line(&e);
            eprintln!("nevermiss: {line}");
            ExitCode::from(code)
        }
    }
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

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let options = cli.options;
    let Some(command) = cli.command else { return serve::run_desktop(options) };
    // The commands that need no running instance.
    let command = match command {
        Command::Serve { database, public_api, insecure_http } => {
            return runtime()?.block_on(serve::serve(options, database, public_api, insecure_http))
        }
        Command::Demo(args) => return serve::demo(options, args),
        Command::Providers { command: Some(ProvidersCommand::Check { file }), .. } => return providers::check_recipe(&file),
        Command::Completions { shell } => return manual::completions(shell),
        Command::Man => return manual::man_page(),
        command => command,
    };
    runtime()?.block_on(async move {
        let client = Client::connect(&options).await?;
        match command {
            Command::Devices(command) => devices::devices(&client, command).await,
            Command::Providers { command: Some(ProvidersCommand::Test { name, job_id }), .. } => {
                providers::test_provider(&client, &name, &job_id).await
            }
            Command::Providers { command: None, json } => providers::list_providers(&client, json).await,
            Command::Track { provider, job_id, label, status_url, group, json } => {
                jobs::track(&client, provider, job_id, jobs::TrackOptions { label, status_url, group }, json).await
            }
            Command::Untrack { provider, job_id, json } => jobs::untrack(&client, &provider, &job_id, json).await,
            Command::Jobs { json, state, provider, limit } => jobs::jobs(&client, json, state, provider, limit).await,
            Command::Url { json } => open::url(&client, json).await,
            Command::Wait { provider, job_id, group, timeout, json } => {
                let timeout = timeout.map(std::time::Duration::from_secs);
                match (group, provider, job_id) {
                    (Some(group), _, _) => wait::wait_group(&client, group, timeout, json).await,
                    (None, Some(provider), Some(job_id)) => wait::wait(&client, provider, job_id, timeout, json).await,
                    _ => anyhow::bail!("wait needs PROVIDER JOB_ID, or --group NAME"),
                }
            }
            Command::Cancel { provider, job_id, json } => cancel::cancel(&client, &provider, &job_id, json).await,
            Command::Settings { command, json } => config::settings(&client, command, json).await,
            Command::Secrets { command, json } => config::secrets(&client, command, json).await,
            Command::Channels { command, json } => channels::channels(&client, command, json).await,
            Command::Open => open::open_ui(&client, &options).await,
            Command::Serve { .. } | Command::Demo(_) | Command::Completions { .. } | Command::Man => unreachable!("handled above"),
            Command::Providers { command: Some(ProvidersCommand::Check { .. }), .. } => unreachable!("handled above"),
        }
    })
}
