//! `nevermiss providers`: the running instance's providers, a recipe checked, a poll traced.

use std::path::Path;

use anyhow::Context;

use super::client::Client;

/// `nevermiss providers`: the running instance's providers, one a line, then the recipes it refused.
pub(super) async fn list_providers(client: &Client, json: bool) -> anyhow::Result<()> {
    let body = client.get("/api/providers").await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(());
    }
    let list: nevermiss_engine::api::providers::ProviderList =
        serde_json::from_value(body).context("the instance's list of providers is not one")?;
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
pub(super) async fn test_provider(client: &Client, name: &str, job_id: &str) -> anyhow::Result<()> {
    let path = format!("/api/providers/{}/test", super::client::encode(name));
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
pub(super) fn check_recipe(file: &Path) -> anyhow::Result<()> {
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
