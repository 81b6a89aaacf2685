//! Azurite (npm): Microsoft's Azure Storage emulator, blob service only.
//!
//! Measured: it honours `If-None-Match: *` and `If-Match` on put, and
//! `If-Match` on delete; N-way races have exactly one winner; a losing
//! create answers 409 `BlobAlreadyExists`, a stale condition 412
//! `ConditionNotMet`; ETags change on every write and are not ordered.

use std::process::Command;
use std::time::Duration;

use anyhow::Result;

use super::{Ctx, Procs, Server, Started, npm_prefix, npm_version, wait_for_http};

/// The pinned release. It declares node >= 22 but runs on node 20 (npm
/// only warns).
const PACKAGE: &str = "azurite@3.37.0";
/// The pinned version, for reports.
pub const VERSION: &str = "3.37.0";
/// The well-known development account every Azure SDK knows.
const ACCOUNT: &str = "devstoreaccount1";
/// Its well-known (public, documented) key.
const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The container the tests use. Azurite starts empty, so the test URL asks
/// the backend to create it on open (`create_container=true`).
const CONTAINER: &str = "casaas-test";

/// Azurite's blob service on loopback, in memory.
pub struct Azurite;

impl Server for Azurite {
    fn name(&self) -> &'static str {
        "azurite"
    }

    fn label(&self) -> &'static str {
        "Azurite"
    }

    fn kind(&self) -> &'static str {
        "Azure Blob emulator (Azurite)"
    }

    fn known_findings(&self) -> &'static [&'static str] {
        &[
            "Put Block List keeps both conditions (`azure_block_list_conditional`): committed \
             with `If-None-Match: *` onto an existing blob it answers `409 BlobAlreadyExists` \
             (the answer Azurite gives a losing Put Blob; Azure answers 412), with a stale \
             `If-Match` `412 ConditionNotMet`, and the blob keeps its body and ETag.",
            "after a full race plan (thousands of writes) Azurite can stop answering for \
             minutes; keep test load on it small.",
        ]
    }

    fn version(&self, ctx: &Ctx) -> Option<String> {
        npm_version(ctx, "azurite", "azurite")
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        npm_prefix(ctx, "azurite", &[PACKAGE]).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = npm_prefix(ctx, "azurite", &[PACKAGE])?;
        let mut command = Command::new(bin.join("azurite-blob"));
        command
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .args([
                "--inMemoryPersistence",
                "--skipApiVersionCheck",
                "--disableTelemetry",
            ])
            // Azurite refuses `--location` together with in-memory
            // persistence; run it in the state directory so that anything
            // it still writes lands there.
            .current_dir(procs.dir());
        procs.spawn("azurite-blob", command)?;
        // Any HTTP answer (Azurite says 400 to a bare GET) means it is up.
        wait_for_http(
            &format!("http://127.0.0.1:{port}/"),
            Duration::from_secs(60),
        )?;
        let endpoint = format!("http://127.0.0.1:{port}/{ACCOUNT}");
        Ok(Started {
            url: format!("az://{ACCOUNT}/{CONTAINER}?endpoint={endpoint}&create_container=true"),
            env: vec![
                ("AZURE_STORAGE_ACCOUNT".into(), ACCOUNT.into()),
                ("AZURE_STORAGE_KEY".into(), ACCOUNT_KEY.into()),
                ("AZURE_STORAGE_ENDPOINT".into(), endpoint.clone()),
                ("AZURE_STORAGE_CONTAINER".into(), CONTAINER.into()),
                (
                    "AZURE_STORAGE_CONNECTION_STRING".into(),
                    format!(
                        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};\
                         AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
                    ),
                ),
            ],
        })
    }
}
