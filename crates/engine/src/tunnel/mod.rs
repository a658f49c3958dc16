//! The tunnel: a public URL for the receiver of a desktop behind NAT, run and watched by NeverMiss
//! itself. Kinds: `none`, `cloudflared` (quick or named), `ngrok` (the agent), `bore` and `manual`.
//! Only the receiver's port is ever forwarded; the admin API never is, whatever the kind.
//!
//! - `config`: which kind, with what (variables beat stored settings; tokens from the secret store);
//! - `supervisor`: starts the tunnel with the engine, restarts it with backoff when it dies or stops
//!   answering, and keeps its state (`GET /api/tunnel`);
//! - `self_test`: a signed generic delivery sent to the public URL and looked for at the receiver;
//! - one file per kind (`cloudflared`, `ngrok`, `bore`, `manual`), and `child_process` for the
//!   kinds that run a program.
//!
//! Nothing here knows of Tauri.

mod bore;
mod child_process;
mod cloudflared;
pub mod config;
pub mod down_alert;
mod manual;
pub(crate) mod ngrok;
pub mod self_test;
mod session;
mod state;
mod supervisor;

pub use state::{Status, TunnelState};
pub use supervisor::{Tunnel, TunnelDeps};
