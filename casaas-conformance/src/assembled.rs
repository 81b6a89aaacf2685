//! Probes of objects assembled from separately written parts under a
//! condition: Azure's Put Block List and GCS's compose (features `azure`,
//! `gcs`).
//!
//! The steps and the judging are the same for both; only the requests
//! differ, behind [`Assemble`]. The binary contributes the probes with
//! [`Suite::with_probe`](crate::Suite::with_probe) for `az://` and `gs://`
//! URLs, replacing the placeholders of the standard suite.

use async_trait::async_trait;
use bytes::Bytes;
use casaas_core::{CasError, ErrorKind, StoredObject, Version};
use serde_json::{Value, json};

use crate::model::{Outcome, Severity, StepError, StepExt, error_evidence};
use crate::probe::{Probe, ProbeContext};
use crate::probes::payload;

/// A backend's conditional request that writes an object from parts.
#[async_trait]
pub(crate) trait Assemble: Send + Sync {
    /// The request, for details and evidence (`Put Block List`).
    fn request(&self) -> &'static str;

    /// How the request spells create-if-absent (`If-None-Match: *`).
    fn absent(&self) -> &'static str;

    /// How it spells replace-if-version (`If-Match`).
    fn matches(&self) -> &'static str;

    /// Writes the parts separately, then `parts` in order as the content
    /// of `key` (a key of the store the user named) with one request under
    /// `expected` (`None`: the object must not exist). `Ok(answer)` is that
    /// request's answer; `Err` when a part could not be written.
    async fn assemble(
        &self,
        key: &str,
        parts: &[Bytes],
        expected: Option<&Version>,
    ) -> Result<Result<Version, CasError>, StepError>;
}

/// One probe of an [`Assemble`] request's conditions.
pub(crate) struct AssembledConditional<A> {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    pub(crate) explanation: &'static str,
    pub(crate) access: A,
}

/// What the checks found, in evidence and in words.
#[derive(Default)]
struct Findings {
    checks: serde_json::Map<String, Value>,
    /// The condition was ignored: a write that had to be refused took
    /// effect.
    ignored: Vec<String>,
    /// A write that had to succeed was refused, or did not write what it
    /// said.
    broken: Vec<String>,
    /// The store answered that it does not implement the request or the
    /// condition.
    unsupported: Vec<String>,
}

impl Findings {
    /// A request that must be refused with a precondition failure and
    /// leave the object as `before`.
    fn refusal(
        &mut self,
        name: &str,
        answer: Result<Version, CasError>,
        before: &Option<StoredObject>,
        after: &Option<StoredObject>,
    ) -> Result<(), StepError> {
        let kept = before.is_some() && before == after;
        match answer {
            Ok(version) => {
                self.ignored.push(format!(
                    "{name}: accepted{}",
                    if kept { "" } else { " and the object changed" }
                ));
                self.checks.insert(
                    name.into(),
                    json!({ "accepted": true, "version": version, "object_kept": kept }),
                );
            }
            Err(e) if !kept => {
                self.ignored.push(format!(
                    "{name}: answered {} but the object changed",
                    e.evidence()
                ));
                self.checks.insert(
                    name.into(),
                    json!({ "refused": error_evidence(&e), "object_kept": false }),
                );
            }
            Err(e) => match e.kind() {
                ErrorKind::PreconditionFailed => {
                    self.checks.insert(
                        name.into(),
                        json!({ "refused": error_evidence(&e), "object_kept": true }),
                    );
                }
                ErrorKind::Unsupported => {
                    self.unsupported.push(format!("{name}: {}", e.evidence()));
                    self.checks.insert(
                        name.into(),
                        json!({ "refused": error_evidence(&e), "object_kept": true }),
                    );
                }
                // No answer about the condition (throttled, lost, denied).
                _ => return Err(e).step(name),
            },
        }
        Ok(())
    }

    /// A request that must succeed and leave `expected` as the object's
    /// content, at the version it answered.
    fn acceptance(
        &mut self,
        name: &str,
        answer: Result<Version, CasError>,
        expected: &Bytes,
        after: &Option<StoredObject>,
    ) -> Result<(), StepError> {
        match answer {
            Ok(version) => {
                let holds = after.as_ref().is_some_and(|o| o.body == *expected);
                let same_version = after.as_ref().is_some_and(|o| o.version == version);
                if !holds {
                    self.broken.push(format!(
                        "{name}: accepted, but the object does not hold the parts"
                    ));
                } else if !same_version {
                    self.broken.push(format!(
                        "{name}: accepted, but a read gives another version than the answer"
                    ));
                }
                self.checks.insert(
                    name.into(),
                    json!({
                        "accepted": true,
                        "holds_parts": holds,
                        "version_matches_read": same_version,
                    }),
                );
            }
            Err(e) => match e.kind() {
                ErrorKind::PreconditionFailed => {
                    self.broken
                        .push(format!("{name}: refused ({})", e.evidence()));
                    self.checks
                        .insert(name.into(), json!({ "refused": error_evidence(&e) }));
                }
                ErrorKind::Unsupported => {
                    self.unsupported.push(format!("{name}: {}", e.evidence()));
                    self.checks
                        .insert(name.into(), json!({ "refused": error_evidence(&e) }));
                }
                _ => return Err(e).step(name),
            },
        }
        Ok(())
    }
}

/// Two parts with bodies unique to this run.
fn parts() -> [Bytes; 2] {
    [payload("part one"), payload("part two")]
}

fn joined(parts: &[Bytes]) -> Bytes {
    parts.concat().into()
}

impl<A: Assemble> AssembledConditional<A> {
    /// One request on `key` (a key of the probe's store), paced like every
    /// probe write to that key.
    async fn send(
        &self,
        cx: &ProbeContext,
        key: &str,
        parts: &[Bytes],
        expected: Option<&Version>,
    ) -> Result<Result<Version, CasError>, StepError> {
        cx.pace(key).await;
        self.access
            .assemble(&cx.base_key(key), parts, expected)
            .await
    }

    async fn read(cx: &ProbeContext, key: &str) -> Result<Option<StoredObject>, StepError> {
        cx.store().get(key).await.step(&format!("read {key:?}"))
    }
}

#[async_trait]
impl<A: Assemble> Probe for AssembledConditional<A> {
    fn id(&self) -> &'static str {
        self.id
    }
    fn title(&self) -> &'static str {
        self.title
    }
    fn severity(&self) -> Severity {
        Severity::Warning
    }
    fn explanation(&self) -> &'static str {
        self.explanation
    }

    async fn run(&self, cx: &ProbeContext) -> Result<Outcome, StepError> {
        let request = self.access.request();
        let absent = self.access.absent();
        let matches = self.access.matches();
        let mut found = Findings::default();

        // A fresh key first: does the store do the request at all?
        let fresh_parts = parts();
        let answer = self.send(cx, "assembled-fresh", &fresh_parts, None).await?;
        let after = Self::read(cx, "assembled-fresh").await?;
        found.acceptance("absent_to_fresh_key", answer, &joined(&fresh_parts), &after)?;
        if !found.unsupported.is_empty() {
            return Ok(Outcome::unsupported(format!(
                "the store does not implement {request} with {absent} ({})",
                found.unsupported.join("; ")
            ))
            .with("checks", Value::Object(found.checks)));
        }

        // An existing object: create-if-absent must be refused.
        let key = "assembled";
        let first = cx
            .store()
            .create(key, payload("existing"))
            .await
            .step("create the existing object")?;
        let before = Self::read(cx, key).await?;
        let answer = self.send(cx, key, &parts(), None).await?;
        let after = Self::read(cx, key).await?;
        found.refusal("absent_onto_existing", answer, &before, &after)?;

        // Replace it, so that its first version is stale.
        let Some(current) = after.map(|o| o.version) else {
            return Ok(Outcome::error("the existing object disappeared")
                .with("checks", Value::Object(found.checks)));
        };
        let second = cx
            .store()
            .replace(key, &current, payload("replaced"))
            .await
            .step("replace the existing object")?;
        if second == first {
            return Ok(Outcome::error(
                "a replace kept the object's version, so no stale version could be tried",
            )
            .with("checks", Value::Object(found.checks)));
        }
        let before = Self::read(cx, key).await?;
        let answer = self.send(cx, key, &parts(), Some(&first)).await?;
        let after = Self::read(cx, key).await?;
        found.refusal("stale_version", answer, &before, &after)?;

        // The current version: must succeed.
        if let Some(current) = after.map(|o| o.version) {
            let current_parts = parts();
            let answer = self.send(cx, key, &current_parts, Some(&current)).await?;
            let after = Self::read(cx, key).await?;
            found.acceptance("current_version", answer, &joined(&current_parts), &after)?;
        }

        let checks = Value::Object(found.checks);
        let outcome = if !found.ignored.is_empty() {
            Outcome::fail(format!(
                "{request} ignored its condition: {}",
                found.ignored.join("; ")
            ))
        } else if !found.unsupported.is_empty() {
            Outcome::unsupported(format!(
                "the store does not implement {request} with {matches} ({})",
                found.unsupported.join("; ")
            ))
        } else if !found.broken.is_empty() {
            Outcome::fail(format!("{request}: {}", found.broken.join("; ")))
        } else {
            Outcome::pass(format!(
                "{request} with {absent} was refused on an existing object and with a stale \
                 {matches} (the object unchanged), and succeeded on a fresh key and with the \
                 current version"
            ))
        };
        Ok(outcome.with("checks", checks))
    }
}

/// Put Block List on an Azure store: two blocks staged with Put Block on
/// the blob, then committed under the condition.
#[cfg(feature = "azure")]
pub(crate) struct AzureBlockList(pub(crate) casaas_azure::AzureBlobStore);

#[cfg(feature = "azure")]
#[async_trait]
impl Assemble for AzureBlockList {
    fn request(&self) -> &'static str {
        "Put Block List"
    }
    fn absent(&self) -> &'static str {
        "If-None-Match: *"
    }
    fn matches(&self) -> &'static str {
        "If-Match"
    }
    async fn assemble(
        &self,
        key: &str,
        parts: &[Bytes],
        expected: Option<&Version>,
    ) -> Result<Result<Version, CasError>, StepError> {
        // Block ids of one blob must all have the same length.
        let ids: Vec<Vec<u8>> = (0..parts.len())
            .map(|i| format!("casaas-block-{i:04}").into_bytes())
            .collect();
        for (id, part) in ids.iter().zip(parts) {
            self.0
                .put_block(key, id, part.clone())
                .await
                .step("Put Block")?;
        }
        let ids: Vec<&[u8]> = ids.iter().map(Vec::as_slice).collect();
        Ok(self.0.put_block_list(key, &ids, expected).await)
    }
}

/// Compose on a GCS store: each part uploaded as an object of its own
/// (next to the destination), then composed into it under the condition.
#[cfg(feature = "gcs")]
pub(crate) struct GcsCompose {
    pub(crate) store: casaas_gcs::GcsStore,
    pub(crate) uploads: std::sync::atomic::AtomicUsize,
}

#[cfg(feature = "gcs")]
#[async_trait]
impl Assemble for GcsCompose {
    fn request(&self) -> &'static str {
        "compose"
    }
    fn absent(&self) -> &'static str {
        "ifGenerationMatch=0"
    }
    fn matches(&self) -> &'static str {
        "ifGenerationMatch"
    }
    async fn assemble(
        &self,
        key: &str,
        parts: &[Bytes],
        expected: Option<&Version>,
    ) -> Result<Result<Version, CasError>, StepError> {
        use casaas_core::CasStore;
        let round = self
            .uploads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut sources = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let source = format!("{key}.part-{round}-{i}");
            self.store
                .create(&source, part.clone())
                .await
                .step("upload a part")?;
            sources.push(source);
        }
        let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
        Ok(self.store.compose(&sources, key, expected).await)
    }
}

/// The Azure-only probes for `store`.
#[cfg(feature = "azure")]
pub(crate) fn azure_probes(store: &casaas_azure::AzureBlobStore) -> Vec<Box<dyn Probe>> {
    let (id, title, explanation) = crate::probes::AZURE_BLOCK_LIST;
    vec![Box::new(AssembledConditional {
        id,
        title,
        explanation,
        access: AzureBlockList(store.clone()),
    })]
}

/// The GCS-only probes for `store`.
#[cfg(feature = "gcs")]
pub(crate) fn gcs_probes(store: &casaas_gcs::GcsStore) -> Vec<Box<dyn Probe>> {
    let (id, title, explanation) = crate::probes::GCS_COMPOSE;
    vec![Box::new(AssembledConditional {
        id,
        title,
        explanation,
        access: GcsCompose {
            store: store.clone(),
            uploads: Default::default(),
        },
    })]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use casaas_core::{CasStore, MemoryStore};

    use super::*;
    use crate::model::Verdict;
    use crate::{NoProgress, Settings, Suite, Target};

    /// How the fake store treats the condition of its assembling request.
    #[derive(Clone, Copy)]
    enum Behaviour {
        Honours,
        /// Writes whatever the condition says.
        Ignores,
        /// Refuses as not implemented.
        Lacks,
        /// Refuses with a precondition failure, but writes anyway.
        RefusesAndWrites,
    }

    struct Fake {
        store: Arc<dyn CasStore>,
        behaviour: Behaviour,
    }

    #[async_trait]
    impl Assemble for Fake {
        fn request(&self) -> &'static str {
            "Fake Assemble"
        }
        fn absent(&self) -> &'static str {
            "absent"
        }
        fn matches(&self) -> &'static str {
            "match"
        }
        async fn assemble(
            &self,
            key: &str,
            parts: &[Bytes],
            expected: Option<&Version>,
        ) -> Result<Result<Version, CasError>, StepError> {
            let body = joined(parts);
            let unconditional = async || match self.store.get(key).await.unwrap() {
                Some(o) => self.store.replace(key, &o.version, body.clone()).await,
                None => self.store.create(key, body.clone()).await,
            };
            Ok(match self.behaviour {
                Behaviour::Honours => match expected {
                    None => self.store.create(key, body.clone()).await,
                    Some(v) => self.store.replace(key, v, body.clone()).await,
                },
                Behaviour::Ignores => unconditional().await,
                Behaviour::Lacks => Err(CasError::new(ErrorKind::Unsupported, "not implemented")
                    .with_status(501)
                    .with_code("NotImplemented")),
                Behaviour::RefusesAndWrites => {
                    let wrote = unconditional().await;
                    if expected.is_none() && wrote.is_ok() && key.ends_with("fresh") {
                        wrote
                    } else {
                        Err(CasError::new(ErrorKind::PreconditionFailed, "refused")
                            .with_status(412))
                    }
                }
            })
        }
    }

    async fn verdict_with(behaviour: Behaviour) -> (Verdict, String) {
        let memory: Arc<dyn CasStore> = Arc::new(MemoryStore::new());
        let probe = AssembledConditional {
            id: "azure_block_list_conditional",
            title: "t",
            explanation: "e",
            access: Fake {
                store: memory.clone(),
                behaviour,
            },
        };
        let suite = Suite::standard()
            .only(&["azure_block_list_conditional".to_string()])
            .unwrap()
            .with_probe(Box::new(probe));
        let report = suite
            .run(
                &Target::new(memory, "memory://assembled"),
                &Settings::quick(),
                Arc::new(NoProgress),
            )
            .await
            .unwrap();
        let result = &report.probes[0];
        (result.verdict, result.detail.clone())
    }

    #[tokio::test]
    async fn a_store_that_honours_the_conditions_passes() {
        let (verdict, detail) = verdict_with(Behaviour::Honours).await;
        assert_eq!(verdict, Verdict::Pass, "{detail}");
    }

    #[tokio::test]
    async fn a_store_that_ignores_the_conditions_fails() {
        let (verdict, detail) = verdict_with(Behaviour::Ignores).await;
        assert_eq!(verdict, Verdict::Fail, "{detail}");
        assert!(
            detail.contains("absent_onto_existing: accepted"),
            "{detail}"
        );
        assert!(detail.contains("stale_version: accepted"), "{detail}");
    }

    #[tokio::test]
    async fn a_refusal_that_still_writes_fails() {
        let (verdict, detail) = verdict_with(Behaviour::RefusesAndWrites).await;
        assert_eq!(verdict, Verdict::Fail, "{detail}");
        assert!(detail.contains("but the object changed"), "{detail}");
    }

    #[tokio::test]
    async fn a_store_without_the_request_is_unsupported() {
        let (verdict, detail) = verdict_with(Behaviour::Lacks).await;
        assert_eq!(verdict, Verdict::Unsupported, "{detail}");
        assert!(detail.contains("501 NotImplemented"), "{detail}");
    }
}
