//! Open a store with credentials given from code, beside the URL (never in
//! it): the options take the lowercase names of the provider's environment
//! variables. A credential not given is read from the environment.
//!
//! ```text
//! cargo run -p casaas --example open_with_credentials [STORE_URL]
//! ```
//!
//! With an `s3://` URL the example passes the access key from its own
//! configuration (here: two variables read by the application, standing in
//! for a secret manager); the embedded stores take no credentials.
#![allow(clippy::print_stdout)]

use casaas::open_store_with;

/// The credentials this application keeps for a store URL.
fn credentials_for(url: &str) -> Vec<(&'static str, String)> {
    if url.starts_with("s3://") {
        let key_id = std::env::var("APP_S3_KEY_ID").unwrap_or_default();
        let secret = std::env::var("APP_S3_SECRET").unwrap_or_default();
        vec![
            ("aws_access_key_id", key_id),
            ("aws_secret_access_key", secret),
        ]
    } else {
        Vec::new()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory://credentials-example/app".to_string());
    let store = open_store_with(&url, credentials_for(&url)).await?;
    println!("opened {}", store.describe());

    // A misspelt option name is an error, never silently ignored.
    let err = open_store_with(&url, [("aws_secret_acess_key", "x")])
        .await
        .err()
        .ok_or("a misspelt option was accepted")?;
    println!("refused: {err}");
    Ok(())
}
