//! A kaas broker as a child process, for tests that drive it with real clients and kill it.
#![allow(dead_code)]

pub mod wire;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Kaas {
    pub data_dir: PathBuf,
    pub port: u16,
    settings: Vec<String>,
    child: Option<Child>,
    /// `--broker-id`, for brokers of a cluster on one data directory.
    broker_id: Option<i32>,
    /// Whether dropping this broker removes the data directory (false for all but one broker
    /// of a cluster, which share it).
    owns_data_dir: bool,
    /// A SASL_PLAINTEXT listener's port beside the PLAINTEXT one (`with_sasl`).
    pub sasl_port: Option<u16>,
    /// The Prometheus endpoint's port (`with_metrics`).
    pub metrics_port: Option<u16>,
    /// More listeners beside PLAINTEXT, by name and port (`with_listeners`).
    pub listeners: Vec<(String, u16)>,
}

/// An empty data directory for the test `name`.
fn fresh_data_dir(name: &str) -> PathBuf {
    let data_dir = std::env::temp_dir().join(format!("kaas-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data_dir);
    data_dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Kaas {
    /// Starts a broker on a fresh data dir and a free port, with extra `--set` settings.
    pub fn start(name: &str, settings: &[&str]) -> Kaas {
        Self::single(name, settings, false)
    }

    /// Starts a broker with listeners `names` (SSL, SASL_PLAINTEXT, ...; each on a free port,
    /// in `listeners`) beside its PLAINTEXT one, and metrics.
    pub fn with_listeners(name: &str, names: &[&str], settings: &[&str]) -> Kaas {
        let mut kaas = Kaas {
            data_dir: fresh_data_dir(name),
            port: free_port(),
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            broker_id: None,
            owns_data_dir: true,
            sasl_port: None,
            metrics_port: Some(free_port()),
            listeners: names.iter().map(|n| (n.to_string(), free_port())).collect(),
        };
        kaas.spawn();
        kaas
    }

    /// The process id of the running broker.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Starts a broker that serves Prometheus metrics (`--metrics`) on `metrics_port`.
    pub fn with_metrics(name: &str, settings: &[&str]) -> Kaas {
        Self::single(name, settings, true)
    }

    fn single(name: &str, settings: &[&str], metrics: bool) -> Kaas {
        let mut kaas = Kaas {
            data_dir: fresh_data_dir(name),
            port: free_port(),
            settings: settings.iter().map(|s| s.to_string()).collect(),
            child: None,
            broker_id: None,
            owns_data_dir: true,
            sasl_port: None,
            metrics_port: metrics.then(free_port),
            listeners: Vec::new(),
        };
        kaas.spawn();
        kaas
    }

    /// Starts a broker with a PLAINTEXT listener (`bootstrap`, the brokers' own) and a
    /// SASL_PLAINTEXT one (`sasl_bootstrap`), with extra `--set` settings.
    pub fn with_sasl(name: &str, settings: &[&str]) -> Kaas {
        Self::cluster_with_sasl(name, 1, settings).pop().expect("one broker")
    }

    /// `count` brokers on one data directory, each with a PLAINTEXT and a SASL_PLAINTEXT listener.
    pub fn cluster_with_sasl(name: &str, count: i32, settings: &[&str]) -> Vec<Kaas> {
        Self::brokers(name, count, settings, true)
    }

    pub fn sasl_bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.sasl_port.expect("a SASL listener"))
    }

    /// Starts `count` brokers (ids 0..count) on one fresh shared data directory: a cluster.
    pub fn cluster(name: &str, count: i32, settings: &[&str]) -> Vec<Kaas> {
        Self::brokers(name, count, settings, false)
    }

    /// `count` brokers on one fresh data directory, each with a SASL_PLAINTEXT listener too if
    /// `sasl`.
    fn brokers(name: &str, count: i32, settings: &[&str], sasl: bool) -> Vec<Kaas> {
        let data_dir = fresh_data_dir(name);
        (0..count)
            .map(|id| {
                let mut kaas = Kaas {
                    data_dir: data_dir.clone(),
                    port: free_port(),
                    settings: settings.iter().map(|s| s.to_string()).collect(),
                    child: None,
                    broker_id: Some(id),
                    owns_data_dir: id == 0,
                    sasl_port: sasl.then(free_port),
                    metrics_port: Some(free_port()),
                    listeners: Vec::new(),
                };
                kaas.spawn();
                kaas
            })
            .collect()
    }

    /// Sends `signal` (STOP, CONT, ...) to the broker process.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("running");
        let status = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().expect("kill");
        assert!(status.success());
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        // A free port can be taken by a parallel test between our probe and the broker's bind:
        // then our broker exits, and we try another port.
        for _ in 0..10 {
            if self.try_spawn() {
                return;
            }
            self.port = free_port();
            self.sasl_port = self.sasl_port.map(|_| free_port());
            self.metrics_port = self.metrics_port.map(|_| free_port());
            self.listeners.iter_mut().for_each(|(_, port)| *port = free_port());
        }
        panic!("kaas did not start on any of 10 ports");
    }

    fn try_spawn(&mut self) -> bool {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kaas"));
        cmd.arg("serve").arg("--data-dir").arg(&self.data_dir);
        let mut listeners = vec![format!("PLAINTEXT://{}", self.bootstrap())];
        listeners.extend(self.sasl_port.map(|sasl| format!("SASL_PLAINTEXT://127.0.0.1:{sasl}")));
        listeners.extend(self.listeners.iter().map(|(name, port)| format!("{name}://127.0.0.1:{port}")));
        match listeners.len() {
            1 => cmd.arg("--listen").arg(self.bootstrap()),
            _ => cmd.arg("--set").arg(format!("listeners={}", listeners.join(","))),
        };
        cmd.stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()));
        for s in &self.settings {
            cmd.arg("--set").arg(s);
        }
        if let Some(port) = self.metrics_port {
            cmd.arg("--metrics").arg(format!("127.0.0.1:{port}"));
        }
        if let Some(id) = self.broker_id {
            cmd.arg("--broker-id").arg(id.to_string());
        }
        let mut child = cmd.spawn().expect("start kaas");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait().expect("poll kaas").is_some() {
                return false;
            }
            // A connect to a free port of the ephemeral range can connect to itself (TCP
            // simultaneous open, source port = destination port): that is no broker.
            if let Ok(probe) = TcpStream::connect(self.bootstrap())
                && probe.local_addr().ok() != probe.peer_addr().ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "kaas did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whoever answered, our broker must still be running: if the port was someone else's,
        // ours has exited by now on its failed bind.
        std::thread::sleep(Duration::from_millis(100));
        if child.try_wait().expect("poll kaas").is_some() {
            return false;
        }
        self.child = Some(child);
        true
    }

    /// SIGKILL: no flush, no shutdown path; only what was synced survives.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("kill kaas");
            child.wait().expect("reap kaas");
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().expect("kill -TERM");
        assert!(status.success());
        child.wait().expect("reap kaas")
    }

    /// True while the broker process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().expect("poll kaas").is_none())
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for Kaas {
    fn drop(&mut self) {
        self.kill9();
        if self.owns_data_dir {
            let _ = std::fs::remove_dir_all(&self.data_dir);
        }
    }
}

/// GET `path` of the metrics endpoint on `port`: the whole HTTP answer.
pub fn get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the metrics endpoint");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // In two writes, as a client may send it: the endpoint reads the whole head first.
    stream.write_all(format!("GET {path} HTTP/1.1\r\n").as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    stream.write_all(b"Host: kaas\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer
}

/// The value of the sample `name` (with its labels, as printed) in a scrape.
pub fn sample(scrape: &str, name: &str) -> Option<f64> {
    scrape.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}
