//! `opendal+URL`: an operator built by OpenDAL's own URI rules.

use std::sync::Arc;

use casaas_core::provider::StoreFuture;
use casaas_core::{CasError, CasStore};
use opendal::Operator;
use url::Url;

use crate::OpendalCas;

/// The casaas options in an `opendal+` URL; every other query pair goes to
/// the OpenDAL service's configuration (`endpoint`, `region`, ...).
pub const URL_OPTIONS: [&str; 1] = ["conditional_delete"];

/// Opens the store that `opendal+<inner>` names.
///
/// `inner` is any URI OpenDAL's `Operator::from_uri` accepts for the
/// services this crate enables (`s3://bucket/root`, `gcs://bucket/root`,
/// `azblob://container/root`, `fs:///abs/root`, `memory:///`); its path is
/// the operator's root, and the service reads credentials from its usual
/// environment variables. `conditional_delete=false` stops claiming
/// conditional delete on servers that do not honour it.
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
    let mut conditional_delete = true;
    if let Some(at) = options.iter().position(|(k, _)| k == URL_OPTIONS[0]) {
        let (_, value) = options.remove(at);
        conditional_delete = match value.as_str() {
            "true" | "1" | "yes" => true,
            "false" | "0" | "no" => false,
            other => {
                return Err(CasError::misconfigured(format!(
                    "opendal+{inner}: conditional_delete must be true or false, not {other:?}"
                )));
            }
        };
    }
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
    let store = OpendalCas::new(op, "")?.conditional_delete(conditional_delete);
    Ok(Arc::new(store))
}

pub(crate) fn open_adapter(inner: String, given: Vec<(String, String)>) -> StoreFuture {
    Box::pin(async move { open_with(&inner, given).await })
}
