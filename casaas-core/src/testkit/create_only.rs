//! A store that honours create-if-absent and nothing conditional beyond it,
//! as Aliyun OSS, Tencent COS and several S3-compatibles do.

use async_trait::async_trait;
use bytes::Bytes;

use crate::{Capabilities, CasError, CasStore, ForwardingStore, Version};

/// `inner` with conditional replace and conditional delete refused as
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) (an S3
/// `501 NotImplemented`), without reaching `inner`. Unconditional deletes
/// pass. Leases on it use the epoch layout ([`crate::layout`]).
#[derive(Debug, Clone)]
pub struct CreateOnlyStore<S>(pub S);

#[async_trait]
impl<S: CasStore> ForwardingStore for CreateOnlyStore<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.0
    }

    async fn wrap_replace(
        &self,
        key: &str,
        _expected: &Version,
        _body: Bytes,
    ) -> Result<Version, CasError> {
        Err(CasError::unsupported("501 NotImplemented: If-Match is not supported").with_key(key))
    }

    async fn wrap_delete(&self, key: &str, _expected: &Version) -> Result<(), CasError> {
        Err(CasError::unsupported("501 NotImplemented: If-Match is not supported").with_key(key))
    }

    fn wrap_capabilities(&self) -> Capabilities {
        let mut caps = self.0.capabilities();
        caps.replace_if_match = false;
        caps.conditional_delete = false;
        caps
    }

    fn wrap_describe(&self) -> String {
        format!("create-only({})", self.0.describe())
    }
}
