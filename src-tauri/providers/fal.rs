//! The `fal` provider (being written; see providers.md).

use async_trait::async_trait;
use axum::http::HeaderMap;

use super::{FetchError, JobRef, ParseError, ParsedDelivery, Provider, ProviderContext, VerifyError};
use crate::job::JobEvent;

pub const NAME: &str = "fal";

pub struct Fal {
    #[allow(dead_code)]
    ctx: ProviderContext,
}

impl Fal {
    pub fn new(ctx: ProviderContext) -> Fal {
        Fal { ctx }
    }
}

#[async_trait]
impl Provider for Fal {
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
