//! casaas as a dependency: `tests/consumer/` is a crate outside the
//! workspace that depends on casaas by path with `features = ["s3"]`, the
//! way an application would. This test checks that
//! its dependency graph holds no command-line crate (nor does that of the
//! library with its default features), then builds it and
//! runs it against moto (`cargo xtask servers up moto`): it opens an
//! `s3://` URL with credentials given as options, with no register call,
//! and takes and releases a lease.
//!
//! The build shares this build's target directory, so only the consumer
//! itself is compiled when the workspace is built already.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use casaas_core::testkit::{test_server, unique_prefix};

fn consumer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/consumer")
}

/// The target directory of the build this test belongs to
/// (`TARGET/debug/deps/consumer-HASH`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// `cargo` on the consumer's manifest, with the workspace's lock file, so
/// that it resolves the versions this build uses.
fn cargo(args: &[&str]) -> Command {
    let dir = consumer_dir();
    let workspace_lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    std::fs::copy(workspace_lock, dir.join("Cargo.lock")).unwrap();
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args)
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir());
    cmd
}

fn run(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_library_alone_has_no_command_line_dependencies() {
    let tree = run(cargo(&[
        "tree", "--quiet", "-e", "normal", "--prefix", "none",
    ]));
    assert!(tree.contains("casaas-s3"), "{tree}");
    for crate_name in [
        "casaas-conformance",
        "clap",
        "clap_complete",
        "indicatif",
        "nix",
        "tracing-subscriber",
        "casaas-gcs",
        "casaas-azure",
    ] {
        assert!(
            !tree
                .lines()
                .any(|l| l.starts_with(&format!("{crate_name} "))),
            "{crate_name} is in the library's graph:\n{tree}"
        );
    }
}

/// `cargo add casaas` (default features) brings the library and core
/// only: no command-line crate, no SDK stack, and none of tokio's
/// process, signal or fs features.
#[test]
fn the_library_with_default_features_is_core_and_nothing_of_the_command() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args([
        "tree", "--quiet", "-p", "casaas", "-e", "normal", "--prefix", "none", "-f", "{p}|{f}",
    ])
    .current_dir(workspace);
    let tree = run(cmd);
    for crate_name in [
        "casaas-cli",
        "casaas-conformance",
        "clap",
        "clap_complete",
        "indicatif",
        "nix",
        "tracing-subscriber",
        "casaas-s3",
        "casaas-gcs",
        "casaas-azure",
        "casaas-object-store",
        "casaas-opendal",
        "workspace-hack",
    ] {
        assert!(
            !tree
                .lines()
                .any(|l| l.starts_with(&format!("{crate_name} "))),
            "{crate_name} is in the default library's graph:\n{tree}"
        );
    }
    let tokio = tree
        .lines()
        .find(|l| l.starts_with("tokio "))
        .expect("tokio in the graph");
    let features = tokio.split_once('|').map_or("", |(_, f)| f);
    // `macros` stays: casaas-core's protocol waits race a cancellation with
    // `tokio::select!`, which needs it.
    for forced in ["process", "signal", "fs"] {
        assert!(
            !features.split(',').any(|f| f == forced),
            "the library forces tokio's `{forced}` feature: {tokio}"
        );
    }
}

#[test]
fn an_outside_crate_opens_s3_with_no_register_call() {
    let server = test_server("moto");
    let mut url = url::Url::parse(&server.url).unwrap();
    url.set_path(&format!("/{}", unique_prefix("consumer")));
    let key_id = server.env.get("AWS_ACCESS_KEY_ID").unwrap();
    let secret = server.env.get("AWS_SECRET_ACCESS_KEY").unwrap();

    let started = Instant::now();
    run(cargo(&["build", "--quiet"]));
    eprintln!("consumer built in {:.1?}", started.elapsed());

    let mut cmd = Command::new(target_dir().join("debug/casaas-consumer"));
    // Nothing from the AWS chain: the credentials are the options the
    // program gives, and instance metadata is never asked.
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
    ] {
        cmd.env_remove(name);
    }
    cmd.env("AWS_EC2_METADATA_DISABLED", "true")
        .env("CONSUMER_ACCESS_KEY_ID", key_id)
        .env("CONSUMER_SECRET_ACCESS_KEY", secret)
        .arg(url.as_str());
    let stdout = run(cmd);
    assert_eq!(stdout, "token 1\nreleased\n");
}
