//! `nevermiss cancel PROVIDER JOB_ID`: asks the running instance to cancel a job through the
//! provider's own cancel call (`POST /api/jobs/{provider}/{job_id}/cancel`, contract §6).
//! Exit 0 when the provider accepted (the job then ends through the merge point, as `wait` sees),
//! 1 otherwise with the answer printed (the job is finished, the provider refused, no cancel for
//! this kind of job), 69 no running instance reachable.

use serde_json::Value;

use crate::cli::Client;
use crate::wait::{encode, Ended, UNREACHABLE};

/// Any answer but an accepted request.
pub const NOT_ACCEPTED: u8 = 1;

pub async fn cancel(client: &Client, provider: &str, job_id: &str) -> anyhow::Result<()> {
    let url = format!("{}/api/jobs/{}/{}/cancel", client.base, encode(provider), encode(job_id));
    let response = client.authorized(client.http.post(url)).send().await.map_err(|e| Ended {
        code: UNREACHABLE,
        message: if e.is_connect() {
            format!("no NeverMiss is running at {} (start it with `nevermiss serve`)", client.base)
        } else {
            format!("cannot talk to NeverMiss at {}: {}", client.base, e.without_url())
        },
    })?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let said = |field: &str| body.get(field).and_then(Value::as_str).unwrap_or("no reason given").to_owned();
    if status == 202 {
        println!("cancel requested: {}", said("answer"));
        return Ok(());
    }
    Err(Ended { code: NOT_ACCEPTED, message: format!("not canceled ({status}): {}", said("error")) }.into())
}
