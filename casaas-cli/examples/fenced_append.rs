//! How a command run by `casaas lock` protects its writes with the fencing
//! token: it appends a line to a list kept in a `FencedResource`, passing
//! `CASAAS_FENCING_TOKEN`. A writer that lost its lock while paused holds a
//! lower token than the new holder, so its late write is refused.
//!
//! ```text
//! casaas lock file:///var/lib/app/locks/job -- \
//!     fenced_append file:///var/lib/app/data journal "run on $(hostname)"
//! ```
//!
//! Exit status: 0 appended, 3 refused (a newer holder has written), 2 error.

use std::process::ExitCode;
use std::sync::Arc;

use casaas::{FencedResource, LeaseError};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store_url, key, line] = args.as_slice() else {
        eprintln!("usage: fenced_append STORE_URL KEY LINE (run under `casaas lock`)");
        return ExitCode::from(2);
    };
    let token = match std::env::var("CASAAS_FENCING_TOKEN").map(|t| t.parse::<u64>()) {
        Ok(Ok(token)) => token,
        _ => {
            eprintln!(
                "fenced_append: CASAAS_FENCING_TOKEN is missing or not a number: run under `casaas lock`"
            );
            return ExitCode::from(2);
        }
    };
    let store = match casaas::open_store(store_url).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("fenced_append: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match FencedResource::<Vec<String>>::new(Arc::clone(&store), key.as_str()) {
        Ok(list) => {
            list.update(token, |current| {
                let mut lines = current.cloned().unwrap_or_default();
                lines.push(line.clone());
                lines
            })
            .await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(written) => {
            println!(
                "appended with token {token} ({} lines)",
                written.value.len()
            );
            ExitCode::SUCCESS
        }
        Err(LeaseError::FencedOut {
            presented,
            recorded,
        }) => {
            eprintln!("fenced_append: refused: token {presented} is older than {recorded}");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("fenced_append: {e}");
            ExitCode::from(2)
        }
    }
}
