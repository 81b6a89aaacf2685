//! The 0.13 adapter (`casaas_object_store::v0_13`, cargo feature
//! `object_store_0_13`) on object_store 0.13's embedded stores: the same
//! checks as `embedded.rs` (the contract suite on `InMemory`, what
//! `LocalFileSystem` can and cannot do), from `shared/embedded.rs`.
#![cfg(feature = "object_store_0_13")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use casaas_core::{CasStore, ErrorKind};
use casaas_object_store::v0_13::ObjectStoreCas;
use object_store_0_13 as os;

/// The object_store line these tests run on.
const LINE: &str = "0.13";

include!("shared/embedded.rs");
