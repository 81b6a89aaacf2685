//! Single-writer semantics of the conditional operations.

use std::time::{Duration, Instant};

use bytes::Bytes;
use casaas_core::{ErrorKind, StoredObject, Version};

use super::{answer_label, payload, version_form};
use crate::model::{Outcome, StepError, StepExt, error_evidence};
use crate::probe::ProbeContext;

fn ms(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 1e5).round() / 100.0
}

/// Does `read` hold exactly `body` at `version`?
fn holds(read: &Option<StoredObject>, body: &Bytes, version: &Version) -> bool {
    read.as_ref()
        .is_some_and(|o| o.body == body && &o.version == version)
}

fn describe_read(read: &Option<StoredObject>, names: &[(&Bytes, &str)]) -> String {
    match read {
        None => "absent".to_string(),
        Some(o) => names
            .iter()
            .find(|(b, _)| *b == &o.body)
            .map_or_else(|| "other bytes".to_string(), |(_, n)| n.to_string()),
    }
}

pub(super) async fn create_if_absent(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let body = payload("created");
    let started = Instant::now();
    let version = match store.create("object", body.clone()).await {
        Ok(v) => v,
        Err(e) if e.kind() == ErrorKind::PreconditionFailed => {
            return Ok(Outcome::fail(
                "create-if-absent of a fresh key was refused as if an object were there",
            )
            .with("answer", error_evidence(&e)));
        }
        Err(e) => return Err(e).step("create a fresh key"),
    };
    let create_ms = ms(started);
    let read = store.get("object").await.step("read it back")?;
    let outcome = match &read {
        None => Outcome::fail("the created object cannot be read back"),
        Some(o) if o.body != body => Outcome::fail("the created object reads back other bytes"),
        Some(o) if o.version != version => Outcome::fail(format!(
            "the create returned version {version} but a read answers {}",
            o.version
        )),
        Some(_) => Outcome::pass("a fresh key was created and reads back with its version"),
    };
    Ok(outcome
        .with("version_form", version_form(&version))
        .with("create_ms", create_ms))
}

pub(super) async fn create_conflict(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let first = payload("first");
    let second = payload("second");
    let v1 = store
        .create("object", first.clone())
        .await
        .step("create the object")?;
    let result = store.create("object", second.clone()).await;
    let read = store
        .get("object")
        .await
        .step("read after the second create")?;
    // Some stores apply writes late; look again a little later.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let later = store.get("object").await.step("read again 100 ms later")?;
    let names = [(&first, "the first body"), (&second, "the second body")];
    let stored = describe_read(&later, &names);
    match result {
        Ok(v2) => Ok(Outcome::fail(format!(
            "silent overwrite: a create on an existing key succeeded (version {v2}); the key now holds {stored}"
        ))
        .with("second_create", "succeeded")
        .with("stored", stored)),
        Err(e) if e.kind() == ErrorKind::Unsupported => Err(e).step("second create"),
        Err(e) => {
            let unchanged = holds(&read, &first, &v1) && holds(&later, &first, &v1);
            let outcome = if !unchanged {
                Outcome::fail(format!(
                    "the second create was answered {} but the key now holds {stored}",
                    answer_label(&e)
                ))
            } else if e.kind() == ErrorKind::PreconditionFailed {
                Outcome::pass(format!(
                    "the second create was rejected ({}) and the object is unchanged",
                    e.evidence()
                ))
            } else {
                Outcome::pass(format!(
                    "the second create was answered {} rather than precondition failed; the object is unchanged, and casaas resolves such answers by re-reading",
                    answer_label(&e)
                ))
            };
            Ok(outcome
                .with("second_create", error_evidence(&e))
                .with("stored", stored))
        }
    }
}

pub(super) async fn replace_if_match(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let mut version = store
        .create("object", payload("v1"))
        .await
        .step("create the object")?;
    let first_form = version_form(&version);
    for round in 2..=3 {
        let body = payload(&format!("v{round}"));
        let new = match store.replace("object", &version, body.clone()).await {
            Ok(v) => v,
            Err(e) if e.kind() == ErrorKind::PreconditionFailed => {
                return Ok(Outcome::fail(format!(
                    "a replace from the current version ({version}) was refused with {}",
                    answer_label(&e)
                ))
                .with("answer", error_evidence(&e))
                .with("version_form", first_form));
            }
            Err(e) => return Err(e).step("replace from the current version"),
        };
        if new == version {
            return Ok(Outcome::fail(format!(
                "a replace with a new body kept the version {version}"
            )));
        }
        let read = store.get("object").await.step("read after replace")?;
        if !holds(&read, &body, &new) {
            return Ok(Outcome::fail(
                "after a successful replace, a read does not answer the new body and version",
            ));
        }
        version = new;
    }
    Ok(
        Outcome::pass("two replaces from the current version succeeded with new versions")
            .with("version_form", first_form),
    )
}

pub(super) async fn replace_stale(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let (b1, b2, b3) = (payload("v1"), payload("v2"), payload("stale"));
    let v1 = store.create("object", b1.clone()).await.step("create")?;
    let v2 = store
        .replace("object", &v1, b2.clone())
        .await
        .step("replace from the current version")?;
    if v1 == v2 {
        return Ok(Outcome::fail(
            "a replace with a new body kept the version, so a stale version cannot be told apart",
        ));
    }
    let result = store.replace("object", &v1, b3.clone()).await;
    let read = store
        .get("object")
        .await
        .step("read after the stale replace")?;
    let stored = describe_read(&read, &[(&b2, "the current body"), (&b3, "the stale body")]);
    match result {
        Ok(_) => Ok(Outcome::fail(format!(
            "a replace from a stale version succeeded; the key now holds {stored}"
        ))
        .with("stale_replace", "succeeded")),
        Err(e) if e.kind() == ErrorKind::Unsupported => Err(e).step("stale replace"),
        Err(e) => {
            let outcome = if !holds(&read, &b2, &v2) {
                Outcome::fail(format!(
                    "the stale replace was answered {} but the key now holds {stored}",
                    answer_label(&e)
                ))
            } else {
                Outcome::pass(format!(
                    "the stale replace was rejected ({}) and the object is unchanged",
                    e.evidence()
                ))
            };
            Ok(outcome.with("stale_replace", error_evidence(&e)))
        }
    }
}

pub(super) async fn missing_key(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let other = store
        .create("other", payload("other"))
        .await
        .step("create a key to borrow a version from")?;
    let mut problems = Vec::new();
    let mut outcome = Outcome::pass("");

    let absent = store.get("absent").await.step("read a missing key")?;
    if absent.is_some() {
        problems.push("a read of a never-written key returned an object".to_string());
    }

    match store.replace("absent", &other, payload("replace")).await {
        Ok(v) => problems.push(format!(
            "a replace of a missing key succeeded (version {v}): the condition was ignored"
        )),
        Err(e) => {
            if !matches!(
                e.kind(),
                ErrorKind::NotFound | ErrorKind::PreconditionFailed
            ) {
                outcome.detail.push_str(&format!(
                    "replace of a missing key answered {}; ",
                    answer_label(&e)
                ));
            }
            outcome
                .evidence
                .insert("replace_missing", error_evidence(&e));
        }
    }
    let after = store.get("absent").await.step("read after the replace")?;
    if after.is_some() {
        problems.push("the missing key exists after a failed conditional replace".to_string());
    }

    match store.delete("absent", &other).await {
        Ok(()) => {
            outcome.evidence.insert("delete_missing", "succeeded");
            outcome
                .detail
                .push_str("a conditional delete of a missing key answered success; ");
        }
        Err(e) => outcome
            .evidence
            .insert("delete_missing", error_evidence(&e)),
    }
    let still = store.get("other").await.step("read the other key")?;
    if still.is_none_or(|o| o.version != other) {
        problems.push("an operation on a missing key changed a different key".to_string());
    }

    if problems.is_empty() {
        outcome
            .detail
            .push_str("conditional writes to a missing key were refused and created nothing");
        Ok(outcome)
    } else {
        Ok(Outcome::fail(problems.join("; ")).with_evidence(outcome.evidence))
    }
}

pub(super) async fn conditional_delete(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let declared = store.capabilities().conditional_delete;
    let (b1, b2) = (payload("v1"), payload("v2"));
    let v1 = store.create("object", b1).await.step("create")?;
    let v2 = store
        .replace("object", &v1, b2.clone())
        .await
        .step("replace")?;

    let stale = store.delete("object", &v1).await;
    let read = store
        .get("object")
        .await
        .step("read after the stale delete")?;
    let mut outcome = Outcome::pass("").with("declared_by_backend", declared);
    match stale {
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            return Ok(Outcome::unsupported(format!(
                "the store cannot make a delete conditional ({})",
                answer_label(&e)
            ))
            .with("declared_by_backend", declared)
            .with("answer", error_evidence(&e)));
        }
        Ok(()) => {
            return Ok(Outcome::fail(format!(
                "a delete from a stale version succeeded; the key is now {}",
                if read.is_some() { "present" } else { "gone" }
            ))
            .with("stale_delete", "succeeded"));
        }
        Err(e) => {
            outcome.evidence.insert("stale_delete", error_evidence(&e));
            if !holds(&read, &b2, &v2) {
                return Ok(Outcome::fail(format!(
                    "the stale delete was answered {} but the object changed",
                    answer_label(&e)
                ))
                .with_evidence(outcome.evidence));
            }
        }
    }

    store
        .delete("object", &v2)
        .await
        .step("delete from the current version")?;
    if store
        .get("object")
        .await
        .step("read after delete")?
        .is_some()
    {
        return Ok(
            Outcome::fail("a successful conditional delete left the object readable")
                .with_evidence(outcome.evidence),
        );
    }
    match store.delete("object", &v2).await {
        Ok(()) => outcome.evidence.insert("delete_again", "succeeded"),
        Err(e) => outcome.evidence.insert("delete_again", error_evidence(&e)),
    }
    // A different body, so that content-hash versions (S3 ETags) differ
    // unless the store really reuses versions.
    let v3 = store
        .create("object", payload("v3"))
        .await
        .step("re-create after delete")?;
    if v3 == v2 {
        return Ok(Outcome::fail(format!(
            "a re-created object reused the deleted object's version {v3}, so a condition from before the delete still matches"
        ))
        .with_evidence(outcome.evidence));
    }
    outcome.detail =
        "stale delete rejected, current delete succeeded, a re-created object got a new version"
            .to_string();
    Ok(outcome)
}

pub(super) async fn identical_rewrite(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let same = payload("same");
    let v1 = store.create("object", same.clone()).await.step("create")?;
    let v2 = store
        .replace("object", &v1, same.clone())
        .await
        .step("rewrite identical bytes")?;
    let stale = store.replace("object", &v1, payload("other")).await;
    let evidence_form = version_form(&v1);
    if v1 == v2 {
        let consistent = stale.is_ok();
        return Ok(Outcome::fail(format!(
            "an identical rewrite kept the version {v1} (a content hash): a version alone cannot tell two writes apart{}",
            if consistent {
                ""
            } else {
                "; and the unchanged version was then refused as a condition"
            }
        ))
        .with("version_form", evidence_form)
        .with("version_repeats", true));
    }
    match stale {
        Ok(_) => Ok(Outcome::fail(
            "after an identical rewrite the old version still matched a condition",
        )
        .with("version_form", evidence_form)
        .with("version_repeats", false)),
        Err(e) => Ok(Outcome::pass("an identical rewrite got a new version")
            .with("version_form", evidence_form)
            .with("version_repeats", false)
            .with("old_version_condition", error_evidence(&e))),
    }
}
