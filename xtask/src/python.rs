//! `cargo xtask python`: the Python package (`casaas-py`) built once as a
//! wheel into `dist/`, installed with `pip install dist/casaas-*.whl` into
//! a fresh virtualenv, then its tests (pytest, on the embedded stores and
//! the real servers), its type check (mypy --strict on the package, the
//! examples and the tests) and its examples run against that install: what
//! CI proves is the wheel a user keeps.
//!
//! `cargo xtask wheel` builds that wheel alone (release by default): one
//! abi3 wheel, installable on any CPython >= 3.9 of the platform.
//!
//! In CI the wheel is built with the dev profile in the workspace's target
//! directory instead of in release. It does not share the dependency tree
//! `cargo test --workspace` compiles: that one carries the workspace hack's
//! union, whose tokio `parking_lot` feature is not fork-safe, and the
//! extension is built without it (see `fork_safe_tokio`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use casaas_core::testkit::server_env;

use crate::servers::{self, Ctx};

/// The tools' virtualenv's name under `.casaas/tools/`.
const VENV: &str = "casaas-py";

/// The fresh virtualenv the wheel is installed into, made again each run.
const TEST_VENV: &str = "casaas-py-test";

/// The virtualenv of `cargo xtask wheel` alone: the build backend only.
const BUILD_VENV: &str = "casaas-py-build";

/// The build backend, pinned.
const MATURIN: &str = "maturin==1.16.0";

/// What the tools' virtualenv holds (pinned): the build backend, the test
/// and type-check tools, Lance for the commit-lock test and PyIceberg for
/// the Iceberg catalog's tests. The fresh virtualenv sees them through a
/// `.pth` file, so that only casaas is installed anew each run.
const PACKAGES: &[&str] = &[
    MATURIN,
    "pytest==9.2.0",
    "mypy==2.4.1",
    "pylance==14.0.2",
    "pyarrow==26.0.1",
    "pyiceberg[sql-sqlite]==0.12.0",
];

/// `cargo xtask wheel`: builds the abi3 wheel into `dist/` (release unless
/// `dev`) and returns its path.
pub fn wheel(root: &Path, dev: bool) -> Result<PathBuf> {
    let ctx = Ctx::new(root.to_path_buf());
    let bin = servers::python_venv(&ctx, BUILD_VENV, &[MATURIN])?;
    let (wheel, seconds) = build_wheel(root, &bin, dev)?;
    eprintln!(
        "xtask: {} built in {seconds:.1} s; install it with: pip install {}",
        wheel.display(),
        wheel.display()
    );
    Ok(wheel)
}

/// Builds the wheel into `dist/` with the maturin of the virtualenv `bin`
/// (any earlier casaas wheel there removed first, so that `dist/*.whl` is
/// this one): its path and the seconds the build took.
fn build_wheel(root: &Path, bin: &Path, dev: bool) -> Result<(PathBuf, f64)> {
    let venv = bin
        .parent()
        .context("the virtualenv's bin directory has no parent")?
        .to_path_buf();
    let dist = root.join("dist");
    std::fs::create_dir_all(&dist)?;
    for old in casaas_wheels(&dist)? {
        std::fs::remove_file(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    fork_safe_tokio(root)?;
    let build = Instant::now();
    step(
        venv_command(&venv, bin, "maturin")
            .args(["build", "--profile", if dev { "dev" } else { "release" }])
            .arg("--manifest-path")
            .arg(root.join("casaas-py").join("Cargo.toml"))
            .arg("--out")
            .arg(&dist)
            .current_dir(root),
        "maturin build (the casaas wheel into dist/)",
    )?;
    let seconds = build.elapsed().as_secs_f64();
    let mut built = casaas_wheels(&dist)?;
    match (built.pop(), built.is_empty()) {
        (Some(wheel), true) => Ok((wheel, seconds)),
        (None, _) => bail!("maturin built no wheel into {}", dist.display()),
        (Some(_), false) => bail!("more than one casaas wheel in {}", dist.display()),
    }
}

/// Refuses to build the extension on a tokio with its `parking_lot`
/// feature. parking_lot keeps one process-wide table of parked threads; a
/// fork copies it with the entries of the parent's idle runtime threads,
/// whose thread-local records the child frees and reuses, so a forked
/// child's runtime loses wake-ups and hangs (Python programs fork). The
/// workspace hack turns the feature on, which is why casaas-py and what it
/// depends on in the workspace keep no edge to it (`.config/hakari.toml`).
fn fork_safe_tokio(root: &Path) -> Result<()> {
    let what = "cargo tree (the extension's tokio features)";
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["tree", "-p", "casaas-py", "-e", "features,normal"])
        .args(["-i", "tokio", "--prefix", "none"])
        .current_dir(root)
        .output()
        .with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tree = String::from_utf8_lossy(&output.stdout);
    if tree.lines().any(|line| {
        line.trim_start()
            .starts_with("tokio feature \"parking_lot\"")
    }) {
        bail!(
            "casaas-py would be built on tokio with its `parking_lot` feature, which is not \
             fork-safe (a forked child's runtime hangs): find what turns it on with `cargo tree \
             -p casaas-py -e features -i tokio` and keep it out of casaas-py's dependencies"
        );
    }
    Ok(())
}

/// The casaas wheels in `dir`.
fn casaas_wheels(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("casaas-"))
        })
        .collect())
}

/// A virtualenv made anew at `.casaas/tools/NAME` that sees the packages
/// of the virtualenv `tools` (a `.pth` file naming its site-packages) and
/// has nothing installed of its own; returns its bin directory.
fn fresh_venv(ctx: &Ctx, name: &str, tools: &Path) -> Result<PathBuf> {
    let venv = ctx.tools.join(name);
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("removing the old {}", venv.display()))?;
    }
    servers::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    let bin = venv.join("bin");
    let purelib = |python: &Path| -> Result<PathBuf> {
        let out = Command::new(python)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ])
            .output()
            .with_context(|| format!("running {}", python.display()))?;
        if !out.status.success() {
            bail!("{} could not name its site-packages", python.display());
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let own = purelib(&bin.join("python"))?;
    let shared = purelib(&tools.join("python"))?;
    std::fs::write(
        own.join("casaas-test-tools.pth"),
        format!("{}\n", shared.display()),
    )?;
    Ok(bin)
}

/// Builds the wheel (dev profile) and installs it with pip into the fresh
/// virtualenv [`TEST_VENV`], which sees the test tools of `tools`; returns
/// the virtualenv and its bin directory.
fn install_wheel(ctx: &Ctx, root: &Path, tools: &Path) -> Result<(PathBuf, PathBuf)> {
    let (wheel, build_seconds) = build_wheel(root, tools, true)?;
    eprintln!(
        "xtask: casaas wheel built ({build_seconds:.1} s): {}",
        wheel.display()
    );

    let install = Instant::now();
    let bin = fresh_venv(ctx, TEST_VENV, tools)?;
    let venv = bin
        .parent()
        .context("the virtualenv's bin directory has no parent")?
        .to_path_buf();
    step(
        venv_command(&venv, &bin, "python")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(&wheel),
        "pip install dist/casaas-*.whl (into a fresh virtualenv)",
    )?;
    eprintln!(
        "xtask: casaas wheel installed into {} ({:.1} s)",
        venv.display(),
        install.elapsed().as_secs_f64()
    );
    Ok((venv, bin))
}

/// `cargo xtask iceberg`: casaas-iceberg (outside the workspace: its own
/// arrow/parquet stack) built and tested on its own, its server tests on
/// SeaweedFS and Ceph RGW and its interop tests against the casaas wheel
/// with PyIceberg, every test required to run (none skipped).
pub fn iceberg(root: &Path, keep_servers: bool) -> Result<()> {
    let started = Instant::now();
    let ctx = Ctx::new(root.to_path_buf());
    let tools = servers::python_venv(&ctx, VENV, PACKAGES)?;
    let (_, bin) = install_wheel(&ctx, root, &tools)?;
    let names = ["seaweedfs".to_string(), "ceph".to_string()];
    servers::up(&ctx, &names)?;
    // The environment every task runs cargo in, in the crate's own workspace.
    let mut test = crate::task_command(
        &root.to_path_buf(),
        std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
    );
    test.args(["test", "--locked"])
        .current_dir(root.join("casaas-iceberg"))
        .env("CASAAS_REQUIRE_SERVERS", "1")
        .env("CASAAS_ICEBERG_PYTHON", bin.join("python"));
    let result = step(&mut test, "cargo test (casaas-iceberg)");
    if !keep_servers {
        servers::down(&ctx, &names)?;
    }
    result?;
    eprintln!(
        "xtask: casaas-iceberg passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Builds the wheel once, installs it into a fresh virtualenv, then runs
/// pytest, mypy and the examples against that install. With
/// `require_servers`, a test whose server is not running fails instead of
/// being skipped (CI, where every server is up).
pub fn python(root: &Path, require_servers: bool) -> Result<()> {
    let started = Instant::now();
    let ctx = Ctx::new(root.to_path_buf());
    let tools = servers::python_venv(&ctx, VENV, PACKAGES)?;
    eprintln!(
        "xtask: python virtualenv ready ({:.1} s)",
        started.elapsed().as_secs_f64()
    );

    let (venv, bin) = install_wheel(&ctx, root, &tools)?;

    let package = root.join("casaas-py");
    let tests = Instant::now();
    let mut pytest = venv_command(&venv, &bin, "python");
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env(
            server_env::SERVERS_DIR_VAR,
            root.join(".casaas").join("servers"),
        );
    if require_servers {
        pytest.env("CASAAS_REQUIRE_SERVERS", "1");
    }
    // tests/test_wheel.py: what is under test is the installed wheel.
    pytest.env("CASAAS_TEST_WHEEL", "1");
    step(&mut pytest, "pytest")?;
    eprintln!(
        "xtask: pytest passed ({:.1} s)",
        tests.elapsed().as_secs_f64()
    );

    step(
        venv_command(&venv, &bin, "python")
            .args([
                "-m",
                "mypy",
                "--strict",
                "--no-incremental",
                "python/casaas",
                "examples",
                "tests",
            ])
            .current_dir(&package),
        "mypy --strict",
    )?;

    let mut examples: Vec<PathBuf> = std::fs::read_dir(package.join("examples"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    examples.sort();
    for example in examples {
        step(
            venv_command(&venv, &bin, "python")
                .arg(&example)
                .current_dir(&package),
            &format!("example {}", example.display()),
        )?;
    }
    eprintln!(
        "xtask: python done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The benchmark's virtualenv's name under `.casaas/tools/`.
const BENCH_VENV: &str = "casaas-py-bench";

/// What the benchmark's virtualenv holds besides casaas (pinned): the
/// build backend and the Redis lock casaas is measured against.
const BENCH_PACKAGES: &[&str] = &[
    "maturin==1.16.0",
    "redis==8.1.0",
    "python-redis-lock==4.0.1",
];

/// The Python of a virtualenv with the casaas package built in release (a
/// wheel, installed, so the dev build `cargo xtask python` uses stays in
/// place), redis and python-redis-lock, for `cargo xtask bench`; and how
/// long the extension's release build took, seconds.
pub fn bench_python(ctx: &Ctx, wheels: &Path) -> Result<(PathBuf, f64)> {
    let bin = servers::python_venv(ctx, BENCH_VENV, BENCH_PACKAGES)?;
    let venv = bin
        .parent()
        .context("the virtualenv's bin directory has no parent")?
        .to_path_buf();
    let _ = std::fs::remove_dir_all(wheels);
    let build = Instant::now();
    step(
        venv_command(&venv, &bin, "maturin")
            .args(["build", "--release", "--quiet", "--manifest-path"])
            .arg(ctx.root.join("casaas-py").join("Cargo.toml"))
            .arg("--out")
            .arg(wheels)
            .current_dir(&ctx.root),
        "maturin build --release (the casaas package for the benchmark)",
    )?;
    let build_seconds = build.elapsed().as_secs_f64();
    let wheel = std::fs::read_dir(wheels)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("maturin built no wheel")?;
    step(
        venv_command(&venv, &bin, "pip")
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&wheel),
        "pip install (the casaas wheel)",
    )?;
    eprintln!("xtask: casaas-py release build: {build_seconds:.1} s");
    Ok((bin.join("python"), build_seconds))
}

/// `program` of the virtualenv, run as if the virtualenv were active.
fn venv_command(venv: &Path, bin: &Path, program: &str) -> Command {
    let mut command = Command::new(bin.join(program));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    command
        .env("VIRTUAL_ENV", venv)
        .env(
            "PATH",
            std::env::join_paths(paths).unwrap_or_else(|_| path.clone()),
        )
        // No test may ever reach a cloud metadata endpoint.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("PYTHONHOME");
    command
}

/// Runs `command` with its output shown; fails naming `what`.
fn step(command: &mut Command, what: &str) -> Result<()> {
    eprintln!("xtask: {what}");
    let status = command
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}
