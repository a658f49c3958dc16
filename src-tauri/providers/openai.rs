//! The `openai` provider (being written; see providers.md).

use async_trait::async_trait;
use axum::http::HeaderMap;

use super::{FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::JobEvent;

pub const NAME: &str = "openai";

pub struct Openai {
    #[allow(dead_code)]
    ctx: ProviderContext,
}

impl Openai {
    pub fn new(ctx: ProviderContext) -> Openai {
        Openai { ctx }
    }
}

#[async_trait]
impl Provider for Openai {
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
