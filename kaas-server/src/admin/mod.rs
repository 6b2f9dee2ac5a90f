//! `kaas admin`: what operators ask of a running cluster most, over the Kafka protocol (so it
//! works from anywhere a client does, through the listeners' security and ACLs), and from the
//! volume for what only the volume knows (leases and claims).
//!
//! One file per noun: `cluster`, `topics`, `groups` (consumer, classic and share groups, with
//! lag), `transactions`, `producers`, `acls`, `users` (SCRAM credentials); `connection` reaches
//! the brokers, `table` prints.

mod acls;
mod cluster;
mod connection;
mod groups;
mod producers;
mod table;
mod topics;
mod transactions;
mod users;

use std::path::PathBuf;

use clap::{Args as ClapArgs, Subcommand};

use connection::{Admin, Security};
pub use table::Output;
use table::Table;

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// A broker to start from, HOST:PORT
    #[arg(long, visible_alias = "bootstrap", default_value = "127.0.0.1:9092", global = true)]
    bootstrap_server: String,
    /// Client settings, a Kafka properties file: security.protocol, sasl.mechanism,
    /// sasl.jaas.config, ssl.truststore.location
    #[arg(long, global = true, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// How to print: aligned tables, or one JSON object for scripts
    #[arg(long, value_enum, default_value = "table", global = true)]
    output: Output,
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The brokers and who owns each partition at which epoch; with --data-dir, the volume's
    /// leases and every claim (partitions, groups, transaction slots)
    Cluster(cluster::Args),
    /// Topics, their partitions, owners and offsets
    #[command(subcommand)]
    Topics(topics::Command),
    /// Consumer, classic and share groups: members, committed offsets and lag
    #[command(subcommand)]
    Groups(groups::Command),
    /// Transactions: list, describe, and abort a hanging one
    #[command(subcommand)]
    Transactions(transactions::Command),
    /// The producers writing to a topic's partitions (idempotent and transactional)
    Producers(producers::Args),
    /// ACLs: list, add, remove
    #[command(subcommand)]
    Acls(acls::Command),
    /// SCRAM users: list, set a password, delete
    #[command(subcommand)]
    Users(users::Command),
}

pub async fn run(args: Args) -> Result<(), String> {
    let security = match &args.command_config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            Security::from_properties(&text)?
        }
        None => Security::default(),
    };
    // The volume alone needs no broker.
    if let What::Cluster(cluster::Args { data_dir: Some(dir), watch_ms }) = &args.what {
        let tables = cluster::volume(dir, *watch_ms).await?;
        print!("{}", table::render(&tables, args.output));
        return Ok(());
    }
    let mut admin = Admin::connect(&args.bootstrap_server, security).await?;
    let tables: Vec<Table> = match args.what {
        What::Cluster(a) => cluster::run(&mut admin, a).await?,
        What::Topics(c) => topics::run(&mut admin, c).await?,
        What::Groups(c) => groups::run(&mut admin, c).await?,
        What::Transactions(c) => transactions::run(&mut admin, c).await?,
        What::Producers(a) => producers::run(&mut admin, a).await?,
        What::Acls(c) => acls::run(&mut admin, c).await?,
        What::Users(c) => users::run(&mut admin, c).await?,
    };
    print!("{}", table::render(&tables, args.output));
    Ok(())
}

/// `-` for an absent value, as Kafka's tools print it.
fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}
