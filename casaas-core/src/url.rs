//! [`StoreUrl`]: a store URL parsed once.
//!
//! Every backend is named by a URL (`s3://bucket/prefix?region=…`). It is
//! parsed here, once: the scheme, the authority (bucket, account or store
//! name) and the path are percent-decoded exactly once, the query becomes
//! named options read through one parser for booleans and durations, and
//! printing the URL never shows a secret. The registry hands a `StoreUrl` to
//! the provider that registered the scheme; the provider turns it into its
//! typed configuration and nobody looks at the text again.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use crate::CasError;

/// What a redacted secret is replaced with in printed URLs.
pub const REDACTED: &str = "[redacted]";

/// A store URL: `SCHEME://AUTHORITY/PATH?OPTIONS`, parsed once.
///
/// ```
/// use casaas_core::StoreUrl;
///
/// let url = StoreUrl::parse("s3://locks/my%20app/x%2541?region=eu-west-1&path_style=yes").unwrap();
/// assert_eq!(url.scheme(), "s3");
/// assert_eq!(url.authority(), "locks");
/// // Decoded exactly once: `%2541` is `%41`, not `A`.
/// assert_eq!(url.path(), "my app/x%41");
/// let options = url.options(&["region", "path_style"]).unwrap();
/// assert_eq!(options.get("region"), Some("eu-west-1"));
/// assert!(options.get_bool("path_style", false).unwrap());
/// // Printing never shows a secret.
/// let url = StoreUrl::parse("az://acct/c?sig=abc&endpoint=http://u:pw@127.0.0.1:1").unwrap();
/// assert_eq!(url.to_string(), "az://acct/c?sig=[redacted]&endpoint=http://[redacted]@127.0.0.1:1");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl {
    url: Url,
    authority: String,
    path: String,
    options: Vec<(String, String)>,
    /// Options given beside the URL ([`with_given_options`]): credentials
    /// among them, which never go in the URL text. Never printed.
    ///
    /// [`with_given_options`]: StoreUrl::with_given_options
    given: Vec<(String, String)>,
}

impl StoreUrl {
    /// Parses a store URL. Fails (as `Misconfigured`) when the text is not a
    /// URL, when an option is given twice, or when a part is not UTF-8 once
    /// decoded.
    pub fn parse(text: &str) -> Result<Self, CasError> {
        let url = Url::parse(text).map_err(|e| {
            CasError::misconfigured(format!(
                "{:?} is not a valid store URL ({e}); expected e.g. memory://NAME/prefix, \
                 file:///abs/dir, s3://bucket/prefix, gs://bucket/prefix or \
                 az://account/container/prefix",
                redact_text_url(text)
            ))
        })?;
        Self::from_url(url)
    }

    fn from_url(url: Url) -> Result<Self, CasError> {
        let authority = decode(url.host_str().unwrap_or_default(), "authority")?;
        let path = decode(url.path(), "path")?.trim_matches('/').to_string();
        let mut options: Vec<(String, String)> = Vec::new();
        for (name, value) in url.query_pairs() {
            if options.iter().any(|(n, _)| n == name.as_ref()) {
                return Err(CasError::misconfigured(format!(
                    "option '{name}' is given twice in the URL"
                )));
            }
            options.push((name.into_owned(), value.into_owned()));
        }
        Ok(StoreUrl {
            url,
            authority,
            path,
            options,
            given: Vec::new(),
        })
    }

    /// The scheme, lowercase (`s3`, `gs`, `az`, `file`, `memory`).
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }

    /// The authority, decoded: the bucket (`s3`, `gs`), the account (`az`)
    /// or the store name (`memory`); empty when the URL has none.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path, decoded once, without leading or trailing `/`: the prefix
    /// for most schemes (`container/prefix` for `az`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path split at its first `/`, each part decoded once:
    /// (`container`, `prefix`) of `az://account/container/prefix`. An
    /// encoded `%2F` in the first segment stays inside it.
    pub fn first_segment(&self) -> Result<(String, String), CasError> {
        let raw = self.url.path().trim_matches('/');
        let (first, rest) = raw.split_once('/').unwrap_or((raw, ""));
        Ok((
            decode(first, "path")?,
            decode(rest, "path")?.trim_matches('/').to_string(),
        ))
    }

    /// The port, if the URL gives one (store URLs name buckets, not
    /// servers: providers reject it).
    pub fn port(&self) -> Option<u16> {
        self.url.port()
    }

    /// Does the URL carry a user name or password? Providers reject that:
    /// credentials never come from a store URL.
    pub fn has_credentials(&self) -> bool {
        !self.url.username().is_empty() || self.url.password().is_some()
    }

    /// Does the URL carry a `#fragment`?
    pub fn has_fragment(&self) -> bool {
        self.url.fragment().is_some()
    }

    /// The local path a `file://` URL names, decoded once.
    pub fn file_path(&self) -> Option<PathBuf> {
        self.url.to_file_path().ok()
    }

    /// The local directory a `file://` URL, or an `fs://` one (OpenDAL's
    /// local service, inside `opendal+`), names; `None` for a remote store.
    pub fn local_path(&self) -> Option<PathBuf> {
        match self.scheme() {
            "file" => self.file_path(),
            "fs" => Some(PathBuf::from("/").join(self.path())),
            _ => None,
        }
    }

    /// The URL of the directory that holds the object the path names, and
    /// that object's name (the last path segment, decoded once):
    /// (`s3://b/locks?o=1`, `x`) of `s3://b/locks/x?o=1#f`. The fragment is
    /// dropped; options and options given beside the URL are kept. The
    /// name is empty when the path ends in `/`; `Ok(None)` for a URL
    /// without a path hierarchy (`mailto:x`).
    ///
    /// ```
    /// use casaas_core::StoreUrl;
    /// let url = StoreUrl::parse("s3://b/locks/my%20lock?region=x").unwrap();
    /// let (dir, name) = url.parent_and_name().unwrap().unwrap();
    /// assert_eq!((dir.as_unredacted_str(), name.as_str()), ("s3://b/locks?region=x", "my lock"));
    /// ```
    pub fn parent_and_name(&self) -> Result<Option<(StoreUrl, String)>, CasError> {
        if self.url.cannot_be_a_base() {
            return Ok(None);
        }
        let raw = self.url.path();
        let (dir, name) = raw.rsplit_once('/').unwrap_or(("", raw));
        let name = decode(name, "object name")?;
        let mut url = self.url.clone();
        url.set_path(if dir.is_empty() { "/" } else { dir });
        url.set_fragment(None);
        let mut parent = Self::from_url(url)?;
        parent.given = self.given.clone();
        Ok(Some((parent, name)))
    }

    /// Splits a lock URL into the store URL of the lock's directory and the
    /// lock's key: (`s3://b/locks?o=1`, `my lock`) of
    /// `s3://b/locks/my%20lock?o=1`. The one split every interface uses (the
    /// `casaas` command, the library, the Python package), so that one URL
    /// names one lock object everywhere. The key is the last path segment,
    /// decoded once; an adapter prefix (`object_store+`, `opendal+`) stays
    /// on the store URL. Refused (as `Misconfigured`, never echoing the
    /// URL): text that is not a URL, a URL without a path hierarchy, a path
    /// that ends in `/` (a directory, not a lock) and a `#fragment` (a `#`
    /// in a lock's name is written `%23`).
    ///
    /// ```
    /// use casaas_core::StoreUrl;
    /// let (store, key) = StoreUrl::split_lock_url("opendal+s3://b/locks/a%20b?x=1").unwrap();
    /// assert_eq!((store.as_str(), key.as_str()), ("opendal+s3://b/locks?x=1", "a b"));
    /// assert!(StoreUrl::split_lock_url("s3://b/locks/a/").is_err());
    /// assert!(StoreUrl::split_lock_url("s3://b/locks/a#b").is_err());
    /// ```
    pub fn split_lock_url(text: &str) -> Result<(String, String), CasError> {
        if let Some((adapter, inner)) = crate::registry::split_adapter(text) {
            let (store, key) = Self::split_lock_url(inner)?;
            return Ok((format!("{adapter}+{store}"), key));
        }
        let url = Url::parse(text).map_err(|e| {
            CasError::misconfigured(format!(
                "not a valid lock URL ({e}); expected e.g. s3://bucket/locks/NAME"
            ))
        })?;
        if url.fragment().is_some() {
            return Err(CasError::misconfigured(
                "a lock URL takes no #fragment: write a '#' in the lock's name as %23",
            ));
        }
        let parsed = Self::from_url(url)?;
        let (store, key) = parsed.parent_and_name()?.ok_or_else(|| {
            CasError::misconfigured(
                "not a valid lock URL: it has no path; expected e.g. s3://bucket/locks/NAME",
            )
        })?;
        if key.is_empty() {
            return Err(CasError::misconfigured(
                "the URL names a directory, not a lock object: add the lock's name to the \
                 path (and no trailing '/')",
            ));
        }
        Ok((store.as_unredacted_str().to_string(), key))
    }

    /// The same URL without user name and password (where the scheme can
    /// carry them), for showing it whole: unlike `Display`, which marks
    /// where they were, this leaves no trace of them.
    pub fn without_credentials(&self) -> StoreUrl {
        let mut url = self.url.clone();
        // File URLs cannot carry user info: nothing to remove there.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let mut bare = self.clone();
        bare.url = url;
        bare
    }

    /// The checks every provider makes before reading its URL: the scheme
    /// is `scheme`, and the URL carries no credentials (`advice` says where
    /// they come from instead), no port (a store URL names a bucket or an
    /// account; the server is the `endpoint=` option) and no fragment.
    pub fn check_provider(&self, scheme: &str, advice: &str) -> Result<(), CasError> {
        if self.scheme() != scheme {
            return Err(CasError::misconfigured(format!(
                "scheme '{}' is not {scheme}: this store URL starts with {scheme}://",
                self.scheme()
            )));
        }
        if self.has_credentials() {
            // Never echoed.
            return Err(CasError::misconfigured(format!(
                "credentials never go in the URL: they must not be put in an {scheme}:// URL; \
                 {advice}"
            )));
        }
        if self.port().is_some() {
            return Err(CasError::misconfigured(format!(
                "an {scheme}:// URL has no port: it names a bucket or account, not a \
                 host:port; give the server as endpoint=http://host:port"
            )));
        }
        if self.has_fragment() {
            return Err(CasError::misconfigured(format!(
                "an {scheme}:// URL takes no #fragment"
            )));
        }
        Ok(())
    }

    /// The options, checked against the names a backend knows, so that a
    /// misspelt option is an error rather than silently ignored. Options
    /// given beside the URL ([`with_given_options`](Self::with_given_options))
    /// are read the same way; a credential-looking option in the URL text
    /// itself is refused, so that no secret travels in a URL.
    pub fn options(&self, allowed: &[&str]) -> Result<UrlOptions, CasError> {
        if let Some((name, _)) = self
            .options
            .iter()
            .find(|(name, value)| allowed.contains(&name.as_str()) && is_secret_option(name, value))
        {
            return Err(CasError::misconfigured(format!(
                "option '{name}' is a credential and never goes in the URL: give it beside the \
                 URL (casaas_core::open_store_with) or in the environment as {}",
                name.to_ascii_uppercase()
            )));
        }
        if let Some((name, _)) = self
            .given
            .iter()
            .find(|(name, _)| !allowed.contains(&name.as_str()))
        {
            let hint = closest(name, allowed)
                .map(|known| format!(" (did you mean '{known}'?)"))
                .unwrap_or_default();
            return Err(CasError::misconfigured(format!(
                "unknown option '{name}' given for a {} URL{hint}; known options: {}",
                self.scheme(),
                if allowed.is_empty() {
                    "none".to_string()
                } else {
                    allowed.join(", ")
                }
            )));
        }
        if let Some((name, _)) = self
            .options
            .iter()
            .find(|(name, _)| !allowed.contains(&name.as_str()))
        {
            // Credentials are known, but not in a URL: leave them out here.
            let in_url: Vec<&str> = allowed
                .iter()
                .copied()
                .filter(|n| !is_secret_name(n))
                .collect();
            let hint = closest(name, &in_url)
                .map(|known| format!(" (did you mean '{known}'?)"))
                .unwrap_or_default();
            return Err(CasError::misconfigured(format!(
                "unknown option '{name}' in {} URL{hint}; known options: {}",
                self.scheme(),
                if in_url.is_empty() {
                    "none".to_string()
                } else {
                    in_url.join(", ")
                }
            )));
        }
        let mut values = self.options.clone();
        values.extend(self.given.iter().cloned());
        Ok(UrlOptions { values })
    }

    /// Is option `name` set, in the URL or beside it?
    pub fn has_option(&self, name: &str) -> bool {
        self.options
            .iter()
            .chain(&self.given)
            .any(|(n, _)| n == name)
    }

    /// The same URL with `options` given beside it: what a caller passes
    /// with the URL rather than in it, credentials above all (their names
    /// are the provider's environment variables in lowercase, such as
    /// `aws_secret_access_key` or `azure_storage_key`). An option both in
    /// the URL and given is an error, so that neither silently wins.
    pub fn with_given_options<I, K, V>(mut self, options: I) -> Result<Self, CasError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        for (name, value) in options {
            let name = name.as_ref().to_ascii_lowercase();
            if self.options.iter().any(|(n, _)| *n == name) {
                return Err(CasError::misconfigured(format!(
                    "option '{name}' is both in the URL and given beside it: keep one"
                )));
            }
            let value = value.into();
            match self.given.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => self.given.push((name, value)),
            }
        }
        Ok(self)
    }

    /// A credential by its environment variable's name (`AWS_ACCESS_KEY_ID`):
    /// the option of that name in lowercase given beside the URL, else the
    /// variable in the process environment; empty values count as absent.
    pub fn credential(&self, variable: &str) -> Option<String> {
        let name = variable.to_ascii_lowercase();
        self.given
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(variable).ok())
            .filter(|v| !v.is_empty())
    }

    /// Was the credential named by `variable` given beside the URL (rather
    /// than found in the environment)?
    pub fn has_given_credential(&self, variable: &str) -> bool {
        let name = variable.to_ascii_lowercase();
        self.given.iter().any(|(n, v)| *n == name && !v.is_empty())
    }

    /// The raw value of option `name`, for tools that report on a URL
    /// rather than open it (a backend reads its options through
    /// [`options`](Self::options), which rejects unknown names).
    pub fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The same URL without option `name` (in the URL or given beside it),
    /// and its value if it was set: for options read before the backend
    /// sees the URL.
    pub fn without_option(&self, name: &str) -> Result<(Self, Option<String>), CasError> {
        let value = self
            .options
            .iter()
            .chain(&self.given)
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone());
        if value.is_none() {
            return Ok((self.clone(), None));
        }
        let mut url = self.url.clone();
        let kept: Vec<(String, String)> = self
            .options
            .iter()
            .filter(|(n, _)| n != name)
            .cloned()
            .collect();
        url.set_query(None);
        if !kept.is_empty() {
            url.query_pairs_mut().extend_pairs(kept.iter());
        }
        let mut rebuilt = Self::from_url(url)?;
        rebuilt.given = self
            .given
            .iter()
            .filter(|(n, _)| n != name)
            .cloned()
            .collect();
        Ok((rebuilt, value))
    }

    /// The same URL with `options` (`name=value`, or a bare `name` for
    /// `name=true`) set, replacing values already there.
    pub fn with_options<S: AsRef<str>>(&self, options: &[S]) -> Result<Self, CasError> {
        let mut values = self.options.clone();
        for option in options {
            let option = option.as_ref();
            let (name, value) = option.split_once('=').unwrap_or((option, "true"));
            match values.iter_mut().find(|(n, _)| n == name) {
                Some(slot) => slot.1 = value.to_string(),
                None => values.push((name.to_string(), value.to_string())),
            }
        }
        let mut url = self.url.clone();
        url.set_query(None);
        if !values.is_empty() {
            url.query_pairs_mut().extend_pairs(values.iter());
        }
        let mut rebuilt = Self::from_url(url)?;
        rebuilt.given = self.given.clone();
        Ok(rebuilt)
    }

    /// The secrets the URL carries: its user name and password, the values
    /// of secret-looking options, and the user info of URLs inside option
    /// values (`endpoint=http://user:password@host`). For registering them
    /// with a redactor that scrubs text where they appear without the URL.
    pub fn secrets(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut userinfo = |url: &Url| {
            if let Some(password) = url.password() {
                found.push(format!("{}:{password}", url.username()));
                found.push(password.to_string());
            }
            if !url.username().is_empty() {
                found.push(url.username().to_string());
            }
        };
        userinfo(&self.url);
        for (_, value) in &self.options {
            if let Ok(inner) = Url::parse(value) {
                userinfo(&inner);
            }
        }
        for (name, value) in self.options.iter().chain(&self.given) {
            if is_secret_option(name, value) {
                found.push(value.clone());
            }
        }
        found.retain(|s| !s.is_empty());
        found
    }

    /// The full URL text, secrets included, for handing to a client that
    /// must open it again. Never print it: use `Display`.
    pub fn as_unredacted_str(&self) -> &str {
        self.url.as_str()
    }
}

impl fmt::Display for StoreUrl {
    /// The URL with user info and the values of secret-looking options
    /// replaced by `[redacted]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme())?;
        if self.has_credentials() {
            write!(f, "{REDACTED}@")?;
        }
        if let Some(host) = self.url.host_str() {
            f.write_str(host)?;
        }
        if let Some(port) = self.url.port() {
            write!(f, ":{port}")?;
        }
        f.write_str(self.url.path())?;
        for (i, (name, value)) in self.options.iter().enumerate() {
            let value = if is_secret_option(name, value) {
                REDACTED.to_string()
            } else {
                redact_text_url(value)
            };
            write!(f, "{}{name}={value}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = CasError;

    fn from_str(text: &str) -> Result<Self, CasError> {
        StoreUrl::parse(text)
    }
}

/// Whether an option or parameter named `name` holds a secret (a key, a
/// signature, a token, a password).
pub fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    const PARTS: [&str; 12] = [
        "storage_key",
        "secret",
        "password",
        "passwd",
        "token",
        "signature",
        "credential",
        "access_key",
        "accesskey",
        "account_key",
        "api_key",
        "connection_string",
    ];
    const WHOLE: [&str; 8] = [
        "sig",
        "sas",
        "key",
        "pwd",
        "pass",
        "auth",
        "apikey",
        "authorization",
    ];
    PARTS.iter().any(|p| lower.contains(p))
        || WHOLE.contains(&lower.as_str())
        || lower.ends_with("_key")
        || lower.ends_with("-key")
}

/// Whether the option or parameter `name=value` carries a secret: a
/// credential-looking name ([`is_secret_name`]) whose value is not a plain
/// flag. `skip_signature=true` names a secret but holds none, and treating
/// `true` as one would redact every `true` in a JSON report.
///
/// ```
/// use casaas_core::provider::is_secret_option;
/// assert!(is_secret_option("sig", "abc123"));
/// assert!(!is_secret_option("skip_signature", "true"));
/// assert!(!is_secret_option("region", "eu-west-1"));
/// ```
pub fn is_secret_option(name: &str, value: &str) -> bool {
    is_secret_name(name) && parse_bool(value).is_none()
}

/// The user info (`user:password`) of a URL-looking text, found in the text
/// itself so that it works on a URL that does not parse (whose secrets must
/// not be echoed in the parse error either).
pub fn userinfo(text: &str) -> Option<&str> {
    let start = text.find("://")? + 3;
    let rest = &text[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..end].rfind('@').map(|at| &rest[..at])
}

/// A URL-looking text with its user info replaced by `replacement`
/// (`""` removes it with its `@`); other text unchanged.
pub fn replace_userinfo(text: &str, replacement: &str) -> String {
    match (text.find("://"), userinfo(text)) {
        (Some(i), Some(info)) => {
            let head = &text[..i + 3];
            let tail = &text[i + 3 + info.len() + 1..];
            if replacement.is_empty() {
                format!("{head}{tail}")
            } else {
                format!("{head}{replacement}@{tail}")
            }
        }
        _ => text.to_string(),
    }
}

fn redact_text_url(text: &str) -> String {
    replace_userinfo(text, REDACTED)
}

fn decode(text: &str, part: &str) -> Result<String, CasError> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| CasError::misconfigured(format!("the store URL's {part} is not valid UTF-8")))
}

/// The options of a [`StoreUrl`], already checked against the names a
/// backend knows. One parser for every boolean and every duration.
#[derive(Clone, Default)]
pub struct UrlOptions {
    values: Vec<(String, String)>,
}

impl fmt::Debug for UrlOptions {
    /// Names and values, secrets redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.values.iter().map(|(n, v)| {
                let shown = if is_secret_option(n, v) {
                    REDACTED
                } else {
                    v.as_str()
                };
                (n, shown)
            }))
            .finish()
    }
}

impl UrlOptions {
    /// The raw value of option `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean option: `true`/`false`/`1`/`0`/`yes`/`no`, absent = `default`.
    pub fn get_bool(&self, name: &str, default: bool) -> Result<bool, CasError> {
        match self.get(name) {
            None => Ok(default),
            Some(text) => parse_bool(text).ok_or_else(|| {
                CasError::misconfigured(format!(
                    "option '{name}' must be true or false (or 1/0, yes/no), not {text:?}"
                ))
            }),
        }
    }

    /// A duration option in (possibly fractional) seconds, e.g. `timeout=2.5`.
    pub fn get_seconds(&self, name: &str) -> Result<Option<Duration>, CasError> {
        match self.get(name) {
            None => Ok(None),
            Some(text) => parse_duration(text)
                .ok()
                .filter(|d| !d.is_zero())
                .map(Some)
                .ok_or_else(|| {
                    CasError::misconfigured(format!(
                        "option '{name}' must be a positive duration (seconds, or with a unit: \
                         500ms, 1.5s, 2m), not {text:?}"
                    ))
                }),
        }
    }
}

/// The one reading of a duration, on command lines and in options alike: a
/// number (fractions allowed) with a unit `ms`, `s`, `m` or `h`, or a bare
/// number of seconds: `500ms`, `1.5s`, `2m`, `15`. Zero is a duration; a
/// caller that needs a positive one says so.
///
/// ```
/// use std::time::Duration;
/// use casaas_core::provider::parse_duration;
/// assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
/// assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
/// assert!(parse_duration("5 parsecs").unwrap_err().contains("use ms, s, m or h"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ms" => 0.001,
        "" | "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}; use ms, s, m or h (e.g. 500ms, 15s, 2m)"
            ));
        }
    };
    number
        .parse::<f64>()
        .ok()
        .map(|n| n * scale)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{text:?} is not a duration (e.g. 500ms, 15s, 2m)"))
}

/// The one reading of a boolean option: `true`/`1`/`yes` or
/// `false`/`0`/`no`, case-insensitive.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Some(true),
        "false" | "0" | "no" => Some(false),
        _ => None,
    }
}

/// Removes the boolean option `name` from an adapter's option pairs (its
/// URL's query and the options given beside it) and reads it with
/// [`parse_bool`]; `store` names the store in errors. Given twice, or not a
/// boolean, is an error.
pub fn take_bool_option(
    options: &mut Vec<(String, String)>,
    name: &str,
    store: &str,
) -> Result<Option<bool>, CasError> {
    let mut found = None;
    let mut i = 0;
    while i < options.len() {
        if !options[i].0.eq_ignore_ascii_case(name) {
            i += 1;
            continue;
        }
        let (_, value) = options.remove(i);
        if found.is_some() {
            return Err(CasError::misconfigured(format!(
                "{store}: option {name} is given twice"
            )));
        }
        found = Some(parse_bool(&value).ok_or_else(|| {
            CasError::misconfigured(format!(
                "{store}: option {name}={value} is not a boolean: use {name}=true or {name}=false"
            ))
        })?);
    }
    Ok(found)
}

/// The known name closest to a misspelt one, if it is close: at most a
/// third of its letters wrong (`pathstyle` → `path_style`), compared
/// without case.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&name, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= name.len().max(k.len()) / 3)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes (option names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_option_gets_the_closest_known_name() {
        let url = StoreUrl::parse("s3://b/p?pathstyle=true").unwrap();
        let err = url
            .options(&["endpoint", "path_style", "region"])
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "unknown option 'pathstyle' in s3 URL (did you mean 'path_style'?); known options:"
            ),
            "{err}"
        );
        let url = StoreUrl::parse("s3://b/p?Regoin=x").unwrap();
        let err = url.options(&["endpoint", "region"]).unwrap_err();
        assert!(err.to_string().contains("did you mean 'region'"), "{err}");
        // Nothing close: no guess.
        let url = StoreUrl::parse("s3://b/p?bogus=1").unwrap();
        let err = url.options(&["endpoint", "path_style"]).unwrap_err();
        assert!(!err.to_string().contains("did you mean"), "{err}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }

    #[test]
    fn decoded_exactly_once() {
        let url = StoreUrl::parse("s3://b/x%2541/my%20locks/").unwrap();
        assert_eq!(url.authority(), "b");
        assert_eq!(url.path(), "x%41/my locks");
        let url = StoreUrl::parse("az://acct/c%2Fd/x%2541").unwrap();
        assert_eq!(
            url.first_segment().unwrap(),
            ("c/d".to_string(), "x%41".to_string())
        );
        let url = StoreUrl::parse("file:///var/lib/app/x%2541").unwrap();
        assert_eq!(url.file_path().unwrap(), PathBuf::from("/var/lib/app/x%41"));
    }

    #[test]
    fn options() {
        let url = StoreUrl::parse("s3://b/p?path_style=YES&timeout=1.5&quirk=0").unwrap();
        let opts = url.options(&["path_style", "timeout", "quirk"]).unwrap();
        assert!(opts.get_bool("path_style", false).unwrap());
        assert!(!opts.get_bool("quirk", true).unwrap());
        assert!(opts.get_bool("absent", true).unwrap());
        assert_eq!(
            opts.get_seconds("timeout").unwrap(),
            Some(Duration::from_millis(1500))
        );
        let err = url.options(&["timeout"]).unwrap_err();
        assert!(
            err.to_string().contains("unknown option 'path_style'"),
            "{err}"
        );
        let url = StoreUrl::parse("s3://b/p?path_style=maybe").unwrap();
        let opts = url.options(&["path_style"]).unwrap();
        assert!(opts.get_bool("path_style", false).is_err());
        assert!(StoreUrl::parse("s3://b/p?a=1&a=2").is_err());
    }

    #[test]
    fn with_options_replaces_and_adds() {
        let url = StoreUrl::parse("s3://b/x%2541?etag_unquoted=false&region=r").unwrap();
        let url = url
            .with_options(&["etag_unquoted=true", "conditional_delete"])
            .unwrap();
        let opts = url
            .options(&["etag_unquoted", "region", "conditional_delete"])
            .unwrap();
        assert!(opts.get_bool("etag_unquoted", false).unwrap());
        assert!(opts.get_bool("conditional_delete", false).unwrap());
        assert_eq!(opts.get("region"), Some("r"));
        assert_eq!(url.path(), "x%41");
    }

    #[test]
    fn printing_redacts() {
        let url = StoreUrl::parse("s3://key:secret@bucket/p?token=t0k&region=x").unwrap();
        let shown = format!("{url} {url:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("t0k"),
            "{shown}"
        );
        assert_eq!(
            url.to_string(),
            "s3://[redacted]@bucket/p?token=[redacted]&region=x"
        );
        let url = StoreUrl::parse("s3://ak:sk@b/p?sig=s1g&endpoint=http://u2:pw2@h:1").unwrap();
        assert_eq!(
            url.secrets(),
            ["ak:sk", "sk", "ak", "u2:pw2", "pw2", "u2", "s1g"]
        );
        assert_eq!(userinfo("s3://u:p@w@b/k?x=@"), Some("u:p@w"));
        assert_eq!(replace_userinfo("s3://u:p@b/k", ""), "s3://b/k");
        assert_eq!(replace_userinfo("s3://b/k?e=a@b", ""), "s3://b/k?e=a@b");
        let err = StoreUrl::parse("s3://u:pw@[bad/p").unwrap_err();
        assert!(!err.to_string().contains("pw"), "{err}");
    }
}
