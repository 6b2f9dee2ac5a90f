//! The command line (clap): `kaas serve` and its flags, `kaas admin` (admin/), `kaas share-copy`.

use clap::{Parser, Subcommand};
use kaas_core::BrokerConfig;
use kaas_core::config::listeners::{Bind, ListenerAddress, Listeners};

const SETTINGS_HELP: &str = "\
Settings use Apache Kafka's names (num.partitions, log.retention.ms, ...); every one kaas
accepts, its default and its meaning is in docs/configuration.md, and Kafka settings that
mean nothing on a shared volume (log.flush.interval.messages, ...) are accepted and ignored.
Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more, KAAS_LOG_FORMAT=json for JSON.";

#[derive(Debug, Parser)]
#[command(name = "kaas", version, about = "kaas: a Kafka-compatible broker whose brokers share one volume")]
#[command(arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a broker
    #[command(after_help = SETTINGS_HELP)]
    Serve(ServeArgs),
    /// Look at and operate a running cluster: brokers and owners, topics, groups with lag,
    /// transactions, producers, ACLs, SCRAM users
    Admin(crate::admin::Args),
    /// Exactly-once queue copy (KIP-1289): records taken from share group G on the input are
    /// written to the output and acknowledged in one transaction per poll
    ShareCopy(crate::share_copy::Args),
}

#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct ServeArgs {
    /// Where partitions, topics and offsets live (the shared volume in a cluster)
    #[arg(long, default_value = "./kaas-data", value_name = "DIR")]
    pub data_dir: String,
    /// Address to accept Kafka clients on, PLAINTEXT [default: 127.0.0.1:9092]; several
    /// listeners (SSL, SASL too): --set listeners=NAME://HOST:PORT,...
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Address clients are told to connect to [default: the listen address]
    #[arg(long, value_name = "HOST:PORT")]
    pub advertised: Option<String>,
    /// This broker's id (node.id) [default: 0]
    #[arg(long, value_name = "N")]
    pub broker_id: Option<i32>,
    /// A Kafka-style properties file of settings (name=value lines)
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<String>,
    /// One setting by its Kafka name, e.g. --set num.partitions=6 (repeatable; applied after --config)
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = setting)]
    pub settings: Vec<(String, String)>,
    /// Serve Prometheus metrics at http://HOST:PORT/metrics (docs/metrics.md)
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<String>,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            data_dir: "./kaas-data".into(),
            listen: None,
            advertised: None,
            broker_id: None,
            config_file: None,
            settings: Vec::new(),
            metrics: None,
        }
    }
}

fn setting(text: &str) -> Result<(String, String), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("{text}: expected NAME=VALUE"))?;
    Ok((name.trim().to_string(), value.trim().to_string()))
}

/// Splits "host:port" (or "[v6]:port").
pub fn host_port(addr: &str) -> Result<(String, i32), String> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{addr}: expected HOST:PORT"))?;
    let port = port.parse().map_err(|_| format!("{addr}: bad port"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}

/// The broker configuration, defaults then the file then each --set then the flags, and its
/// listeners, checked (`advertise` completes it once they are bound).
pub fn broker_config(args: &ServeArgs, file_text: Option<&str>) -> Result<(BrokerConfig, Listeners), String> {
    let mut config = BrokerConfig::default();
    if let Some(text) = file_text {
        config.apply_properties(text)?;
    }
    for (name, value) in &args.settings {
        config.set(name, value)?;
    }
    if let Some(id) = args.broker_id {
        config.broker_id = id;
    }
    let defaults = BrokerConfig::default().listener_settings;
    let settings = &mut config.listener_settings;
    if let Some(listen) = &args.listen {
        if settings.listeners != defaults.listeners {
            return Err("give --listen or the listeners setting, not both".into());
        }
        host_port(listen)?;
        settings.listeners = format!("PLAINTEXT://{listen}");
    }
    if let Some(advertised) = &args.advertised {
        if settings.advertised_listeners.is_some() {
            return Err("give --advertised or the advertised.listeners setting, not both".into());
        }
        host_port(advertised)?;
        settings.advertised_listeners = Some(format!("PLAINTEXT://{advertised}"));
    }
    let listeners = settings.resolve()?;
    config.log_dir = std::fs::canonicalize(&args.data_dir)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| args.data_dir.clone());
    let unbound: Vec<(String, i32)> =
        listeners.bind.iter().map(|b| (b.endpoint.listener.clone(), b.endpoint.port)).collect();
    advertise(&mut config, &listeners, &unbound);
    config.validate()?;
    Ok((config, listeners))
}

/// The address to bind a listener at: its host, every interface if it names none.
pub fn bind_address(bind: &Bind) -> String {
    let host = match bind.endpoint.host.as_str() {
        "" => "0.0.0.0",
        host => host,
    };
    match host.contains(':') {
        true => format!("[{host}]:{}", bind.endpoint.port),
        false => format!("{host}:{}", bind.endpoint.port),
    }
}

/// Tells the configuration where its listeners are, once bound at `bound` (listener name and
/// the port it got): an advertised port 0 is the port the listener got.
pub fn advertise(config: &mut BrokerConfig, listeners: &Listeners, bound: &[(String, i32)]) {
    let advertised = listeners
        .advertised
        .iter()
        .map(|a| {
            let port = match a.port {
                0 => bound.iter().find(|(name, _)| *name == a.listener).map_or(0, |(_, port)| *port),
                port => port,
            };
            ListenerAddress { port, ..a.clone() }
        })
        .collect();
    config.advertise(advertised, &listeners.inter_broker);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(list: &[&str]) -> Result<ServeArgs, String> {
        let args = std::iter::once("kaas").chain(list.iter().copied());
        match Cli::try_parse_from(args).map_err(|e| e.to_string())?.command {
            Command::Serve(a) => Ok(a),
            other => Err(format!("not serve: {other:?}")),
        }
    }

    #[test]
    fn flags_parse_with_spaces_or_equals() {
        let a = serve(&["serve", "--data-dir=/d", "--listen", "0.0.0.0:1", "--set", "num.partitions=3"]).unwrap();
        assert_eq!(a.data_dir, "/d");
        assert_eq!(a.settings, vec![("num.partitions".into(), "3".into())]);
        let (config, listeners) = broker_config(&a, Some("auto.create.topics.enable=false")).unwrap();
        assert_eq!(config.num_partitions, 3);
        assert!(!config.auto_create_topics_enable);
        assert_eq!((config.advertised_host.as_str(), config.advertised_port), ("127.0.0.1", 1));
        assert_eq!(bind_address(&listeners.bind[0]), "0.0.0.0:1");
        assert!(serve(&["serve", "--bogus"]).is_err());
        assert!(serve(&["serve", "--set", "no-equals"]).unwrap_err().contains("NAME=VALUE"));
        assert_eq!(serve(&["serve"]).unwrap(), ServeArgs::default());
        assert!(Cli::try_parse_from(["kaas"]).is_err(), "no command: the help");
    }

    #[test]
    fn admin_commands_parse() {
        let parse = |list: &[&str]| Cli::try_parse_from(std::iter::once("kaas").chain(list.iter().copied()));
        assert!(parse(&["admin", "--bootstrap-server", "h:1", "transactions", "list"]).is_ok());
        assert!(parse(&["admin", "transactions", "abort", "--transactional-id", "t"]).is_ok());
        let partition = [
            "admin",
            "transactions",
            "abort",
            "--topic",
            "x",
            "--partition",
            "2",
            "--producer-id",
            "7",
            "--producer-epoch",
            "3",
        ];
        assert!(parse(&partition).is_ok());
        assert!(
            parse(&["admin", "transactions", "abort", "--topic", "x"]).is_err(),
            "a partition abort names all four"
        );
        assert!(parse(&["admin", "transactions", "abort", "--transactional-id", "t", "--topic", "x"]).is_err());
        assert!(
            parse(&[
                "admin",
                "acls",
                "add",
                "--principal",
                "User:a",
                "--operation",
                "read",
                "--topic",
                "t",
                "--group",
                "g"
            ])
            .is_err(),
            "one resource"
        );
        assert!(parse(&["admin", "cluster", "--data-dir", "/v", "--output", "json"]).is_ok());
        assert!(parse(&["admin", "groups", "describe"]).is_err(), "describe names a group");
    }

    #[test]
    fn listeners_come_from_settings_or_flags_not_both() {
        let set = "listeners=PLAINTEXT://:0,SSL://127.0.0.1:0";
        let (mut config, listeners) = broker_config(&serve(&["serve", "--set", set]).unwrap(), None).unwrap();
        assert_eq!(listeners.bind.len(), 2);
        advertise(&mut config, &listeners, &[("PLAINTEXT".into(), 4001), ("SSL".into(), 4002)]);
        let get = |c: &BrokerConfig, name: &str| kaas_core::config::settings::find(name).map(|s| (s.get)(c));
        assert_eq!(get(&config, "advertised.listeners").unwrap(), "PLAINTEXT://127.0.0.1:4001,SSL://127.0.0.1:4002");
        assert_eq!((config.advertised_host.as_str(), config.advertised_port), ("127.0.0.1", 4001));
        let both = serve(&["serve", "--listen", "127.0.0.1:1", "--set", set]).unwrap();
        assert!(broker_config(&both, None).unwrap_err().contains("not both"));
        let advertised = serve(&["serve", "--set", set, "--advertised", "kaas-0:9092"]).unwrap();
        let (config, _) = broker_config(&advertised, None).unwrap();
        assert_eq!(config.advertised_listeners.len(), 1, "only PLAINTEXT is advertised");
        let ssl_only = serve(&["serve", "--set", "listeners=SSL://:9093", "--advertised", "kaas-0:9092"]).unwrap();
        assert!(broker_config(&ssl_only, None).unwrap_err().contains("not one of the listeners"));
    }
}
