//! The server's clock, as seen in the `Date` header of its responses.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;

use crate::error::parse_http_date;

/// One reading of the server's clock: the `Date` header of a response and
/// the local wall-clock time when that response arrived.
///
/// `Date` has a resolution of one second, so a skew estimate from one
/// sample is good to about a second plus the request's round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerDate {
    /// The server's `Date` header.
    pub server: SystemTime,
    /// This machine's clock when the response headers arrived.
    pub local: SystemTime,
}

impl ServerDate {
    /// Server clock minus local clock, in signed seconds (positive: the
    /// server is ahead).
    pub fn skew_seconds(&self) -> f64 {
        match self.server.duration_since(self.local) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        }
    }
}

/// Shared slot the interceptor writes and the store reads.
pub(crate) type DateSlot = Arc<Mutex<Option<ServerDate>>>;

/// Records the `Date` header of every response, successful or not, before
/// the SDK deserializes it (success outputs do not expose headers).
#[derive(Debug, Clone)]
pub(crate) struct DateInterceptor {
    pub slot: DateSlot,
}

impl Intercept for DateInterceptor {
    fn name(&self) -> &'static str {
        "casaas-server-date"
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let local = SystemTime::now();
        if let Some(server) = context
            .response()
            .headers()
            .get("date")
            .and_then(parse_http_date)
        {
            let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            *slot = Some(ServerDate { server, local });
        }
        Ok(())
    }
}
