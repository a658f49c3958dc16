//! What kind of job a provider's job is, the key of its expected duration (the engine's `expected`):
//! the provider, the kind of job and, where the provider names one, the model, app or agent that
//! ran it, joined by `/`: `replicate/prediction/stability-ai/sdxl`, `openai/response/o3`,
//! `openai/batch`, `openai/fine_tuning/gpt-4o-mini-2024-07-18`, `anthropic/message_batch`,
//! `anthropic/session/<agent>`, `fal/fal-ai/flux/dev`, `generic/<the sender's kind>`. Each
//! adapter reads its part from the provider's own payload; this only joins and bounds them.

/// The longest kind kept (a key, not a payload): longer ones are cut, at a character boundary.
pub const MAX_LEN: usize = 200;

/// `provider/what`, and `/model` when the provider names one (an empty one is none); control
/// characters dropped, at most `MAX_LEN` characters.
pub fn of(provider: &str, what: &str, model: Option<&str>) -> String {
    let model = model.map(str::trim).filter(|m| !m.is_empty());
    let joined = match model {
        Some(model) => format!("{provider}/{what}/{model}"),
        None => format!("{provider}/{what}"),
    };
    joined.chars().filter(|c| !c.is_control()).take(MAX_LEN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_joins_provider_kind_and_model_and_is_bounded() {
        assert_eq!(of("replicate", "prediction", Some("stability-ai/sdxl")), "replicate/prediction/stability-ai/sdxl");
        assert_eq!(of("openai", "batch", None), "openai/batch");
        assert_eq!(of("openai", "response", Some("  ")), "openai/response", "an empty model is none");
        assert_eq!(of("generic", "a\nb", None), "generic/ab");
        let long = of("fal", &"é".repeat(500), None);
        assert_eq!(long.chars().count(), MAX_LEN);
    }
}
