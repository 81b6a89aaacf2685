//! A small client for the GCS JSON API calls the storage client only
//! offers over gRPC (`StorageControl`): conditional delete and list, and
//! compose (for conformance probes).
//!
//! Why not `StorageControl`: it needs HTTP/2 gRPC (`google.storage.v2`),
//! which fake-gcs-server and other emulators do not serve, while the JSON
//! API calls below work on GCS and on the emulators alike. The official
//! storage client still does every read and write.

use bytes::Bytes;
use casaas_core::{CasError, ListEntry, Version};
use google_cloud_auth::credentials::{CacheableResource, Credentials};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use crate::config::GcsConfig;
use casaas_core::provider::Operation;

use crate::error::{Failure, Stage, from_json_answer, from_reqwest, map_failure};

/// Everything but RFC 3986 unreserved characters is escaped in a path
/// segment, `/` included (object names go in one segment).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[derive(Clone)]
pub(crate) struct JsonApi {
    http: reqwest::Client,
    credentials: Option<Credentials>,
}

impl JsonApi {
    pub(crate) fn new(
        config: &GcsConfig,
        credentials: Option<Credentials>,
    ) -> Result<Self, CasError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout.min(std::time::Duration::from_secs(10)))
            .timeout(config.timeout)
            .build()
            .map_err(|e| {
                CasError::misconfigured(format!("cannot build the HTTP client: {e}")).with_source(e)
            })?;
        Ok(JsonApi { http, credentials })
    }

    fn object_url(config: &GcsConfig, name: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            config.endpoint,
            utf8_percent_encode(&config.bucket, SEGMENT),
            utf8_percent_encode(name, SEGMENT)
        )
    }

    async fn send(
        &self,
        op: Operation,
        config: &GcsConfig,
        key: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<(u16, Bytes), CasError> {
        let mut request = request;
        if let Some(credentials) = &self.credentials {
            match credentials.headers(http::Extensions::new()).await {
                Ok(CacheableResource::New { data, .. }) => request = request.headers(data),
                Ok(CacheableResource::NotModified) => {}
                Err(e) => {
                    return Err(map_failure(
                        op,
                        &config.bucket,
                        key,
                        Failure::at(Stage::Credentials, e.to_string()),
                    ));
                }
            }
        }
        let response = request
            .send()
            .await
            .map_err(|e| map_failure(op, &config.bucket, key, from_reqwest(&e)))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response
            .bytes()
            .await
            .map_err(|e| map_failure(op, &config.bucket, key, from_reqwest(&e)))?;
        if (200..300).contains(&status) {
            Ok((status, body))
        } else {
            Err(map_failure(
                op,
                &config.bucket,
                key,
                from_json_answer(status, retry_after.as_deref(), &body),
            ))
        }
    }

    /// `DELETE …/o/NAME?ifGenerationMatch=G`.
    pub(crate) async fn delete(
        &self,
        config: &GcsConfig,
        key: &str,
        generation: i64,
    ) -> Result<(), CasError> {
        let url = Self::object_url(config, &config.object_name(key));
        let request = self
            .http
            .delete(url)
            .query(&[("ifGenerationMatch", generation.to_string())]);
        self.send(Operation::Delete, config, key, request)
            .await
            .map(|_| ())
    }

    /// `POST …/o/DEST/compose?ifGenerationMatch=G`: the sources, in order,
    /// concatenated into `destination`; returns its new generation.
    pub(crate) async fn compose(
        &self,
        config: &GcsConfig,
        sources: &[&str],
        destination: &str,
        if_generation_match: i64,
    ) -> Result<Version, CasError> {
        #[derive(serde::Deserialize)]
        struct Composed {
            generation: String,
        }
        let op = if if_generation_match == 0 {
            Operation::Create
        } else {
            Operation::Replace
        };
        let url = format!(
            "{}/compose",
            Self::object_url(config, &config.object_name(destination))
        );
        let body = serde_json::json!({
            "sourceObjects": sources
                .iter()
                .map(|key| serde_json::json!({ "name": config.object_name(key) }))
                .collect::<Vec<_>>(),
            "destination": { "contentType": "application/octet-stream" },
        });
        let request = self
            .http
            .post(url)
            .query(&[("ifGenerationMatch", if_generation_match.to_string())])
            .header("content-type", "application/json")
            .body(body.to_string());
        let (_, answer) = self.send(op, config, destination, request).await?;
        serde_json::from_slice::<Composed>(&answer)
            .ok()
            .and_then(|c| c.generation.parse::<i64>().ok())
            .map(Version::Generation)
            .ok_or_else(|| {
                map_failure(
                    op,
                    &config.bucket,
                    destination,
                    Failure::at(
                        Stage::Unreadable,
                        "the compose answer carries no generation".to_string(),
                    ),
                )
            })
    }

    /// `GET …/o?prefix=P`, every page; keys relative to the store prefix.
    pub(crate) async fn list(
        &self,
        config: &GcsConfig,
        prefix: &str,
    ) -> Result<Vec<ListEntry>, CasError> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Page {
            #[serde(default)]
            items: Vec<Item>,
            next_page_token: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Item {
            name: String,
            generation: String,
        }
        let store_prefix = if config.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", config.prefix)
        };
        let full_prefix = format!("{store_prefix}{prefix}");
        let url = format!(
            "{}/storage/v1/b/{}/o",
            config.endpoint,
            utf8_percent_encode(&config.bucket, SEGMENT)
        );
        let mut entries = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![
                ("prefix", full_prefix.clone()),
                ("fields", "items(name,generation),nextPageToken".to_string()),
                ("maxResults", "1000".to_string()),
            ];
            if let Some(t) = token.take() {
                query.push(("pageToken", t));
            }
            let request = self.http.get(&url).query(&query);
            let (_, body) = self.send(Operation::List, config, prefix, request).await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| {
                map_failure(
                    Operation::List,
                    &config.bucket,
                    prefix,
                    Failure::at(Stage::Unreadable, e.to_string()),
                )
            })?;
            for item in page.items {
                let Some(key) = item.name.strip_prefix(&store_prefix) else {
                    continue;
                };
                let generation = item.generation.parse::<i64>().map_err(|e| {
                    map_failure(
                        Operation::List,
                        &config.bucket,
                        key,
                        Failure::at(Stage::Unreadable, format!("generation: {e}")),
                    )
                })?;
                entries.push(ListEntry::new(key, Version::Generation(generation)));
            }
            match page.next_page_token.filter(|t| !t.is_empty()) {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_one_path_segment() {
        let mut config = GcsConfig::new("bkt");
        config.prefix = "p q".into();
        assert_eq!(
            JsonApi::object_url(&config, &config.object_name("a/b~c.d")),
            "https://storage.googleapis.com/storage/v1/b/bkt/o/p%20q%2Fa%2Fb~c.d"
        );
    }
}
