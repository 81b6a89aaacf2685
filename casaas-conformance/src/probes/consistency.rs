//! Read-after-write and list-after-write consistency.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use casaas_core::{CasError, CasStore, ErrorKind, Version};
use futures::StreamExt;

use super::payload;
use crate::model::{Outcome, StepError, StepExt};
use crate::probe::ProbeContext;

/// Retries `op` while the store answers throttled or concurrent request
/// (nothing was written), a few times with backoff; counts the retries.
pub(crate) async fn patiently<T, F, Fut>(retries: &mut u64, mut op: F) -> Result<T, CasError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CasError>>,
{
    let mut delay = Duration::from_millis(100);
    for _ in 0..6 {
        match op().await {
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Throttled | ErrorKind::ConcurrentRequest
                ) =>
            {
                *retries += 1;
                tokio::time::sleep(e.retry_after().unwrap_or(delay).min(Duration::from_secs(5)))
                    .await;
                delay *= 2;
            }
            other => return other,
        }
    }
    op().await
}

/// Keys the read-after-write rounds cycle through: more when writes to
/// one key are paced, so that the pace does not set the run time.
fn keys_for(cx: &ProbeContext) -> usize {
    if cx.min_write_interval().is_some() {
        50
    } else {
        10
    }
}

pub(super) async fn read_after_write(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let rounds = cx.settings().consistency_rounds();
    let mut retries = 0;
    let keys = keys_for(cx);
    let mut versions: Vec<Version> = Vec::with_capacity(keys);
    for k in 0..keys {
        let key = format!("raw/{k}");
        let v = patiently(&mut retries, || store.create(&key, payload("start")))
            .await
            .step("create")?;
        versions.push(v);
    }
    let (mut stale, mut stale_after_create, mut creates, mut replaces) = (0u64, 0u64, 0u64, 0u64);
    let mut examples: Vec<String> = Vec::new();
    for i in 0..rounds {
        let body = payload(&format!("round {i}"));
        let (key, version, fresh) = if i % 10 == 9 {
            let key = format!("fresh/{i}");
            let v = patiently(&mut retries, || store.create(&key, body.clone()))
                .await
                .step("create a fresh key")?;
            creates += 1;
            (key, v, true)
        } else {
            let k = i % keys;
            let key = format!("raw/{k}");
            let v = patiently(&mut retries, || {
                store.replace(&key, &versions[k], body.clone())
            })
            .await
            .step("replace")?;
            versions[k] = v.clone();
            replaces += 1;
            (key, v, false)
        };
        let read = store.get(&key).await.step("read after write")?;
        let ok = read
            .as_ref()
            .is_some_and(|o| o.body == body && o.version == version);
        if !ok {
            if fresh {
                stale_after_create += 1;
            } else {
                stale += 1;
            }
            if examples.len() < 3 {
                examples.push(format!(
                    "round {i}: wrote {version} to {key}, read {}",
                    read.map_or_else(|| "nothing".to_string(), |o| o.version.to_string())
                ));
            }
        }
        if i % 20 == 0 {
            cx.step(i as u64, rounds as u64);
        }
    }
    let outcome = Outcome::check(
        stale + stale_after_create == 0,
        format!("every one of {rounds} reads right after a write saw that write"),
        format!(
            "{} of {rounds} reads right after a write answered an older state",
            stale + stale_after_create
        ),
    );
    Ok(outcome
        .with("rounds", rounds)
        .with("replaces", replaces)
        .with("creates", creates)
        .with("stale_after_replace", stale)
        .with("stale_after_create", stale_after_create)
        .with("throttle_retries", retries)
        .with("examples", examples))
}

/// What the first listing, right after the creates, showed.
struct FirstListing {
    sorted: bool,
    /// Created keys not listed.
    missing: usize,
    /// Created keys listed with another version.
    wrong: usize,
}

/// Creates `keys` (eight at a time): each key's version.
async fn create_keys(
    store: &Arc<dyn CasStore>,
    keys: &[String],
) -> Result<BTreeMap<String, Version>, StepError> {
    let created: Vec<Result<(String, Version), CasError>> =
        futures::stream::iter(keys.iter().cloned().map(|key| async move {
            let mut retries = 0;
            let v = patiently(&mut retries, || store.create(&key, payload("listed"))).await?;
            Ok((key, v))
        }))
        .buffer_unordered(8)
        .collect()
        .await;
    let mut expected = BTreeMap::new();
    for result in created {
        let (key, v) = result.step("create keys to list")?;
        expected.insert(key, v);
    }
    Ok(expected)
}

/// Lists `list/` and compares the listing with the `expected` versions,
/// adding what is wrong to `problems`.
async fn check_first_listing(
    store: &Arc<dyn CasStore>,
    expected: &BTreeMap<String, Version>,
    problems: &mut Vec<String>,
) -> Result<FirstListing, StepError> {
    let n = expected.len();
    let listed = store.list("list/").await.step("list")?;
    let sorted = listed.windows(2).all(|w| w[0].key < w[1].key);
    if !sorted {
        problems.push("the listing is not sorted by key".to_string());
    }
    let found: BTreeMap<String, Version> = listed.into_iter().map(|e| (e.key, e.version)).collect();
    let missing = expected.keys().filter(|k| !found.contains_key(*k)).count();
    let wrong = expected
        .iter()
        .filter(|(k, v)| found.get(*k).is_some_and(|f| f != *v))
        .count();
    let extra: Vec<&String> = found
        .keys()
        .filter(|k| !expected.contains_key(*k))
        .collect();
    if missing > 0 {
        problems.push(format!(
            "{missing} of {n} just-created keys were not listed"
        ));
    }
    if wrong > 0 {
        problems.push(format!("{wrong} keys were listed with another version"));
    }
    if !extra.is_empty() {
        problems.push(format!("keys outside the prefix were listed: {extra:?}"));
    }
    Ok(FirstListing {
        sorted,
        missing,
        wrong,
    })
}

/// Replaces the first five `keys` and lists again: a replace must show up
/// with its new version. How many were listed with the old one.
async fn check_replaces(
    store: &Arc<dyn CasStore>,
    keys: &[String],
    expected: &mut BTreeMap<String, Version>,
    problems: &mut Vec<String>,
) -> Result<usize, StepError> {
    for key in keys.iter().take(5) {
        let Some(old) = expected.get(key).cloned() else {
            continue;
        };
        let new = store
            .replace(key, &old, payload("relisted"))
            .await
            .step("replace a listed key")?;
        expected.insert(key.clone(), new);
    }
    let relisted: BTreeMap<String, Version> = store
        .list("list/")
        .await
        .step("list after replace")?
        .into_iter()
        .map(|e| (e.key, e.version))
        .collect();
    let stale_versions = keys
        .iter()
        .take(5)
        .filter(|key| relisted.get(*key) != expected.get(*key))
        .count();
    if stale_versions > 0 {
        problems.push(format!(
            "{stale_versions} of 5 replaced keys were listed with their old version"
        ));
    }
    Ok(stale_versions)
}

/// Deletes the next five `keys` and lists again, where conditional
/// deletes exist (what earlier probes found, not only what the backend
/// declares): a delete must disappear from the listing. How many were
/// still listed (`None` without deletes), and what the probe deleted.
async fn check_deletes(
    store: &Arc<dyn CasStore>,
    keys: &[String],
    expected: &BTreeMap<String, Version>,
    problems: &mut Vec<String>,
) -> Result<(Option<usize>, &'static str), StepError> {
    let none = "no deletes (the store has no conditional delete)";
    if !store.capabilities().conditional_delete {
        return Ok((None, none));
    }
    let mut deleted = Vec::new();
    for key in keys.iter().skip(5).take(5) {
        if let Some(v) = expected.get(key) {
            match store.delete(key, v).await {
                Ok(()) => deleted.push(key.clone()),
                Err(e) if e.kind() == ErrorKind::Unsupported => {
                    tracing::debug!(
                        "list_after_write: conditional delete unsupported: {}",
                        e.evidence()
                    );
                    return Ok((None, none));
                }
                Err(e) => return Err(e).step("delete a listed key"),
            }
        }
    }
    let after = store.list("list/").await.step("list after delete")?;
    let count = after.iter().filter(|e| deleted.contains(&e.key)).count();
    if count > 0 {
        problems.push(format!("{count} of 5 deleted keys were still listed"));
    }
    Ok((Some(count), "deletes"))
}

/// A listing right after creates, replaces and deletes shows exactly the
/// current state, sorted, and nothing outside the prefix.
pub(super) async fn list_after_write(cx: &ProbeContext) -> Result<Outcome, StepError> {
    let store = cx.store();
    let n = if cx.settings().quick { 20 } else { 100 };
    let keys: Vec<String> = (0..n).map(|i| format!("list/{i:04}")).collect();
    let mut expected = create_keys(store, &keys).await?;
    store
        .create("listx", payload("sibling"))
        .await
        .step("create a sibling key")?;

    let mut problems = Vec::new();
    let first = check_first_listing(store, &expected, &mut problems).await?;
    let stale_versions = check_replaces(store, &keys, &mut expected, &mut problems).await?;
    let (ghosts, deletes) = check_deletes(store, &keys, &expected, &mut problems).await?;

    let outcome = if problems.is_empty() {
        Outcome::pass(format!(
            "a listing right after {n} creates, 5 replaces and {deletes} showed exactly the current state"
        ))
    } else {
        Outcome::fail(problems.join("; "))
    };
    Ok(outcome
        .with("keys", n)
        .with("missing_after_create", first.missing)
        .with("wrong_version", first.wrong)
        .with("stale_after_replace", stale_versions)
        .with("listed_after_delete", ghosts)
        .with("sorted", first.sorted))
}
