//! `casaas elect URL --id ID -- CMD`: run a command only while leading.

use std::io::Write;
use std::sync::{Arc, Mutex};

use casaas_core::lease::{Election, Leader, LeaseError, WaitOptions, default_owner_id};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::child::{self, Signals};
use crate::cli::ElectArgs;
use crate::exit::{Failure, LOST};
use crate::logging;
use crate::{holding, target};

/// Runs `casaas elect`.
pub async fn run(args: ElectArgs) -> Result<u8, Failure> {
    let mut signals = Signals::catch()?;
    let target = target::parse_with_root(&args.url, args.lease.root.as_deref())?;
    if args.command.is_empty() && !args.observe {
        return Err(Failure::usage(
            "nothing to do: give a command after `--` (with --id) to campaign, or --observe to watch",
        ));
    }
    if !args.command.is_empty() && args.id.is_none() {
        return Err(Failure::usage(
            "--id is required to campaign: name this candidate, e.g. --id \"$(hostname)\"",
        ));
    }
    let config = holding::lease_config(args.lease.ttl);
    let grace = holding::grace(&args.lease, &config)?;
    let id = args.id.clone().unwrap_or_else(default_owner_id);
    let store = tokio::select! {
        store = target::open(&target) => store?,
        received = signals.recv() => return Ok(child::signal_exit(received)),
    };
    let lease = holding::lease(store, &target, &id, config)?;
    let lease = match args.value.clone() {
        Some(value) => lease
            .with_value(value)
            .map_err(|e| Failure::usage(format!("--value: {e}")))?,
        None => lease,
    };
    let election = Election::new(lease.clone());
    let explain = |e: LeaseError| Failure::lease(&e, format!("{}: {e}", target.display));

    let observer = if args.observe {
        // The first line: who leads now (one read).
        let now = election.leader().await.map_err(explain)?;
        let printer = Printer::default();
        printer.emit(now);
        Some((printer.clone(), spawn_observer(&election, printer)))
    } else {
        None
    };

    if args.command.is_empty() {
        let received = signals.recv().await;
        return Ok(child::signal_exit(received));
    }

    event(&args, "campaigning", &id, None, None);
    let cancel = CancellationToken::new();
    let campaign = election.campaign(WaitOptions::default().with_cancel(cancel.clone()));
    tokio::pin!(campaign);
    let leadership = tokio::select! {
        won = &mut campaign => won.map_err(explain)?,
        received = signals.recv() => {
            cancel.cancel();
            if let Ok(leadership) = campaign.await {
                let _ = leadership.resign().await;
            }
            stop_observer(observer).await;
            return Ok(child::signal_exit(received));
        }
    };
    if let Some((printer, _)) = &observer {
        let me = Leader::new(id.clone(), leadership.token());
        printer.emit(Some(match &args.value {
            Some(value) => me.with_value(value.clone()),
            None => me,
        }));
    }
    event(&args, "elected", &id, Some(leadership.token()), None);

    let guard = leadership.guard();
    let env = holding::child_env(guard, &target);
    let lease_end = holding::lease_end(guard, lease.clock().clone());
    let end = child::supervise(&args.command, &env, lease_end, grace, &mut signals).await;
    let token = leadership.token();
    let code = match end {
        Err(failure) => {
            let _ = leadership.resign().await;
            emit_none(&observer);
            stop_observer(observer).await;
            return Err(failure);
        }
        Ok(end) => match end.lost {
            Some(reason) => {
                event(&args, "stopped_leading", &id, Some(token), Some(&reason));
                drop(leadership);
                logging::report_error(&format!(
                    "lost leadership of {}: {reason}; the command was stopped (its status was {})",
                    target.display, end.code
                ));
                LOST
            }
            None => {
                if let Err(e) = leadership.resign().await {
                    logging::notice(&format!("resigning {}: {e}", target.display));
                }
                emit_none(&observer);
                event(&args, "resigned", &id, Some(token), None);
                end.code
            }
        },
    };
    stop_observer(observer).await;
    Ok(code)
}

fn emit_none(observer: &Option<(Printer, tokio::task::JoinHandle<()>)>) {
    if let Some((printer, _)) = observer {
        printer.emit(None);
    }
}

async fn stop_observer(observer: Option<(Printer, tokio::task::JoinHandle<()>)>) {
    if let Some((_, task)) = observer {
        task.abort();
        let _ = task.await;
    }
}

/// This candidate's own transitions, on stderr.
fn event(args: &ElectArgs, what: &str, id: &str, token: Option<u64>, reason: Option<&str>) {
    if args.json {
        let line = json!({ "event": what, "id": id, "token": token, "reason": reason });
        let _ = writeln!(std::io::stderr(), "{line}");
    } else {
        let token = token.map(|t| format!(" (token {t})")).unwrap_or_default();
        let reason = reason.map(|r| format!(": {r}")).unwrap_or_default();
        tracing::info!("{id}: {what}{token}{reason}");
    }
}

/// Prints leader changes as JSON lines on stdout, each change once.
#[derive(Clone, Default)]
struct Printer {
    last: Arc<Mutex<Option<Option<Leader>>>>,
}

impl Printer {
    fn emit(&self, leader: Option<Leader>) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.as_ref() == Some(&leader) {
            return;
        }
        let line = match &leader {
            Some(l) => match &l.value {
                Some(value) => {
                    json!({ "leader": { "id": l.owner, "token": l.token, "value": value } })
                }
                None => json!({ "leader": { "id": l.owner, "token": l.token } }),
            },
            None => json!({ "leader": null }),
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        *last = Some(leader);
    }
}

/// Prints the changes the election's polling sees (other candidates'
/// terms, expiries); the values of the watch before its first poll are
/// skipped, since they are not observations.
fn spawn_observer(election: &Election, printer: Printer) -> tokio::task::JoinHandle<()> {
    let mut stream = Box::pin(election.observe_stream().skip(1));
    tokio::spawn(async move {
        while let Some(leader) = stream.next().await {
            printer.emit(leader);
        }
    })
}
