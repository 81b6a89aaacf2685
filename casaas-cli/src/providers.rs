//! The stores this build can open, and what to do about one it cannot.

/// Makes the URLs of every compiled-in provider and adapter openable:
/// `s3://`, `gs://`, `az://`, `object_store+…` and `opendal+…`, as the
/// build's features allow (`memory://` and `file://` are always there).
pub fn register() {
    casaas::register_providers();
}

/// For a person at a shell: which build of casaas opens the schemes this
/// one lacks.
pub fn missing_scheme_hint() -> String {
    let features: &[(&str, &str, bool)] = &[
        ("s3", "s3://", cfg!(feature = "s3")),
        ("gcs", "gs://", cfg!(feature = "gcs")),
        ("azure", "az://", cfg!(feature = "azure")),
        (
            "object-store",
            "object_store+URL",
            cfg!(feature = "object-store"),
        ),
        ("opendal", "opendal+URL", cfg!(feature = "opendal")),
    ];
    let missing: Vec<String> = features
        .iter()
        .filter(|(_, _, built)| !built)
        .map(|(feature, scheme, _)| format!("{scheme} needs the `{feature}` feature"))
        .collect();
    if missing.is_empty() {
        "This build of casaas opens every scheme it knows (file, memory, s3, gs, az, \
         object_store+URL, opendal+URL); check the URL's scheme"
            .to_string()
    } else {
        format!(
            "This build of casaas lacks some: {}; install one that has it, e.g. \
             `cargo install casaas-cli --features {}`",
            missing.join(", "),
            features
                .iter()
                .filter(|(_, _, built)| !built)
                .map(|(f, _, _)| *f)
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}
