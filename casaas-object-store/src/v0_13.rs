//! The adapter for object_store 0.13 (cargo feature `object_store_0_13`):
//! [`ObjectStoreCas`] here takes the `Arc<dyn ObjectStore>` of an application
//! still on the 0.13 line (DataFusion, delta-rs), which is a different type
//! from the crate root's 0.14 one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use casaas_core::lease::FencedLog;
//! use casaas_object_store::v0_13::ObjectStoreCas;
//!
//! // The 0.13 client the application already has (its `object_store`; this
//! // crate names 0.13 `object_store_0_13`).
//! let client: Arc<dyn object_store_0_13::ObjectStore> =
//!     Arc::new(object_store_0_13::memory::InMemory::new());
//! let store = Arc::new(ObjectStoreCas::new(client, "tables/t1")?);
//! let log = FencedLog::<String>::new(store, "_commits")?;
//! assert_eq!(log.append(1, "add part-0001.parquet".into()).await?.seq, 1);
//! # Ok(())
//! # }
//! ```
//!
//! It is the crate root's adapter source compiled a second time, so it
//! behaves like [`crate::ObjectStoreCas`]: same capabilities, error
//! mapping, confirming read and version encoding ([`ObjectVersion`]). Only
//! the adapter has a 0.13 copy: the `object_store+` URLs of
//! [`crate::register`] always build 0.14 clients.

// The shared adapter files name the library as `super::os`.
use object_store_0_13 as os;

// Loading the crate root's files a second time is the point: one source,
// compiled against each line.
#[allow(clippy::duplicate_mod)]
#[path = "error.rs"]
mod error;
#[allow(clippy::duplicate_mod)]
#[path = "store.rs"]
mod store;
#[allow(clippy::duplicate_mod)]
#[path = "version.rs"]
mod version;

pub use store::ObjectStoreCas;
pub use version::ObjectVersion;

/// The object_store release line this module is built against.
pub const OBJECT_STORE_VERSION: &str = "0.13";

/// The first lines of the adapter's doc examples, naming this line's types.
macro_rules! doc_imports {
    () => {
        "use casaas_object_store::v0_13::ObjectStoreCas;\nuse object_store_0_13 as os;"
    };
}
use doc_imports;
