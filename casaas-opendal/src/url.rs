//! `opendal+URL`: an operator built by OpenDAL's own URI rules.

use std::sync::Arc;

use casaas_core::provider::{LARGE_CONDITIONAL_WRITES_OPTION, StoreFuture, take_bool_option};
use casaas_core::{CasError, CasStore};
use opendal::Operator;
use url::Url;

use crate::OpendalCas;

/// The casaas options in an `opendal+` URL; every other query pair goes to
/// the OpenDAL service's configuration (`endpoint`, `region`, ...).
pub const URL_OPTIONS: [&str; 2] = ["conditional_delete", LARGE_CONDITIONAL_WRITES_OPTION];

/// Opens the store that `opendal+<inner>` names.
///
/// `inner` is any URI OpenDAL's `Operator::from_uri` accepts for the
/// services this crate enables (`s3://bucket/root`, `gcs://bucket/root`,
/// `azblob://container/root`, `fs:///abs/root`, `memory:///`); its path is
/// the operator's root, and the service reads credentials from its usual
/// environment variables. `conditional_delete=false` stops claiming
/// conditional delete on servers that do not honour it;
/// `large_conditional_writes=true` sends conditional writes above the
/// single-part limit (set by a capability profile that proves the store's
/// multipart conditions; see
/// [`allow_large_conditional_writes`](OpendalCas::allow_large_conditional_writes)).
pub async fn open(inner: &str) -> Result<Arc<dyn CasStore>, CasError> {
    open_with(inner, Vec::new()).await
}

/// [`open`], with service configuration `given` beside the URL
/// (credentials such as `secret_access_key`, which never go in a URL),
/// after the URL's own.
pub async fn open_with(
    inner: &str,
    given: Vec<(String, String)>,
) -> Result<Arc<dyn CasStore>, CasError> {
    let mut url = Url::parse(inner).map_err(|e| {
        CasError::misconfigured(format!(
            "opendal+{inner}: not a URL ({e}); expected e.g. opendal+s3://bucket/root"
        ))
    })?;
    let mut options: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    options.extend(given);
    let store = format!("opendal+{inner}");
    let conditional_delete = take_bool_option(&mut options, URL_OPTIONS[0], &store)?;
    let large_conditional_writes = take_bool_option(&mut options, URL_OPTIONS[1], &store)?;
    if options.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(&options);
    }
    // Services for from_uri, and the reqwest transport unless the application
    // installed its own first (first installed wins).
    opendal::install_default();
    let op = Operator::from_uri(url.as_str()).map_err(|e| {
        CasError::misconfigured(format!("opendal+{inner}: OpenDAL cannot open it: {e}"))
    })?;
    let store = OpendalCas::new(op, "")?
        .conditional_delete(conditional_delete.unwrap_or(true))
        .allow_large_conditional_writes(large_conditional_writes.unwrap_or(false));
    Ok(Arc::new(store))
}

pub(crate) fn open_adapter(inner: String, given: Vec<(String, String)>) -> StoreFuture {
    Box::pin(async move { open_with(&inner, given).await })
}
