//! Requests per held lease-hour and per acquisition, priced with published
//! request prices.

use std::time::Duration;

use casaas_core::lease::LeaseConfig;
use casaas_core::testkit::RequestCounts;

use crate::section::Section;

/// A published request price.
struct Price {
    service: &'static str,
    /// USD per 1,000 writes (PUT class / Class A / write operations / WRU).
    write_per_1000: f64,
    /// USD per 1,000 reads (GET class / Class B / read operations / RRU).
    read_per_1000: f64,
    source: &'static str,
    read_on: &'static str,
}

const PRICES: [Price; 4] = [
    Price {
        service: "S3 Standard (us-east-1)",
        write_per_1000: 0.005,
        read_per_1000: 0.0004,
        source: "https://aws.amazon.com/s3/pricing/",
        read_on: "2026-11-23",
    },
    Price {
        service: "S3 Express One Zone (us-east-1)",
        write_per_1000: 0.00113,
        read_per_1000: 0.00003,
        source: "https://aws.amazon.com/s3/faqs/ (pricing example), https://aws.amazon.com/s3/pricing/",
        read_on: "2026-11-23",
    },
    Price {
        service: "GCS Standard, regional (Class A / Class B)",
        write_per_1000: 0.005,
        read_per_1000: 0.0004,
        source: "https://cloud.google.com/storage/pricing",
        read_on: "as published; not re-read in this run",
    },
    Price {
        service: "Azure Blob, Hot, LRS (write / read operations)",
        write_per_1000: 0.0065,
        read_per_1000: 0.0005,
        source: "https://azure.microsoft.com/en-us/pricing/details/storage/blobs/",
        read_on: "as published; not re-read in this run",
    },
];

/// DynamoDB on-demand, us-east-1: USD per million write / read request units.
const DYNAMODB_WRU_PER_MILLION: f64 = 0.625;
const DYNAMODB_RRU_PER_MILLION: f64 = 0.125;
const DYNAMODB_SOURCE: &str = "https://aws.amazon.com/dynamodb/pricing/on-demand/";
/// The DynamoDB lock client's defaults (amazon-dynamodb-lock-client):
/// heartbeat every 5 s, lease 20 s; acquire = consistent GetItem +
/// conditional PutItem; release = conditional DeleteItem.
const DYNAMODB_HEARTBEAT: Duration = Duration::from_secs(5);
const DYNAMODB_CLIENT_SOURCE: &str = "https://github.com/awslabs/amazon-dynamodb-lock-client";

/// Hours in a month (365·24/12).
pub(crate) const HOURS_PER_MONTH: f64 = 730.0;

/// The service [`s3_standard_per_month`] prices with, as the tables name it.
pub(crate) fn s3_standard_name() -> &'static str {
    PRICES[0].service
}

/// USD per month (730 h) of the requests `per_hour` counts in one hour, at
/// S3 Standard prices: PUT (create and replace) and LIST are billed at the
/// write price, GET at the read price, DELETE is free.
pub(crate) fn s3_standard_per_month(per_hour: &RequestCounts) -> f64 {
    let price = &PRICES[0];
    let writes = (per_hour.create + per_hour.replace + per_hour.list) as f64;
    let reads = per_hour.get as f64;
    (writes * price.write_per_1000 + reads * price.read_per_1000) / 1000.0 * HOURS_PER_MONTH
}

struct Pattern {
    label: String,
    writes_per_hour: f64,
    reads_per_hour: f64,
    acquisition_writes: f64,
    acquisition_reads: f64,
}

fn casaas_pattern(label: &str, config: &LeaseConfig) -> Pattern {
    Pattern {
        label: label.to_string(),
        writes_per_hour: 3600.0 / config.renew_interval.as_secs_f64(),
        reads_per_hour: 0.0,
        // GET + conditional PUT to acquire, conditional PUT to release.
        acquisition_writes: 2.0,
        acquisition_reads: 1.0,
    }
}

/// USD per month (730 h) of the writes and reads `p` makes per held hour,
/// at `price`.
fn per_month(p: &Pattern, price: &Price) -> f64 {
    (p.writes_per_hour * price.write_per_1000 + p.reads_per_hour * price.read_per_1000) / 1000.0
        * HOURS_PER_MONTH
}

/// USD per million acquisitions of `p` at `price`.
fn per_million(p: &Pattern, price: &Price) -> f64 {
    (p.acquisition_writes * price.write_per_1000 + p.acquisition_reads * price.read_per_1000)
        * 1000.0
}

/// The DynamoDB lock client's heartbeats per held hour at its defaults.
fn dynamo_per_hour() -> f64 {
    3600.0 / DYNAMODB_HEARTBEAT.as_secs_f64()
}

/// Locks under the one session the cost table prices.
const SESSION_LOCKS: usize = 10_000;

/// The casaas patterns priced: the default configuration, a TTL of 30 s,
/// and a lock among [`SESSION_LOCKS`] under one session at the default TTL
/// (the heartbeat's writes shared by every lock under it).
fn casaas_patterns() -> [Pattern; 3] {
    let default = LeaseConfig::default();
    let ttl30 = LeaseConfig::from_ttl(Duration::from_secs(30));
    let mut session = casaas_pattern(
        &format!("casaas, per lock under a session of {SESSION_LOCKS} locks (default TTL)"),
        &default,
    );
    session.writes_per_hour /= SESSION_LOCKS as f64;
    [
        casaas_pattern(
            &format!(
                "casaas, default (TTL {} s, renew every {} s)",
                default.ttl.as_secs(),
                default.renew_interval.as_secs()
            ),
            &default,
        ),
        casaas_pattern(
            &format!(
                "casaas, TTL 30 s (renew every {} s)",
                ttl30.renew_interval.as_secs()
            ),
            &ttl30,
        ),
        session,
    ]
}

/// The cost table; `measured_per_acquisition` is the request count the
/// round-trip measurement observed for casaas (it should be 3).
pub fn section(measured_per_acquisition: Option<f64>) -> Section {
    let patterns = casaas_patterns();
    let mut md = String::from("## Cost\n\n");
    requests_table(&mut md, &patterns, measured_per_acquisition);
    let dynamo_month = prices_table(&mut md, &patterns);
    let s3_month =
        patterns[0].writes_per_hour * PRICES[0].write_per_1000 / 1000.0 * HOURS_PER_MONTH;
    let s3_month_30 =
        patterns[1].writes_per_hour * PRICES[0].write_per_1000 / 1000.0 * HOURS_PER_MONTH;
    md.push_str(&format!(
        "Held all month, a casaas lease costs ${s3_month:.2} in S3 Standard PUTs at the default TTL \
         (${s3_month_30:.2} at TTL 30 s), against ${dynamo_month:.2} for the DynamoDB lock client's \
         heartbeats at its defaults: object-store writes are priced about {:.0}× a DynamoDB write \
         unit, so leases held for long should use a long TTL (or S3 Express One Zone). Acquisitions \
         are cheap everywhere. etcd and Redis have no per-request price: their cost is the machines \
         (three for an etcd cluster that survives one failure) and the people running them.\n\n",
        PRICES[0].write_per_1000 / 1000.0 / (DYNAMODB_WRU_PER_MILLION / 1e6)
    ));
    let session_month =
        patterns[2].writes_per_hour * PRICES[0].write_per_1000 / 1000.0 * HOURS_PER_MONTH;
    md.push_str(&format!(
        "Under one `Session` the heartbeat's writes are shared by every lock held under it: a lock \
         among {SESSION_LOCKS} held all month costs ${session_month:.6} in S3 Standard PUTs at the \
         default TTL, {:.0}× less than the DynamoDB lock client's lease (which heartbeats each lock \
         on its own).\n\n",
        dynamo_month / session_month
    ));
    Section {
        markdown: md,
        svgs: Vec::new(),
        headlines: Vec::new(),
    }
}

/// The requests each pattern makes per held hour and per acquisition,
/// after what the round-trip measurement observed.
fn requests_table(md: &mut String, patterns: &[Pattern], measured_per_acquisition: Option<f64>) {
    md.push_str(
        "Requests a held lease and an acquisition cost, from the protocol (docs/protocol.md, \
         *Request cost*; `tests/lease_cost.rs` pins them), priced with the published request \
         prices below. Storage of a lock object (a few hundred bytes) and transfer are \
         negligible and left out. A waiting contender adds 1 read per `poll_period` (10 per TTL, at most one per 100 ms).\n\n",
    );
    if let Some(measured) = measured_per_acquisition {
        md.push_str(&format!(
            "The round-trip measurement above observed {measured:.2} requests per acquire + release.\n\n"
        ));
    }
    md.push_str("| pattern | writes per held lease-hour | requests per acquisition (acquire + release) |\n|---|---|---|\n");
    for p in patterns {
        md.push_str(&format!(
            "| {} | {} | {:.0} read + {:.0} writes |\n",
            p.label,
            if p.writes_per_hour >= 10.0 {
                format!("{:.0}", p.writes_per_hour)
            } else {
                format!("{:.3}", p.writes_per_hour)
            },
            p.acquisition_reads,
            p.acquisition_writes
        ));
    }
    md.push_str(&format!(
        "| DynamoDB lock client, defaults (heartbeat every {} s, lease 20 s) | {:.0} | 1 consistent read + 2 writes |\n\n",
        DYNAMODB_HEARTBEAT.as_secs(),
        dynamo_per_hour()
    ));
}

/// Each pattern priced per lease-month and per million acquisitions at
/// every service's prices, then DynamoDB's; the DynamoDB lock client's
/// lease-month.
fn prices_table(md: &mut String, patterns: &[Pattern]) -> f64 {
    md.push_str("USD per lease held for a month (730 h) and per million acquisitions:\n\n| service | price per 1,000 writes / reads | ");
    for p in patterns {
        md.push_str(&format!(
            "{}: per lease-month | per 10⁶ acquisitions | ",
            p.label
        ));
    }
    md.push_str("source | read on |\n|---|---|");
    for _ in patterns {
        md.push_str("---|---|");
    }
    md.push_str("---|---|\n");
    for price in &PRICES {
        md.push_str(&format!(
            "| {} | ${} / ${} | ",
            price.service, price.write_per_1000, price.read_per_1000
        ));
        for p in patterns {
            let (month, million) = (per_month(p, price), per_million(p, price));
            if month >= 0.01 {
                md.push_str(&format!("${month:.2} | ${million:.2} | "));
            } else {
                md.push_str(&format!("${month:.6} | ${million:.2} | "));
            }
        }
        md.push_str(&format!("{} | {} |\n", price.source, price.read_on));
    }
    let dynamo_month = dynamo_per_hour() * DYNAMODB_WRU_PER_MILLION / 1e6 * HOURS_PER_MONTH;
    let dynamo_million = 2.0 * DYNAMODB_WRU_PER_MILLION + DYNAMODB_RRU_PER_MILLION;
    md.push_str(&format!(
        "| DynamoDB on-demand (us-east-1), lock client pattern | ${DYNAMODB_WRU_PER_MILLION} / ${DYNAMODB_RRU_PER_MILLION} per 10⁶ request units | ${dynamo_month:.2} per lease-month at its own defaults | ${dynamo_million:.2} | | | {DYNAMODB_SOURCE}; {DYNAMODB_CLIENT_SOURCE} | as published; not re-read in this run |\n\n"
    ));
    dynamo_month
}
