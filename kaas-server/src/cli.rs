//! The command line: `kaas serve` and its flags, and the tools' commands. Hand-written so far:
//! three commands with a handful of flags each do not need a parser dependency.

use kaas_core::BrokerConfig;

pub const USAGE: &str = "\
kaas: a Kafka-compatible broker whose brokers share one volume

USAGE:
    kaas serve [OPTIONS]
    kaas transactions --bootstrap HOST:PORT list | abort (--transactional-id ID | --topic T --partition P
                      --producer-id N --producer-epoch E)
    kaas share-copy --bootstrap HOST:PORT --group G --input TOPIC --output TOPIC --transactional-id ID
                    [--max-records N] [--abort-every K] [--idle-exit-ms MS]
        exactly-once queue copy (KIP-1289): records taken from share group G on TOPIC are
        written to the output and acknowledged in one transaction per poll; every K-th
        transaction is aborted on purpose; exits after MS without records [default: 10000]

OPTIONS:
    --data-dir DIR         where partitions, topics and offsets live [default: ./kaas-data]
    --listen HOST:PORT     address to accept Kafka clients on [default: 127.0.0.1:9092]
    --advertised HOST:PORT address clients are told to connect to [default: the listen address]
    --broker-id N          this broker's id (node.id) [default: 0]
    --config FILE          a Kafka-style properties file of settings (name=value lines)
    --set NAME=VALUE       one setting by its Kafka name, e.g. --set num.partitions=6
                           (repeatable; applied after --config)
    -h, --help             print this help
    -V, --version          print the version

Settings use Apache Kafka's names (num.partitions, log.retention.ms, ...); every one kaas
accepts, its default and its meaning is in docs/configuration.md, and Kafka settings that
mean nothing on a shared volume (log.flush.interval.messages, ...) are accepted and ignored.
Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) for more.
";

#[derive(Debug, Clone, PartialEq)]
pub struct ServeArgs {
    pub data_dir: String,
    pub listen: String,
    pub advertised: Option<String>,
    pub broker_id: Option<i32>,
    pub config_file: Option<String>,
    pub settings: Vec<(String, String)>,
}

impl Default for ServeArgs {
    fn default() -> Self {
        ServeArgs {
            data_dir: "./kaas-data".into(),
            listen: "127.0.0.1:9092".into(),
            advertised: None,
            broker_id: None,
            config_file: None,
            settings: Vec::new(),
        }
    }
}

pub enum Command {
    Serve(ServeArgs),
    Transactions(crate::transactions::Args),
    ShareCopy(crate::share_copy::Args),
    Help,
    Version,
}

pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        None | Some("-h") | Some("--help") | Some("help") => return Ok(Command::Help),
        Some("-V") | Some("--version") | Some("version") => return Ok(Command::Version),
        Some("serve") => {}
        Some("transactions") => return crate::transactions::parse(&args[1..]).map(Command::Transactions),
        Some("share-copy") => return crate::share_copy::parse(&args[1..]).map(Command::ShareCopy),
        Some(other) => return Err(format!("unknown command {other:?}")),
    }
    let mut out = ServeArgs::default();
    while let Some(flag) = it.next() {
        let (flag, inline) = match flag.split_once('=') {
            Some((f, v)) if f.starts_with("--") && f != "--set" => (f.to_string(), Some(v.to_string())),
            _ => (flag.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(Command::Help);
        }
        let mut value = || inline.clone().or_else(|| it.next().cloned()).ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--data-dir" => out.data_dir = value()?,
            "--listen" => out.listen = value()?,
            "--advertised" => out.advertised = Some(value()?),
            "--broker-id" => {
                out.broker_id = Some(value()?.parse().map_err(|_| "--broker-id needs a number".to_string())?)
            }
            "--config" => out.config_file = Some(value()?),
            "--set" => {
                let setting = value()?;
                let (name, v) =
                    setting.split_once('=').ok_or_else(|| format!("--set {setting}: expected NAME=VALUE"))?;
                out.settings.push((name.trim().to_string(), v.trim().to_string()));
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Command::Serve(out))
}

/// Splits "host:port" (or "[v6]:port").
pub fn host_port(addr: &str) -> Result<(String, i32), String> {
    let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("{addr}: expected HOST:PORT"))?;
    let port = port.parse().map_err(|_| format!("{addr}: bad port"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}

/// The broker configuration: defaults, then the file, then each --set, then the flags.
pub fn broker_config(args: &ServeArgs, file_text: Option<&str>, bound: &str) -> Result<BrokerConfig, String> {
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
    let (bound_host, bound_port) = host_port(bound)?;
    let (host, port) = match &args.advertised {
        Some(a) => host_port(a)?,
        None if bound_host == "0.0.0.0" || bound_host == "::" => ("127.0.0.1".to_string(), bound_port),
        None => (bound_host, bound_port),
    };
    config.advertised_host = host;
    config.advertised_port = port;
    config.listeners = bound.to_string();
    config.log_dir = std::fs::canonicalize(&args.data_dir)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| args.data_dir.clone());
    config.validate()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_parse_with_spaces_or_equals() {
        let Ok(Command::Serve(a)) =
            parse(&args(&["serve", "--data-dir=/d", "--listen", "0.0.0.0:1", "--set", "num.partitions=3"]))
        else {
            panic!("parse failed")
        };
        assert_eq!(a.data_dir, "/d");
        assert_eq!(a.settings, vec![("num.partitions".into(), "3".into())]);
        let config = broker_config(&a, Some("auto.create.topics.enable=false"), "0.0.0.0:1").unwrap();
        assert_eq!(config.num_partitions, 3);
        assert!(!config.auto_create_topics_enable);
        assert_eq!((config.advertised_host.as_str(), config.advertised_port), ("127.0.0.1", 1));
        assert!(parse(&args(&["serve", "--bogus"])).is_err());
        assert!(matches!(parse(&args(&[])), Ok(Command::Help)));
    }
}
