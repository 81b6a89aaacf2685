//! Vendor dialects of conditional writes: the headers some S3-compatible
//! stores need instead of (or beside) `If-None-Match` / `If-Match`, added to
//! one request before it is signed, and the response header a dialect reads
//! its versions from.

use std::sync::{Arc, Mutex};

use aws_sdk_s3::client::customize::CustomizableOperation;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;

use crate::config::S3Quirks;

/// Tigris: evaluate the request on the leader region.
pub(crate) const TIGRIS_CONSISTENT: &str = "X-Tigris-Consistent";
/// GCS XML API: the write or delete happens only if the object's generation
/// is this one (0: only if there is no live object).
pub(crate) const GOOG_IF_GENERATION_MATCH: &str = "x-goog-if-generation-match";
/// GCS XML API: the object's generation, on answers to GET, HEAD and PUT.
pub(crate) const GOOG_GENERATION: &str = "x-goog-generation";

/// Extra request headers of one request.
pub(crate) type ExtraHeaders = Vec<(&'static str, String)>;

/// The headers every read and every conditional write carries under
/// `quirks` (the condition itself is added by the caller).
pub(crate) fn common_headers(quirks: &S3Quirks) -> ExtraHeaders {
    let mut headers = ExtraHeaders::new();
    if quirks.tigris_consistent {
        // Tigris documents it for conditional operations and for the reads
        // that must see them.
        headers.push((TIGRIS_CONSISTENT, "true".to_string()));
    }
    headers
}

/// Where a [`HeaderCapture`] leaves the value it read.
pub(crate) type CapturedHeader = Arc<Mutex<Option<String>>>;

/// Records one response header of a single request, successful or not
/// (the SDK's outputs do not expose headers they do not model, such as
/// `x-goog-generation`).
#[derive(Debug, Clone)]
pub(crate) struct HeaderCapture {
    name: &'static str,
    slot: CapturedHeader,
}

impl HeaderCapture {
    pub(crate) fn new(name: &'static str) -> Self {
        HeaderCapture {
            name,
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// The value read from the answer, if the answer had the header.
    pub(crate) fn value(&self) -> Option<String> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Intercept for HeaderCapture {
    fn name(&self) -> &'static str {
        "casaas-header-capture"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let value = context
            .response()
            .headers()
            .get(self.name)
            .map(str::to_owned);
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = value;
        Ok(())
    }
}

/// Adds `headers` to the request before it is signed (so that they are
/// covered by the signature), and `capture` to read one answer header.
pub(crate) fn customize<T, E, B>(
    operation: CustomizableOperation<T, E, B>,
    headers: ExtraHeaders,
    capture: Option<&HeaderCapture>,
) -> CustomizableOperation<T, E, B> {
    let mut operation = operation;
    if !headers.is_empty() {
        operation = operation.mutate_request(move |request| {
            for (name, value) in &headers {
                request.headers_mut().insert(*name, value.clone());
            }
        });
    }
    if let Some(capture) = capture {
        operation = operation.interceptor(capture.clone());
    }
    operation
}

/// A GCS generation as the XML API sends it in `x-goog-generation`.
pub(crate) fn parse_generation(text: &str) -> Option<i64> {
    text.trim().parse::<i64>().ok().filter(|g| *g > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_are_positive_integers() {
        assert_eq!(
            parse_generation("1700000000000001"),
            Some(1_700_000_000_000_001)
        );
        assert_eq!(parse_generation(" 7 "), Some(7));
        assert_eq!(parse_generation("0"), None);
        assert_eq!(parse_generation("-3"), None);
        assert_eq!(parse_generation("abc"), None);
    }

    #[test]
    fn tigris_header_only_when_asked() {
        let plain = S3Quirks::default();
        assert!(common_headers(&plain).is_empty());
        let tigris = S3Quirks {
            tigris_consistent: true,
            ..S3Quirks::default()
        };
        assert_eq!(
            common_headers(&tigris),
            vec![(TIGRIS_CONSISTENT, "true".to_string())]
        );
    }
}
