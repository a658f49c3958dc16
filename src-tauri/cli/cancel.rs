//! `nevermiss cancel PROVIDER JOB_ID`: asks the running instance to cancel a job through the
//! provider's own cancel call (`POST /api/jobs/{provider}/{job_id}/cancel`). Exit 0 when the
//! provider accepted (the job then ends through the merge point, as `wait` sees), 1 otherwise
//! with the answer printed.

use serde_json::Value;

use super::client::{encode, Client};
use super::exit::{ended, REFUSED};

pub async fn cancel(client: &Client, provider: &str, job_id: &str, json: bool) -> anyhow::Result<()> {
    let url = format!("{}/api/jobs/{}/{}/cancel", client.base, encode(provider), encode(job_id));
    let (status, body) = client.answer(client.http.post(url)).await?;
    let said = |field: &str| body.get(field).and_then(Value::as_str).unwrap_or("no reason given").to_owned();
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
    }
    if status == 202 {
        if !json {
            println!("cancel requested: {}", said("answer"));
        }
        return Ok(());
    }
    Err(ended(REFUSED, format!("not canceled ({status}): {}", said("error"))))
}
