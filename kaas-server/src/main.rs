//! The `kaas` binary: parses the command line, wires the real env, serves until SIGTERM/SIGINT,
//! then stops accepting, closes connections and syncs every partition before exiting.

mod admin;
mod cli;
mod metrics;
mod share_copy;
mod tls;

use std::sync::Arc;

use kaas_core::Broker;
use kaas_core::env::real::RealEnv;
use kaas_core::env::{Env, Listener, Net};
use kaas_net::Server;
use kaas_net::server::ListenerSpec;
use kaas_server::{principal, sasl};
use tokio::sync::watch;

/// What `--version` and the start-up log add when the binary was built with the simulator's
/// hooks compiled in (features unified by a `--workspace` build).
const VERSION_WITH_SIM_HOOKS: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (built with the simulator's hooks compiled in: build it with `cargo build --release -p kaas-server`)"
);

fn main() {
    use clap::{CommandFactory, FromArgMatches};
    let version = if kaas_core::SIM_HOOKS { VERSION_WITH_SIM_HOOKS } else { env!("CARGO_PKG_VERSION") };
    let matches = cli::Cli::command().version(version).get_matches();
    let cli = cli::Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let serve = match cli.command {
        cli::Command::Serve(serve) => serve,
        cli::Command::Admin(args) => exit_with("kaas admin", current_thread().block_on(admin::run(args))),
        cli::Command::ShareCopy(args) => exit_with("kaas share-copy", current_thread().block_on(share_copy::run(args))),
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr);
    // KAAS_LOG_FORMAT=json: one JSON object per line, with the request's span (its id and
    // principal) on every line logged while serving it, for a log collector.
    if std::env::var("KAAS_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        logs.json().with_current_span(true).with_span_list(false).init();
    } else {
        // Colours for a terminal only: a log file or collector gets plain text.
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init();
    }
    if kaas_core::SIM_HOOKS {
        tracing::warn!("kaas {VERSION_WITH_SIM_HOOKS}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    if let Err(e) = runtime.block_on(run(serve)) {
        tracing::error!("{e}");
        std::process::exit(1);
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Ends a tool's process: 0 if it did what it was asked, else 1 with why on stderr.
fn exit_with(tool: &str, result: Result<(), String>) -> ! {
    if let Err(e) = result {
        eprintln!("{tool}: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

async fn run(args: cli::ServeArgs) -> Result<(), String> {
    let file_text = match &args.config_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?),
        None => None,
    };
    std::fs::create_dir_all(&args.data_dir).map_err(|e| format!("{}: {e}", args.data_dir))?;
    let env = RealEnv::new(&args.data_dir);
    let (mut config, listeners) = cli::broker_config(&args, file_text.as_deref())?;
    // Every listener bound, and the SSL ones' keys read (each listener's own `ssl.*` over the
    // broker's), before anything starts.
    let mut tls = std::collections::BTreeMap::new();
    for bind in listeners.bind.iter().filter(|b| b.protocol.tls()) {
        let name = bind.endpoint.listener.clone();
        let ssl = config.ssl_for(&name)?;
        let rules = Arc::new(principal::PrincipalRules::parse(&ssl.principal_mapping_rules)?);
        tls.insert(name, (tls::acceptor(&ssl)?, rules));
    }
    // Brokers call each other on the inter-broker listener, secured as its clients are: TLS
    // on an SSL one (verifying each other's certificates), KAAS-BROKER on any (SASL or not).
    let inter_broker = listeners.bind.iter().find(|b| b.endpoint.listener == listeners.inter_broker);
    let peer_handshake = match inter_broker.filter(|b| b.protocol.tls()) {
        Some(bind) => Some(tls::peer_handshake(&config.ssl_for(&bind.endpoint.listener)?)?),
        None => None,
    };
    let mut bound = Vec::new();
    let mut mechanisms = std::collections::BTreeMap::new();
    for bind in &listeners.bind {
        if bind.protocol.sasl() {
            let listener = sasl::Listener::from_config(&config, &bind.endpoint.listener)?;
            mechanisms
                .insert(bind.endpoint.listener.clone(), Arc::new(listener) as Arc<dyn kaas_net::sasl::Mechanisms>);
        }
        let address = cli::bind_address(bind);
        let listener = env.net().bind(&address).await.map_err(|e| format!("cannot listen on {address}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let (_, port) = cli::host_port(&local)?;
        bound.push((bind, listener, local, port));
    }
    let ports: Vec<(String, i32)> = bound.iter().map(|(b, _, _, port)| (b.endpoint.listener.clone(), *port)).collect();
    cli::advertise(&mut config, &listeners, &ports);
    let broker = Broker::start(env, config.clone()).await.map_err(|e| format!("cannot start the broker: {e}"))?;
    if let Some(address) = &args.metrics {
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| format!("--metrics {address}: {e}"))?;
        tracing::info!(listen = %listener.local_addr().map_err(|e| e.to_string())?, "serving Prometheus metrics at /metrics");
        tokio::spawn(metrics::serve(listener, broker.clone()));
    }
    let (stop, stopped) = watch::channel(false);
    let mut servers = Vec::new();
    for (bind, listener, local, _) in bound {
        let name = bind.endpoint.listener.as_str();
        let handshake = tls.get(name).map(|(acceptor, rules)| tls::handshake(acceptor.clone(), rules.clone()));
        // One server also serves the peers' calls: the inter-broker listener's.
        let peers = name == listeners.inter_broker;
        let spec = ListenerSpec {
            name: name.into(),
            handshake,
            sasl: mechanisms.get(name).cloned(),
            peer_handshake: peers.then(|| peer_handshake.clone()).flatten(),
        };
        tracing::info!(listener = %name, protocol = bind.protocol.name(), listen = %local, "listening");
        servers.push(tokio::spawn(Server::listener(broker.clone(), listener, spec, peers).run(stopped.clone())));
    }
    let advertised: Vec<String> = config.advertised_listeners.iter().map(ToString::to_string).collect();
    tracing::info!(
        advertised = %advertised.join(","),
        data_dir = %args.data_dir,
        broker_id = config.broker_id,
        "kaas is serving"
    );
    wait_for_signal().await;
    tracing::info!("shutting down: closing connections and syncing partitions");
    let _ = stop.send(true);
    for server in servers {
        let _ = server.await;
    }
    broker.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        biased;
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
