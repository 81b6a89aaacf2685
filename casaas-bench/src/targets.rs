//! What the run measures: the stores (by URL and env file) and the peers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use casaas_core::CasStore;

use crate::clients;

/// One casaas store.
#[derive(Debug, Clone)]
pub struct StoreTarget {
    /// Short name: file, memory, ceph, moto, azurite.
    pub name: String,
    /// Store URL.
    pub url: String,
    /// Credentials and settings from the server's env file.
    pub env: BTreeMap<String, String>,
    /// The env file (handed to child processes), if any.
    pub env_file: Option<PathBuf>,
}

impl StoreTarget {
    /// Opens a new client of the store.
    pub async fn open(&self) -> Result<Arc<dyn CasStore>> {
        clients::open(&self.url, &self.env).await
    }
}

/// Everything the run measures.
#[derive(Debug, Clone)]
pub struct Targets {
    /// casaas stores, the file backend first.
    pub stores: Vec<StoreTarget>,
    /// etcd's client endpoint.
    pub etcd: Option<String>,
    /// Redis URL.
    pub redis: Option<String>,
}

impl Targets {
    /// The store named `name`.
    pub fn store(&self, name: &str) -> Option<&StoreTarget> {
        self.stores.iter().find(|s| s.name == name)
    }

    /// The first S3 server available for the measurements that take one
    /// (Ceph RGW, else moto).
    pub fn s3(&self) -> Option<&StoreTarget> {
        self.store("ceph").or_else(|| self.store("moto"))
    }
}
