//! The `anthropic` provider (being written; see providers.md).

use async_trait::async_trait;
use axum::http::HeaderMap;

use super::{FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::JobEvent;

pub const NAME: &str = "anthropic";

pub struct Anthropic {
    #[allow(dead_code)]
    ctx: ProviderContext,
}

impl Anthropic {
    pub fn new(ctx: ProviderContext) -> Anthropic {
        Anthropic { ctx }
    }
}

#[async_trait]
impl Provider for Anthropic {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn verify(&self, _headers: &HeaderMap, _body: &[u8]) -> Result<(), VerifyError> {
        Err(VerifyError::NotConfigured(NAME))
    }

    fn parse(&self, _headers: &HeaderMap, _body: &[u8]) -> Result<ParsedDelivery, ParseError> {
        Err(ParseError { reason: "not supported yet".into(), delivery_id: None, job_id: None })
    }

    async fn fetch_status(&self, _job: &JobRef) -> Result<JobEvent, FetchError> {
        Err(FetchError::NotSupported(NAME))
    }
}
