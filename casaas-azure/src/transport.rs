//! The HTTP transport under the SDK.
//!
//! The SDK's default transport neither sets timeouts nor tells a connection
//! that was never made from one that failed after the request went out, and
//! its errors carry the request URL (which holds the SAS, if one is used).
//! This one does all three, and turns every non-2xx answer into a
//! [`Failure::Status`] with the Azure error code, message and Retry-After.

use std::collections::HashMap;
use std::time::Duration;

use azure_core::error::ErrorKind as SdkKind;
use azure_core::headers::{HeaderName, HeaderValue, Headers};
use azure_core::{Body, HttpClient, Request, Response, StatusCode};
use bytes::Bytes;

use crate::error::{Failure, WireFailure};

/// A reqwest client with this crate's timeouts and error classification.
#[derive(Debug)]
pub(crate) struct Transport {
    client: reqwest::Client,
}

impl Transport {
    /// A client whose requests time out after `timeout` in total, and whose
    /// connection attempts give up after `connect_timeout`.
    pub(crate) fn new(timeout: Duration, connect_timeout: Duration) -> Result<Self, Failure> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(connect_timeout)
            // Idle connections are dropped before the service's own idle
            // cut-off, so a reused connection is rarely a dead one.
            .pool_idle_timeout(Duration::from_secs(20))
            // The SDK signs exactly what it sends; never follow redirects.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Failure::Request {
                detail: describe(&e.without_url()),
            })?;
        Ok(Transport { client })
    }
}

fn sdk_error(failure: Failure) -> azure_core::Error {
    let kind = match &failure {
        Failure::Status { status, code, .. } => match StatusCode::try_from(*status) {
            Ok(status) => SdkKind::http_response(status, code.clone()),
            Err(_) => SdkKind::Other,
        },
        Failure::NotSent { .. } | Failure::AfterSend { .. } => SdkKind::Io,
        Failure::BadResponse { .. } => SdkKind::DataConversion,
        Failure::Credential { .. } => SdkKind::Credential,
        Failure::Request { .. } => SdkKind::Other,
    };
    azure_core::Error::new(kind, WireFailure(failure))
}

/// The error and its causes on one line, without any URL.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

fn classify(error: reqwest::Error) -> Failure {
    let error = error.without_url();
    let detail = describe(&error);
    if error.is_connect() {
        // Includes connect timeouts: no byte of the request was sent.
        Failure::NotSent { detail }
    } else if error.is_builder() {
        Failure::Request { detail }
    } else {
        Failure::AfterSend {
            timed_out: error.is_timeout(),
            detail,
        }
    }
}

/// The Azure error code: the `x-ms-error-code` header, or `<Code>` in the
/// XML body (HEAD answers have no body).
fn error_code(headers: &reqwest::header::HeaderMap, body: &[u8]) -> Option<String> {
    headers
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| xml_element(body, "Code"))
}

/// The first line of `<Message>` in the XML body.
fn error_message(body: &[u8]) -> Option<String> {
    xml_element(body, "Message")
        .and_then(|m| m.lines().next().map(str::to_string))
        .filter(|m| !m.is_empty())
}

fn xml_element(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&format!("</{name}>"))? + start;
    Some(text[start..end].trim().to_string())
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

#[async_trait::async_trait]
impl HttpClient for Transport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<Response> {
        let method =
            reqwest::Method::from_bytes(request.method().as_ref().as_bytes()).map_err(|e| {
                sdk_error(Failure::Request {
                    detail: e.to_string(),
                })
            })?;
        let mut builder = self.client.request(method, request.url().clone());
        for (name, value) in request.headers().iter() {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let body = match request.body() {
            Body::Bytes(bytes) => bytes.clone(),
            Body::SeekableStream(_) => {
                return Err(sdk_error(Failure::Request {
                    detail: "streaming bodies are not used by this crate".into(),
                }));
            }
        };
        let answer = self
            .client
            .execute(
                builder
                    .body(body)
                    .build()
                    .map_err(|e| sdk_error(classify(e)))?,
            )
            .await
            .map_err(|e| sdk_error(classify(e)))?;
        let status = answer.status();
        let headers = answer.headers().clone();
        // Bodies here are small records; reading them whole keeps the
        // timeout covering the entire exchange.
        let body: Bytes = answer.bytes().await.map_err(|e| sdk_error(classify(e)))?;
        if !status.is_success() {
            return Err(sdk_error(Failure::Status {
                status: status.as_u16(),
                code: error_code(&headers, &body),
                message: error_message(&body),
                retry_after: retry_after(&headers),
            }));
        }
        let status = StatusCode::try_from(status.as_u16()).map_err(|_| {
            sdk_error(Failure::BadResponse {
                detail: format!("unknown status {status}"),
            })
        })?;
        let headers: HashMap<HeaderName, HeaderValue> = headers
            .iter()
            .filter_map(|(k, v)| {
                v.to_str().ok().map(|v| {
                    (
                        HeaderName::from(k.as_str().to_owned()),
                        HeaderValue::from(v.to_owned()),
                    )
                })
            })
            .collect();
        let stream = futures::stream::iter(std::iter::once(Ok::<Bytes, azure_core::Error>(body)));
        Ok(Response::new(
            status,
            Headers::from(headers),
            Box::pin(stream),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_details_from_xml() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>ConditionNotMet</Code>\
                     <Message>The condition specified using HTTP conditional header(s) is not met.\nRequestId:1</Message></Error>";
        let headers = reqwest::header::HeaderMap::new();
        assert_eq!(
            error_code(&headers, body).as_deref(),
            Some("ConditionNotMet")
        );
        assert_eq!(
            error_message(body).as_deref(),
            Some("The condition specified using HTTP conditional header(s) is not met.")
        );
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-ms-error-code", "BlobNotFound".parse().unwrap());
        headers.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(error_code(&headers, b"").as_deref(), Some("BlobNotFound"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn refused_connection_is_not_sent() {
        // A port nothing listens on: bind, learn the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let transport = Transport::new(Duration::from_secs(5), Duration::from_secs(2)).unwrap();
        let url = azure_core::Url::parse(&format!("http://127.0.0.1:{port}/a/c/b?sig=SECRETSIG"))
            .unwrap();
        let request = Request::new(url, azure_core::Method::Get);
        let err = transport.execute_request(&request).await.unwrap_err();
        let failure = Failure::from_sdk(&err);
        assert!(matches!(failure, Failure::NotSent { .. }), "{failure:?}");
        assert!(!failure.to_string().contains("SECRETSIG"), "{failure}");
    }
}
