//! moto's standalone server (PyPI `moto[server]`): the reference S3
//! emulator for conditional writes (`If-None-Match: *`, `If-Match`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{Ctx, Procs, Server, Started, python_venv, wait_for_http};

/// The pinned release.
const PACKAGE: &str = "moto[server]==5.2.1";
/// The pinned version, for reports.
pub const VERSION: &str = "5.2.1";
/// The bucket the tests use.
pub const BUCKET: &str = "casaas-test";

/// moto's server on loopback.
pub struct Moto;

impl Server for Moto {
    fn name(&self) -> &'static str {
        "moto"
    }

    fn install(&self, ctx: &Ctx) -> Result<()> {
        python_venv(ctx, "moto", &[PACKAGE]).map(|_| ())
    }

    fn start(&self, ctx: &Ctx, port: u16, procs: &mut Procs) -> Result<Started> {
        let bin = python_venv(ctx, "moto", &[PACKAGE])?;
        let mut command = Command::new(bin.join("moto_server"));
        command.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
        procs.spawn("moto_server", command)?;
        let endpoint = format!("http://127.0.0.1:{port}");
        wait_for_http(&format!("{endpoint}/"), Duration::from_secs(60))?;
        // moto does not check signatures, so a plain PUT creates the bucket.
        let status = http_request(port, "PUT", &format!("/{BUCKET}"), &[])?;
        if !(200..300).contains(&status) {
            bail!("creating bucket {BUCKET} on moto answered HTTP {status}");
        }
        Ok(s3_started(BUCKET, &endpoint, "test", "test", ""))
    }
}

/// What an S3-compatible server tells its clients: credentials in the
/// standard AWS variables (metadata lookups off) and the store URL, with
/// `extra` URL options appended (e.g. `&etag_unquoted=true`).
pub fn s3_started(bucket: &str, endpoint: &str, key: &str, secret: &str, extra: &str) -> Started {
    Started {
        url: format!("s3://{bucket}/?endpoint={endpoint}&path_style=true&region=us-east-1{extra}"),
        env: vec![
            ("AWS_ACCESS_KEY_ID".into(), key.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), secret.into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
            ("AWS_ENDPOINT_URL".into(), endpoint.into()),
        ],
    }
}

/// A minimal unsigned HTTP/1.0 request to 127.0.0.1:`port` with extra
/// `headers`; returns the status code.
pub fn http_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request = format!(
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no HTTP status from {method} {path}: {text:.200}"))
}
