//! Capability profiles: what `casaas conformance --save-profile` proved
//! about a store, kept so that opening the store later acts on it.
//!
//! A profile is a small JSON file keyed by the store's identity (scheme,
//! endpoint, bucket or account and container; never a secret or a
//! credential). [`open_store_with`](crate::open_store_with) looks one up
//! for every URL it opens:
//!
//! - a NOT SAFE profile refuses the store before any request, naming the
//!   probes that failed;
//! - the options the run proved (`etag_unquoted=true` on Ceph RGW) are
//!   applied unless the URL or the caller sets them;
//! - a profile older than its `max_age_days`, or written by another
//!   version of casaas, is used and reported at warn.
//!
//! Where profiles live: the `capability_profile=PATH` option (or
//! `capability_profile=none` to look none up), else `$CASAAS_PROFILE_DIR`,
//! else `$XDG_CONFIG_HOME/casaas/profiles`, else
//! `$HOME/.config/casaas/profiles`. (`profile=` is taken: on `s3://` it
//! names the AWS profile.) The store guard still runs: a profile is
//! evidence from the past.
//!
//! ```
//! use casaas_core::StoreUrl;
//! use casaas_core::profile::{CapabilityProfile, ProfileVerdict, StoreIdentity};
//!
//! let url = StoreUrl::parse("s3://locks/app?endpoint=http://127.0.0.1:7480&region=x").unwrap();
//! let identity = StoreIdentity::of(&url);
//! assert_eq!(identity.file_name(), "s3_locks_127.0.0.1_7480.json");
//! let profile = CapabilityProfile::new(
//!     &url,
//!     ProfileVerdict::Safe,
//!     "SAFE WITH OPTIONS: etag_unquoted=true",
//!     vec!["etag_unquoted=true".into()],
//!     vec![],
//! );
//! let text = profile.to_json();
//! assert_eq!(CapabilityProfile::from_json(&text).unwrap(), profile);
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::lease::{Clock, SystemClock};
use crate::{CasError, ErrorKind, StoreUrl};

/// The schema of the profile files this version writes.
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

/// The environment variable naming the profile directory.
pub const PROFILE_DIR_VAR: &str = "CASAAS_PROFILE_DIR";

/// The option naming a profile file (`capability_profile=PATH`), or
/// `capability_profile=none` to use none.
pub const PROFILE_OPTION: &str = "capability_profile";

/// How old a profile may get before it is reported at warn, by default.
pub const DEFAULT_MAX_AGE_DAYS: u64 = 30;

/// The version of casaas that writes and reads profiles.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the conformance run concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProfileVerdict {
    /// Safe for leases (with the proven options).
    Safe,
    /// A critical probe failed.
    NotSafe,
    /// Some critical probes could not complete.
    Inconclusive,
}

/// Which store a profile is about: enough to tell stores apart, nothing
/// secret (no credential, no user info, no prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoreIdentity {
    /// The URL scheme (`s3`, `gs`, `az`, `file`, `memory`).
    pub scheme: String,
    /// The bucket, account or store name.
    pub authority: String,
    /// The endpoint the URL names (`endpoint=`), without user info.
    pub endpoint: Option<String>,
    /// The container (`az://account/container/…`), or the directory
    /// (`file://`).
    pub container: Option<String>,
}

impl StoreIdentity {
    /// The identity of the store `url` names.
    pub fn of(url: &StoreUrl) -> Self {
        let endpoint = url.option("endpoint").map(|e| match url::Url::parse(e) {
            Ok(mut parsed) => {
                let _ = parsed.set_username("");
                let _ = parsed.set_password(None);
                parsed.as_str().trim_end_matches('/').to_string()
            }
            Err(_) => e.to_string(),
        });
        let container = match url.scheme() {
            "az" => url.first_segment().ok().map(|(c, _)| c),
            "file" => Some(url.path().to_string()),
            _ => None,
        };
        StoreIdentity {
            scheme: url.scheme().to_string(),
            authority: url.authority().to_string(),
            endpoint,
            container,
        }
    }

    /// The profile's file name in a profile directory: the identity's parts
    /// joined by `_`, anything but letters, digits, `.` and `-` as `-`.
    pub fn file_name(&self) -> String {
        let endpoint_host = self.endpoint.as_deref().map(|e| {
            e.split_once("://")
                .map_or(e, |(_, rest)| rest)
                .replace(':', "_")
        });
        let parts = [
            Some(self.scheme.as_str()),
            Some(self.authority.as_str()),
            self.container.as_deref(),
            endpoint_host.as_deref(),
        ];
        let joined = parts
            .into_iter()
            .flatten()
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                            c
                        } else {
                            '-'
                        }
                    })
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("_");
        format!("{joined}.json")
    }
}

/// What a conformance run proved about one store; see the [module
/// docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CapabilityProfile {
    /// [`PROFILE_SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// The store.
    pub store: StoreIdentity,
    /// The run's verdict.
    pub verdict: ProfileVerdict,
    /// The run's verdict line, for people.
    pub summary: String,
    /// Options the run proved the store needs (`etag_unquoted=true`).
    pub proven_options: Vec<String>,
    /// The critical probes that failed.
    pub failed_probes: Vec<String>,
    /// When the profile was written, RFC 3339 UTC.
    pub created_at: String,
    /// The casaas version that wrote it.
    pub tool_version: String,
    /// After how many days the profile is reported as old.
    pub max_age_days: u64,
    /// Whether the run probed only some of the suite (`--only`): its SAFE
    /// says less, and opening the store says so at warn.
    #[serde(default)]
    pub partial: bool,
    /// Whether the run proved that the store keeps the condition of a write
    /// assembled from parts (S3 `CompleteMultipartUpload` with
    /// `If-None-Match` and `If-Match`, Azure Put Block List, GCS compose).
    /// The adapters send a conditional write above the single-part limit
    /// only to such a store (see [`Self::proves_large_conditional_writes`]).
    #[serde(default)]
    pub large_conditional_writes: bool,
}

impl CapabilityProfile {
    /// A profile of the store `url` names, written now.
    pub fn new(
        url: &StoreUrl,
        verdict: ProfileVerdict,
        summary: impl Into<String>,
        proven_options: Vec<String>,
        failed_probes: Vec<String>,
    ) -> Self {
        CapabilityProfile {
            schema_version: PROFILE_SCHEMA_VERSION,
            store: StoreIdentity::of(url),
            verdict,
            summary: summary.into(),
            proven_options,
            failed_probes,
            created_at: humantime::format_rfc3339_seconds(SystemClock::new().wall()).to_string(),
            tool_version: TOOL_VERSION.to_string(),
            max_age_days: DEFAULT_MAX_AGE_DAYS,
            partial: false,
            large_conditional_writes: false,
        }
    }

    /// Records whether the run proved conditions on assembled writes.
    #[must_use]
    pub fn with_large_conditional_writes(mut self, proven: bool) -> Self {
        self.large_conditional_writes = proven;
        self
    }

    /// Whether a conditional write larger than one part may be sent to this
    /// store: the profile is SAFE and its run proved the assembled-write
    /// probes. The adapters' `allow_large_conditional_writes` takes this.
    pub fn proves_large_conditional_writes(&self) -> bool {
        self.verdict == ProfileVerdict::Safe && self.large_conditional_writes
    }

    /// Marks the profile as written by a run of only some probes.
    pub fn partial(mut self, partial: bool) -> Self {
        self.partial = partial;
        self
    }

    /// The profile as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A profile from its JSON text.
    pub fn from_json(text: &str) -> Result<Self, CasError> {
        serde_json::from_str(text).map_err(|e| {
            CasError::misconfigured(format!(
                "not a casaas capability profile ({e}); write one with `casaas conformance URL \
                 --save-profile`"
            ))
        })
    }

    /// The default profile directory (see the [module docs](self)).
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os(PROFILE_DIR_VAR).filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir).join("casaas").join("profiles"));
        }
        std::env::var_os("HOME")
            .filter(|d| !d.is_empty())
            .map(|home| PathBuf::from(home).join(".config/casaas/profiles"))
    }

    /// Writes the profile to `path`, or under its identity's file name in
    /// the default directory (created if missing). Returns where it went.
    pub fn save(&self, path: Option<&Path>) -> Result<PathBuf, CasError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => Self::default_dir()
                .ok_or_else(|| {
                    CasError::misconfigured(format!(
                        "no profile directory: set {PROFILE_DIR_VAR} or HOME, or give a path"
                    ))
                })?
                .join(self.store.file_name()),
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| io_error(&path, "create", &e))?;
        }
        std::fs::write(&path, self.to_json() + "\n").map_err(|e| io_error(&path, "write", &e))?;
        Ok(path)
    }

    /// Reads the profile at `path`.
    pub fn load(path: &Path) -> Result<Self, CasError> {
        let text = std::fs::read_to_string(path).map_err(|e| io_error(path, "read", &e))?;
        Self::from_json(&text)
            .map_err(|e| CasError::misconfigured(format!("{}: {}", path.display(), e.message())))
    }

    /// The profile for the store `url` names: the file `explicit` names
    /// (which must exist), else the one for its identity in the default
    /// directory, if any. A profile for another store is an error.
    pub fn find(
        url: &StoreUrl,
        explicit: Option<&Path>,
    ) -> Result<Option<(PathBuf, Self)>, CasError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => match Self::default_dir() {
                Some(dir) => dir.join(StoreIdentity::of(url).file_name()),
                None => return Ok(None),
            },
        };
        if explicit.is_none() && !path.exists() {
            return Ok(None);
        }
        let profile = Self::load(&path)?;
        let identity = StoreIdentity::of(url);
        if profile.store != identity {
            return Err(CasError::misconfigured(format!(
                "the capability profile {} is for {}://{} ({}), not for this store",
                path.display(),
                profile.store.scheme,
                profile.store.authority,
                profile
                    .store
                    .endpoint
                    .as_deref()
                    .unwrap_or("default endpoint"),
            )));
        }
        Ok(Some((path, profile)))
    }

    /// How old the profile is, if its date reads.
    pub fn age(&self) -> Option<Duration> {
        let created = humantime::parse_rfc3339(&self.created_at).ok()?;
        SystemClock::new().wall().duration_since(created).ok()
    }

    /// Why the profile should be renewed, if it should: too old, or from
    /// another version of casaas.
    pub fn staleness(&self) -> Option<String> {
        let max_age = Duration::from_secs(self.max_age_days.saturating_mul(86_400));
        match self.age() {
            None => Some(format!("its date {:?} does not read", self.created_at)),
            Some(age) if age > max_age => Some(format!(
                "it was written {} days ago (older than its {} days)",
                age.as_secs() / 86_400,
                self.max_age_days
            )),
            _ if self.tool_version != TOOL_VERSION => Some(format!(
                "it was written by casaas {}, this is {TOOL_VERSION}",
                self.tool_version
            )),
            _ => None,
        }
    }

    /// Refuses the store `what` names if the profile says NOT SAFE; reports
    /// a stale, inconclusive or partial profile at warn.
    pub(crate) fn judge(&self, path: &Path, what: &dyn std::fmt::Display) -> Result<(), CasError> {
        if let Some(why) = self.staleness() {
            tracing::warn!(
                profile = %path.display(),
                "the capability profile may be out of date: {why}; run `casaas conformance URL \
                 --save-profile` again"
            );
        }
        match self.verdict {
            ProfileVerdict::NotSafe => {
                return Err(CasError::new(
                    ErrorKind::UnsafeStore,
                    format!(
                        "{what}: the capability profile {} (written {}) says NOT SAFE: failed {}. \
                         Run `casaas conformance URL --save-profile` again if the store has \
                         changed",
                        path.display(),
                        self.created_at,
                        if self.failed_probes.is_empty() {
                            "no probe named".to_string()
                        } else {
                            self.failed_probes.join(", ")
                        }
                    ),
                ));
            }
            ProfileVerdict::Inconclusive => tracing::warn!(
                profile = %path.display(),
                "the capability profile is inconclusive: {}",
                self.summary
            ),
            ProfileVerdict::Safe if self.partial => tracing::warn!(
                profile = %path.display(),
                "the capability profile's SAFE comes from a run of only some probes; run `casaas \
                 conformance URL --save-profile` in full"
            ),
            ProfileVerdict::Safe => {}
        }
        Ok(())
    }

    /// Acts on the profile for `url` before the store is opened: refuses a
    /// NOT SAFE store, reports a stale profile at warn, and returns `url`
    /// with the proven options the URL and the caller did not set.
    pub(crate) fn apply(&self, path: &Path, url: StoreUrl) -> Result<StoreUrl, CasError> {
        self.judge(path, &url)?;
        let missing: Vec<&String> = self
            .proven_options
            .iter()
            .filter(|option| {
                let name = option.split_once('=').map_or(option.as_str(), |(n, _)| n);
                !url.has_option(name)
            })
            .collect();
        if missing.is_empty() {
            return Ok(url);
        }
        tracing::debug!(profile = %path.display(), options = ?missing, "applying proven options");
        url.with_options(&missing)
    }
}

fn io_error(path: &Path, what: &str, e: &std::io::Error) -> CasError {
    CasError::misconfigured(format!(
        "cannot {what} the capability profile {}: {e}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(url: &str) -> StoreUrl {
        StoreUrl::parse(url).unwrap()
    }

    #[test]
    fn identity_has_no_secret_and_no_prefix() {
        let a = StoreIdentity::of(&s3(
            "s3://b/one?endpoint=http://user:pw@127.0.0.1:7480&region=x",
        ));
        let b = StoreIdentity::of(&s3("s3://b/two?endpoint=http://127.0.0.1:7480"));
        assert_eq!(a, b);
        assert_eq!(a.endpoint.as_deref(), Some("http://127.0.0.1:7480"));
        assert!(!a.file_name().contains("pw"));
        let az = StoreIdentity::of(&s3("az://acct/cont/p?endpoint=http://127.0.0.1:1/acct"));
        assert_eq!(az.container.as_deref(), Some("cont"));
        assert_eq!(az.file_name(), "az_acct_cont_127.0.0.1_1-acct.json");
    }

    #[test]
    fn proven_options_apply_unless_set() {
        let profile = CapabilityProfile::new(
            &s3("s3://b/p?endpoint=http://127.0.0.1:7480"),
            ProfileVerdict::Safe,
            "SAFE WITH OPTIONS",
            vec![
                "etag_unquoted=true".into(),
                "conditional_delete=false".into(),
            ],
            vec![],
        );
        let path = Path::new("p.json");
        let applied = profile
            .apply(path, s3("s3://b/q?endpoint=http://127.0.0.1:7480"))
            .unwrap();
        assert_eq!(applied.option("etag_unquoted"), Some("true"));
        assert_eq!(applied.option("conditional_delete"), Some("false"));
        // The URL's own setting wins, and so does one given beside it.
        let applied = profile
            .apply(
                path,
                s3("s3://b/q?endpoint=http://127.0.0.1:7480&etag_unquoted=false")
                    .with_given_options([("conditional_delete", "true")])
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(applied.option("etag_unquoted"), Some("false"));
        assert_eq!(applied.option("conditional_delete"), None);
    }

    #[test]
    fn a_not_safe_profile_refuses_the_store_naming_the_probes() {
        let url = s3("s3://b/p?endpoint=http://127.0.0.1:4569");
        let profile = CapabilityProfile::new(
            &url,
            ProfileVerdict::NotSafe,
            "NOT SAFE",
            vec![],
            vec!["create_conflict".into(), "race_create".into()],
        );
        let err = profile.apply(Path::new("s.json"), url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnsafeStore);
        let text = err.to_string();
        assert!(text.contains("create_conflict, race_create"), "{text}");
        assert!(text.contains("s.json"), "{text}");
    }

    #[test]
    fn staleness_is_told() {
        let url = s3("s3://b/p");
        let mut profile =
            CapabilityProfile::new(&url, ProfileVerdict::Safe, "SAFE", vec![], vec![]);
        assert_eq!(profile.staleness(), None);
        profile.created_at = "2020-01-01T00:00:00Z".into();
        assert!(profile.staleness().unwrap().contains("days ago"));
        profile.created_at =
            humantime::format_rfc3339_seconds(SystemClock::new().wall()).to_string();
        profile.tool_version = "0.0.1".into();
        assert!(profile.staleness().unwrap().contains("casaas 0.0.1"));
        // Stale, but still applied.
        assert!(profile.apply(Path::new("x"), url).is_ok());
    }

    #[test]
    fn profiles_are_found_by_path_and_checked_against_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let url = s3("s3://b/p?endpoint=http://127.0.0.1:4569");
        let profile = CapabilityProfile::new(&url, ProfileVerdict::Safe, "SAFE", vec![], vec![]);
        let path = profile.save(Some(&dir.path().join("sub/x.json"))).unwrap();
        let (found, loaded) = CapabilityProfile::find(&url, Some(&path)).unwrap().unwrap();
        assert_eq!((found, loaded), (path.clone(), profile));
        let other = s3("s3://other/p?endpoint=http://127.0.0.1:4569");
        let err = CapabilityProfile::find(&other, Some(&path)).unwrap_err();
        assert!(err.to_string().contains("not for this store"), "{err}");
        let missing = CapabilityProfile::find(&url, Some(&dir.path().join("none.json")));
        assert!(missing.unwrap_err().to_string().contains("cannot read"));
        std::fs::write(&path, "{}").unwrap();
        let err = CapabilityProfile::find(&url, Some(&path)).unwrap_err();
        assert!(
            err.to_string().contains("not a casaas capability profile"),
            "{err}"
        );
    }
}
