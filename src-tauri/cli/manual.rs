//! `nevermiss completions SHELL` and `nevermiss man`: a shell's completion script and the manual
//! page, generated from the command line's definition (so they cannot drift from `--help`).

use clap::CommandFactory;

use super::args::Cli;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    clap_complete::generate(shell, &mut Cli::command(), "nevermiss", &mut std::io::stdout());
    Ok(())
}

pub fn man_page() -> anyhow::Result<()> {
    let command = Cli::command().mut_args(|a| a.hide_env_values(true));
    clap_mangen::Man::new(command).render(&mut std::io::stdout())?;
    Ok(())
}
