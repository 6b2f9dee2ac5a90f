//! `kaas share-copy`: an exactly-once queue copier over KIP-1289's transactional share
//! acknowledgements (kaas_client::share_copy): records taken from a share group on the input
//! topic are written to the output topic and acknowledged inside one transaction per poll.
//! Several copiers with the same group share the work; each needs its own transactional id.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kaas_client::share_consumer::{ShareConsumer, Unobserved};
use kaas_client::share_copy::{CopyConfig, CopyHooks, ShareCopier, TxnEnd, TxnReport};
use kaas_client::{Client, Quiet, Tcp};

#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// A broker to start from
    #[arg(long, visible_alias = "bootstrap-server", default_value = "127.0.0.1:9092", value_name = "HOST:PORT")]
    pub bootstrap: String,
    /// The share group the copiers take records as
    #[arg(long)]
    pub group: String,
    /// The topic to copy from
    #[arg(long)]
    pub input: String,
    /// The topic to copy to
    #[arg(long)]
    pub output: String,
    /// This copier's transactional id (each copier its own)
    #[arg(long)]
    pub transactional_id: String,
    /// Stop after this many records
    #[arg(long)]
    pub max_records: Option<u64>,
    /// Abort every K-th transaction on purpose (0: never)
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64))]
    pub abort_every: Option<u64>,
    /// Exit after this long without records
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub idle_exit_ms: u64,
}

/// Prints progress at most once a second, and every transaction that did not commit.
struct Progress {
    started: Instant,
    last_print: Instant,
    copied: u64,
    committed: u64,
    aborted: u64,
}

impl Progress {
    fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64();
        format!(
            "copied {} records in {} transactions ({} aborted), {:.1} s, {:.0} records/s",
            self.copied,
            self.committed,
            self.aborted,
            secs,
            self.copied as f64 / secs.max(0.001)
        )
    }
}

impl CopyHooks for Progress {
    fn ended(&mut self, txn: &TxnReport, end: TxnEnd) {
        match end {
            TxnEnd::Committed => {
                self.copied += txn.inputs.len() as u64;
                self.committed += 1;
            }
            TxnEnd::Aborted => {
                self.aborted += 1;
                let why = match txn.staged {
                    true => "on purpose",
                    false => txn.failure.as_deref().unwrap_or("a write or staging failed"),
                };
                println!("transaction {} aborted ({why}): its {} records come back", txn.number, txn.inputs.len());
            }
            TxnEnd::Fenced | TxnEnd::Unknown => {}
        }
        if self.last_print.elapsed() >= Duration::from_secs(1) {
            self.last_print = Instant::now();
            println!("{}", self.line());
        }
    }
}

pub async fn run(args: Args) -> Result<(), String> {
    let bootstrap: Vec<String> = args.bootstrap.split(',').map(|s| s.trim().to_string()).collect();
    let client = Client::new("kaas-share-copy", &bootstrap, Arc::new(Tcp), Arc::new(Quiet));
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let member_id = format!("share-copy-{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff);
    let consumer = ShareConsumer::new(client, &args.group, &args.input, &member_id);
    let config = CopyConfig {
        group: args.group.clone(),
        input: args.input.clone(),
        output: args.output.clone(),
        transactional_id: args.transactional_id.clone(),
        member_id,
        max_records: args.max_records,
        abort_every: args.abort_every.filter(|k| *k > 0),
        idle_exit_ms: args.idle_exit_ms,
        transaction_timeout_ms: 60_000,
        poll_records: 500,
        produce_tries: kaas_client::share_copy::PRODUCE_TRIES,
    };
    let mut copier = ShareCopier::new(consumer, config);
    let now = Instant::now();
    let mut progress = Progress { started: now, last_print: now, copied: 0, committed: 0, aborted: 0 };
    println!(
        "kaas share-copy: group {} from {} to {} as transactional id {}",
        args.group, args.input, args.output, args.transactional_id
    );
    // A broker gone in the middle of a transaction is no reason to stop: the copier starts over
    // with a new InitProducerId. Only a successor with the same transactional id ends it.
    let report = loop {
        match copier.run(&mut progress, &mut Unobserved).await {
            Ok(report) => break report,
            Err(e @ kaas_client::share_copy::CopyError::Fenced) => return Err(e.to_string()),
            Err(e) => {
                println!("{e}: starting over");
                copier.start_over();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    println!("{}", progress.line());
    println!(
        "done: {} records copied, {} transactions committed, {} aborted",
        report.copied, report.committed, report.aborted
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    fn parse(list: &[&str]) -> Result<Args, clap::Error> {
        Wrapper::try_parse_from(std::iter::once("share-copy").chain(list.iter().copied())).map(|w| w.args)
    }

    #[test]
    fn flags_parse_and_the_required_ones_are_required() {
        let a = parse(&[
            "--bootstrap",
            "h:1",
            "--group",
            "g",
            "--input=in",
            "--output",
            "out",
            "--transactional-id",
            "t",
            "--abort-every",
            "3",
        ])
        .unwrap();
        assert_eq!(
            (a.bootstrap.as_str(), a.abort_every, a.idle_exit_ms, a.max_records),
            ("h:1", Some(3), 10_000, None)
        );
        assert!(parse(&["--group", "g", "--input", "in", "--output", "out"]).is_err(), "a transactional id");
        assert!(parse(&["--bogus", "1"]).is_err());
    }
}
