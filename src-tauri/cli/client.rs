//! The client of a running instance's admin API that every command talking to one uses.

use std::path::Path;

use anyhow::{bail, Context};
use serde_json::Value;

use nevermiss_engine::data_dir::{INSTANCE_FILE, TOKEN_FILE};
use nevermiss_engine::services::InstanceInfo;

use super::args::{Options, DEFAULT_API_ADDR, DEMO_DIR};
use super::exit::{self, unreachable};

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
    pub(super) async fn connect(options: &Options) -> anyhow::Result<Client> {
        Client::reach(options).await.map_err(|e| unreachable(exit::code_and_line(&e).1))
    }

    /// The API address: `--api-addr`/variable, else what the running instance wrote in the data
    /// dir, else the default. The token is read from the data dir, and sent only once what
    /// answers there has proved it is this data dir's instance (`verify_instance`).
    async fn reach(options: &Options) -> anyhow::Result<Client> {
        let data_dir = options.data_dir()?;
        // While `demo` runs (in its own data dir) and nothing runs in this one, talk to the demo.
        let demo = data_dir.join(DEMO_DIR);
        let data_dir = match options.api_addr.is_none() && read_instance(&data_dir).is_none() && read_instance(&demo).is_some() {
            true => {
                eprintln!("(talking to the demo, whose data dir is {})", demo.display());
                demo
            }
            false => data_dir,
        };
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
            unreachable(format!("no NeverMiss is running at {} (start it with `nevermiss serve`)", self.base))
        } else {
            unreachable(format!("cannot talk to NeverMiss at {}: {}", self.base, e.without_url()))
        }
    }

    /// The instance's live event stream (`GET /api/events`), open for as long as it runs.
    pub(crate) async fn events(&self) -> anyhow::Result<super::events::Events> {
        let response = reqwest::Client::new()
            .get(format!("{}/api/events", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if !response.status().is_success() {
            bail!("NeverMiss at {} answered {} to its event stream", self.base, response.status());
        }
        Ok(super::events::Events::new(response))
    }

    /// A request with the instance's token, and its answer whatever its status.
    pub(crate) async fn answer(&self, request: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value)> {
        let response = request.bearer_auth(&self.token).send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// A request with the instance's token; an answer of 400 or more is an error that says it.
    pub(crate) async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value)> {
        let (status, body) = self.answer(request).await?;
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

/// A path segment, percent-encoded.
pub(crate) fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}
