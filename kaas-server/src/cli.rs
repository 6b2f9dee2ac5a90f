//! The command line: `kaas serve` and its flags, and the tools' commands. Hand-written so far:
//! three commands with a handful of flags each do not need a parser dependency.

use kaas_core::BrokerConfig;
use kaas_core::config::listeners::{Bind, ListenerAddress, Listeners};

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
    --listen HOST:PORT     address to accept Kafka clients on, PLAINTEXT [default: 127.0.0.1:9092];
                           several listeners (SSL too): --set listeners=NAME://HOST:PORT,...
    --advertised HOST:PORT address clients are told to connect to [default: the listen address]
    --broker-id N          this broker's id (node.id) [default: 0]
    --metrics HOST:PORT    serve Prometheus metrics at http://HOST:PORT/metrics [default: none]
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
    /// `--listen`: the one PLAINTEXT listener (None: the `listeners` setting, or its default).
    pub listen: Option<String>,
    pub advertised: Option<String>,
    pub broker_id: Option<i32>,
    pub config_file: Option<String>,
    pub settings: Vec<(String, String)>,
    /// `--metrics`: where the Prometheus endpoint listens (None: no endpoint).
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
            "--listen" => out.listen = Some(value()?),
            "--advertised" => out.advertised = Some(value()?),
            "--broker-id" => {
                out.broker_id = Some(value()?.parse().map_err(|_| "--broker-id needs a number".to_string())?)
            }
            "--config" => out.config_file = Some(value()?),
            "--metrics" => out.metrics = Some(value()?),
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
        let (config, listeners) = broker_config(&a, Some("auto.create.topics.enable=false")).unwrap();
        assert_eq!(config.num_partitions, 3);
        assert!(!config.auto_create_topics_enable);
        assert_eq!((config.advertised_host.as_str(), config.advertised_port), ("127.0.0.1", 1));
        assert_eq!(bind_address(&listeners.bind[0]), "0.0.0.0:1");
        assert!(parse(&args(&["serve", "--bogus"])).is_err());
        assert!(matches!(parse(&args(&[])), Ok(Command::Help)));
    }

    #[test]
    fn listeners_come_from_settings_or_flags_not_both() {
        let serve = |list: &[&str]| match parse(&args(list)) {
            Ok(Command::Serve(a)) => broker_config(&a, None),
            _ => panic!("parse failed"),
        };
        let set = "listeners=PLAINTEXT://:0,SSL://127.0.0.1:0";
        let (mut config, listeners) = serve(&["serve", "--set", set]).unwrap();
        assert_eq!(listeners.bind.len(), 2);
        advertise(&mut config, &listeners, &[("PLAINTEXT".into(), 4001), ("SSL".into(), 4002)]);
        let get = |c: &BrokerConfig, name: &str| kaas_core::config::settings::find(name).map(|s| (s.get)(c));
        assert_eq!(get(&config, "advertised.listeners").unwrap(), "PLAINTEXT://127.0.0.1:4001,SSL://127.0.0.1:4002");
        assert_eq!((config.advertised_host.as_str(), config.advertised_port), ("127.0.0.1", 4001));
        assert!(serve(&["serve", "--listen", "127.0.0.1:1", "--set", set]).unwrap_err().contains("not both"));
        let advertised = ["serve", "--set", set, "--advertised", "kaas-0:9092"];
        let (config, _) = serve(&advertised).unwrap();
        assert_eq!(config.advertised_listeners.len(), 1, "only PLAINTEXT is advertised");
        let advertised_ssl_only = ["serve", "--set", "listeners=SSL://:9093", "--advertised", "kaas-0:9092"];
        assert!(serve(&advertised_ssl_only).unwrap_err().contains("not one of the listeners"));
    }
}
