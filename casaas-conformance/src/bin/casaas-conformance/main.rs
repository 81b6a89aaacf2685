//! `casaas-conformance [URL]`: tells whether an object store is safe to
//! build leases on. The command line lives in the library
//! ([`casaas_conformance::cli`]), which `casaas conformance` shares.

fn main() -> std::process::ExitCode {
    casaas_conformance::cli::run_cli(std::env::args_os())
}
