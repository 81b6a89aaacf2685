//! The env file of a test server, the one place its format is written and
//! read: `cargo xtask servers up NAME` writes `NAME/env` in the servers
//! directory (`.casaas/servers/` of the workspace, or `$CASAAS_SERVERS_DIR`),
//! one `KEY=VALUE` per line, the store URL under [`URL_VAR`] first, then the
//! credentials and endpoints the server's clients need. Tests find it with
//! [`test_server`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variable that holds the casaas store URL of the server.
pub const URL_VAR: &str = "CASAAS_TEST_URL";

/// The variable that names the servers directory, when it is not
/// `.casaas/servers/` in the current directory or a parent.
pub const SERVERS_DIR_VAR: &str = "CASAAS_SERVERS_DIR";

/// Where server `name`'s env file lives in `servers_dir`.
pub fn env_file(servers_dir: &Path, name: &str) -> PathBuf {
    servers_dir.join(name).join("env")
}

/// The text of an env file: `url` under [`URL_VAR`], then `vars` in order.
pub fn render(url: &str, vars: &[(String, String)]) -> String {
    let mut text = format!("{URL_VAR}={url}\n");
    for (key, value) in vars {
        text.push_str(&format!("{key}={value}\n"));
    }
    text
}

/// Every variable of an env file's text (the URL included); lines without
/// `=` are ignored.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The credential variables a store URL's provider reads, as
/// [`open_store_with`](crate::open_store_with) takes them (lowercase).
const CREDENTIAL_VARIABLES: [&str; 6] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
];

/// The credentials among `env` (an env file's variables) as options to
/// give beside a store URL.
pub fn credential_options(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    CREDENTIAL_VARIABLES
        .iter()
        .filter_map(|name| {
            env.get(*name)
                .map(|value| (name.to_ascii_lowercase(), value.clone()))
        })
        .collect()
}

/// A real server started by `cargo xtask servers up NAME`, as tests see it.
#[derive(Clone)]
pub struct TestServer {
    /// The casaas store URL ([`URL_VAR`] in the server's env file).
    pub url: String,
    /// Every variable of the env file (credentials, endpoints).
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credential values.
        f.debug_struct("TestServer")
            .field("url", &self.url)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TestServer {
    /// The server described by the env file at `path`.
    pub fn read(path: &Path) -> std::io::Result<TestServer> {
        let env = parse(&std::fs::read_to_string(path)?);
        Ok(TestServer {
            url: env.get(URL_VAR).cloned().unwrap_or_default(),
            env,
        })
    }

    /// The credentials of the env file as options to give beside the URL
    /// ([`open_store_with`](crate::open_store_with)): each credential
    /// variable under its lowercase name.
    pub fn store_options(&self) -> Vec<(String, String)> {
        credential_options(&self.env)
    }

    /// The value of `name` from the env file; panics naming the variable
    /// (never its value) if absent.
    pub fn var(&self, name: &str) -> &str {
        self.env
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("the test server's env file has no {name}"))
    }
}

/// Finds the env file of server `name`, written by `cargo xtask servers up`,
/// in `$CASAAS_SERVERS_DIR/NAME/env` or `.casaas/servers/NAME/env` in the
/// current directory or a parent. Panics with what to run if it is missing:
/// a provider test must never pass by skipping its server.
pub fn test_server(name: &str) -> TestServer {
    let candidates: Vec<PathBuf> = match std::env::var_os(SERVERS_DIR_VAR) {
        Some(dir) => vec![env_file(Path::new(&dir), name)],
        None => std::env::current_dir()
            .map(|dir| {
                dir.ancestors()
                    .map(|a| env_file(&a.join(".casaas").join("servers"), name))
                    .collect()
            })
            .unwrap_or_default(),
    };
    match candidates.iter().find_map(|p| TestServer::read(p).ok()) {
        Some(server) => server,
        None => panic!(
            "server '{name}' is not running: start it with `cargo xtask servers up {name}` \
             (or run everything with `cargo xtask ci`)"
        ),
    }
}

/// A prefix no other test run uses: `casaas-test/<label>-<pid>-<random>`.
pub fn unique_prefix(label: &str) -> String {
    use rand::Rng;
    format!(
        "casaas-test/{label}-{}-{:08x}",
        std::process::id(),
        rand::rng().random::<u32>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse_gives_every_variable_back() {
        let vars = vec![
            ("AWS_ACCESS_KEY_ID".to_string(), "key".to_string()),
            (
                "ENDPOINT".to_string(),
                "http://127.0.0.1:1/?a=b".to_string(),
            ),
        ];
        let env = parse(&render("s3://bucket/prefix", &vars));
        assert_eq!(env[URL_VAR], "s3://bucket/prefix");
        assert_eq!(env["AWS_ACCESS_KEY_ID"], "key");
        assert_eq!(env["ENDPOINT"], "http://127.0.0.1:1/?a=b");
        assert_eq!(env.len(), 3);
    }
}
