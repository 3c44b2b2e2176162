//! A real Kubernetes control plane on loopback, for verdict's tests and its
//! demo: `kube-apiserver` (HTTPS, RBAC on), `kube-controller-manager` and
//! `kube-scheduler` of one pinned Kubernetes release, etcd embedded in a
//! small program of ours, and KWOK playing the kubelets of fake nodes.
//! All of it is built from the Go module in this folder (`go.mod`) into
//! `<target>/cluster/bin`, once, and again only when the module changes.
//!
//! [`Cluster::start`] runs one in a folder of its own; dropping it stops
//! every process. [`Cluster::detach`] leaves it running (for
//! `cargo xtask cluster up`) with its process ids in `state.json`, which
//! [`stop_detached`] reads to stop it.

pub mod pki;

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use pki::Pki;

/// The Kubernetes release the control plane is built from (`go.mod`), and
/// the API version verdict's `k8s-openapi` feature names.
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The oldest Go that builds the module.
pub const GO_MINIMUM: (u32, u32) = (1, 26);

/// The programs built from the module, by the package each comes from.
const PROGRAMS: [(&str, &str); 7] = [
    ("etcd", "./cmd/etcd"),
    ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
    (
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    ("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
    ("kubectl", "k8s.io/kubernetes/cmd/kubectl"),
    ("kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    ("helm", "helm.sh/helm/v3/cmd/helm"),
];

/// KWOK and the controllers first, the API server, etcd last.
const STOP_ORDER: [&str; 5] = [
    "kwok",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
];

/// The pod label our KWOK stages (`stages/`) act on.
pub const CHAOS_LABEL: &str = "verdict.dev/chaos";

/// The label by which KWOK knows the nodes it plays. Taking it off a node
/// is a kubelet that stopped: no more heartbeats, no more pod updates.
pub const KWOK_LABEL: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// This folder: the Go module and KWOK's stages.
fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The Go on the `PATH` when it is new enough to build the module: its
/// version line.
pub fn go_available() -> Option<String> {
    let output = Command::new("go").arg("version").output().ok()?;
    if !output.status.success() {
        return None;
    }
    let line = String::from_utf8_lossy(&output.stdout).trim().to_string();
    // "go version go1.26.8 linux/amd64"
    let version = line.split_whitespace().nth(2)?.strip_prefix("go")?;
    let mut parts = version.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .unwrap_or(0)
    });
    let found = (parts.next()?, parts.next().unwrap_or(0));
    (found >= GO_MINIMUM).then_some(line)
}

/// The built programs of the control plane.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    /// Where the programs are built: `<target>/cluster/bin`.
    pub fn folder(target: &Path) -> PathBuf {
        target.join("cluster").join("bin")
    }

    /// `helm template` of a chart for this Kubernetes version, with more
    /// arguments; the rendered documents.
    pub fn helm_template(
        &self,
        chart: &Path,
        release: &str,
        namespace: &str,
        args: &[&str],
    ) -> Result<String> {
        let version = KUBERNETES_VERSION.trim_start_matches('v');
        run_with_input(
            Command::new(self.path("helm"))
                .args(["template", release])
                .arg(chart)
                .args(["--namespace", namespace, "--kube-version", version])
                .args(args),
            None,
        )
    }

    /// The programs in `dir`, all of which must be there.
    pub fn at(dir: &Path) -> Result<Binaries> {
        let binaries = Binaries {
            dir: dir.to_path_buf(),
        };
        for (name, _) in PROGRAMS {
            let path = binaries.path(name);
            if !path.is_file() {
                bail!(
                    "{} is missing: run `cargo xtask cluster build`",
                    path.display()
                );
            }
        }
        Ok(binaries)
    }

    pub fn path(&self, program: &str) -> PathBuf {
        self.dir.join(program)
    }

    /// Build every program into `<target>/cluster/bin` unless the module,
    /// its sources and the Go version are those of the last build.
    pub fn build(target: &Path) -> Result<Binaries> {
        let Some(go) = go_available() else {
            bail!(
                "building the control plane needs Go {}.{} or newer on the PATH",
                GO_MINIMUM.0,
                GO_MINIMUM.1
            );
        };
        let dir = Self::folder(target);
        let stamp_path = dir.join(".stamp");
        let stamp = source_stamp(&go)?;
        if std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp)
            && Binaries::at(&dir).is_ok()
        {
            return Binaries::at(&dir);
        }
        std::fs::create_dir_all(&dir)?;
        eprintln!(
            "testcluster: building Kubernetes {KUBERNETES_VERSION}, etcd, KWOK and helm with {go} into {} (a cold build takes several minutes)",
            dir.display()
        );
        let started = Instant::now();
        let status = Command::new("go")
            .arg("build")
            .arg(ldflags())
            .arg(GCFLAGS)
            .env("CGO_ENABLED", CGO_ENABLED)
            .arg("-o")
            .arg(format!("{}/", dir.display()))
            .args(PROGRAMS.iter().map(|(_, package)| *package))
            .current_dir(module_dir())
            .status()
            .context("could not run go build")?;
        if !status.success() {
            bail!("go build of the control plane failed with {status}");
        }
        std::fs::write(&stamp_path, stamp)?;
        eprintln!(
            "testcluster: built in {:.0}s",
            started.elapsed().as_secs_f64()
        );
        Binaries::at(&dir)
    }
}

/// No debug information compiled in (the link below leaves it out anyway:
/// less to compile and to link).
const GCFLAGS: &str = "-gcflags=all=-dwarf=false";

/// Static programs, as Kubernetes, etcd and helm release theirs: no C
/// compiled for the resolver and the user lookup.
const CGO_ENABLED: &str = "0";

/// Without symbol tables and debug information (a third of the size, and
/// links sooner), and with the release's version where `kubectl version`
/// and the API server's `/version` read it.
fn ldflags() -> String {
    let mut flags = String::from("-ldflags=-s -w");
    let numbers: Vec<&str> = KUBERNETES_VERSION
        .trim_start_matches('v')
        .split('.')
        .collect();
    for package in [
        "k8s.io/component-base/version",
        "k8s.io/client-go/pkg/version",
    ] {
        flags.push_str(&format!(
            " -X {package}.gitVersion={KUBERNETES_VERSION} -X {package}.gitMajor={} -X {package}.gitMinor={} -X {package}.gitTreeState=clean",
            numbers[0], numbers[1]
        ));
    }
    flags
}

/// A digest of what the programs are built from.
fn source_stamp(go: &str) -> Result<String> {
    let root = module_dir();
    let mut files = vec![root.join("go.mod"), root.join("go.sum")];
    collect_files(&root.join("cmd"), &mut files)?;
    files.sort();
    let mut hash = Sha256::new();
    hash.update(go.as_bytes());
    hash.update(ldflags().as_bytes());
    hash.update(GCFLAGS.as_bytes());
    hash.update(CGO_ENABLED.as_bytes());
    for file in files {
        hash.update(
            file.strip_prefix(&root)
                .unwrap_or(&file)
                .to_string_lossy()
                .as_bytes(),
        );
        hash.update(std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?);
    }
    Ok(hex::encode(hash.finalize()))
}

fn collect_files(dir: &Path, into: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, into)?;
        } else {
            into.push(path);
        }
    }
    Ok(())
}

/// What a control plane is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Fake nodes, `n1` … `nN`.
    pub nodes: usize,
    /// How long a node may go without a heartbeat before the node
    /// lifecycle controller marks it `Unknown` (Kubernetes' default is
    /// 50 s; tests want a lost node seen sooner).
    pub node_grace: Duration,
    /// A Unix socket the API server reaches the cluster's network through
    /// (its egress selector's `cluster` connection, HTTP CONNECT), as a
    /// control plane reaches its nodes through konnectivity: the service
    /// proxy then dials endpoints through whatever listens there.
    pub cluster_egress: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            node_grace: Duration::from_secs(20),
            cluster_egress: None,
        }
    }
}

/// The ports one control plane listens on, all on 127.0.0.1.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Ports {
    pub apiserver: u16,
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub kwok: u16,
}

impl Ports {
    fn free() -> Result<Ports> {
        // Held together so that no two are the same; released just before
        // the programs bind them.
        let listeners = (0..4)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<Vec<_>>>()?;
        let port = |i: usize| listeners[i].local_addr().map(|a| a.port());
        Ok(Ports {
            apiserver: port(0)?,
            etcd_client: port(1)?,
            etcd_peer: port(2)?,
            kwok: port(3)?,
        })
    }
}

/// What `state.json` of a detached control plane records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub server: String,
    pub ports: Ports,
    pub nodes: usize,
    /// The node lifecycle controller's grace period, in seconds.
    pub node_grace_s: u64,
    /// Process id of each component.
    pub pids: BTreeMap<String, u32>,
    pub bin: PathBuf,
}

/// A running control plane in a folder of its own.
pub struct Cluster {
    dir: PathBuf,
    bin: Binaries,
    ports: Ports,
    options: Options,
    children: BTreeMap<&'static str, Child>,
    /// The components of an attached control plane, by process id: another
    /// process started them.
    recorded: BTreeMap<String, u32>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("dir", &self.dir)
            .field("server", &self.server())
            .finish()
    }
}

/// How long the API server may take to answer `/readyz` after a start.
const START_PATIENCE: Duration = Duration::from_secs(180);

impl Cluster {
    /// Start etcd, the API server, the controller manager, the scheduler
    /// and KWOK in `dir` (made empty first), create the fake nodes and wait
    /// until they are ready.
    pub fn start(bin: &Binaries, dir: &Path, options: Options) -> Result<Cluster> {
        if dir.exists() {
            for sub in ["etcd", "pki", "logs"] {
                let _ = std::fs::remove_dir_all(dir.join(sub));
            }
        }
        std::fs::create_dir_all(dir.join("logs"))?;
        let ports = Ports::free()?;
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            bin: bin.clone(),
            ports,
            options,
            children: BTreeMap::new(),
            recorded: BTreeMap::new(),
        };
        Pki::create(&dir.join("pki"), dir, &cluster.server())?;
        std::fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        if let Some(socket) = &cluster.options.cluster_egress {
            std::fs::write(
                dir.join("egress.yaml"),
                [
                    "apiVersion: apiserver.k8s.io/v1beta1",
                    "kind: EgressSelectorConfiguration",
                    "egressSelections:",
                    "- name: cluster",
                    "  connection:",
                    "    proxyProtocol: HTTPConnect",
                    "    transport:",
                    "      uds:",
                    &format!("        udsName: {}", socket.display()),
                    "",
                ]
                .join("\n"),
            )?;
        }
        std::fs::write(dir.join("kwok.yaml"), kwok_config()?)?;

        cluster.spawn("etcd")?;
        wait_for_port(ports.etcd_client, Duration::from_secs(60)).context("etcd did not listen")?;
        cluster.start_apiserver()?;
        cluster.spawn("kube-controller-manager")?;
        cluster.spawn("kube-scheduler")?;
        cluster.spawn("kwok")?;
        for i in 1..=cluster.options.nodes {
            cluster.add_node(&format!("n{i}"))?;
        }
        cluster.wait_nodes_ready()?;
        Ok(cluster)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's URL.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// The admin's kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn pki(&self) -> Pki {
        Pki {
            dir: self.dir.join("pki"),
        }
    }

    pub fn binaries(&self) -> &Binaries {
        &self.bin
    }

    /// The API server's audit log: every request of a ServiceAccount, one
    /// JSON event a line.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// `kubectl` of the same release, as the admin.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(self.bin.path("kubectl"));
        command.arg("--kubeconfig").arg(self.kubeconfig());
        command
    }

    /// Run `kubectl ARGS` as the admin, with `input` on its standard input;
    /// its standard output, or an error with what it printed.
    pub fn kubectl_run(&self, args: &[&str], input: Option<&str>) -> Result<String> {
        run_with_input(self.kubectl().args(args), input)
    }

    /// `kubectl apply -f -` of YAML or JSON documents.
    pub fn apply(&self, documents: &str) -> Result<String> {
        self.kubectl_run(&["apply", "-f", "-"], Some(documents))
    }

    /// Start the API server (again) with its flags, and wait until it
    /// answers `/readyz`.
    pub fn start_apiserver(&mut self) -> Result<()> {
        self.spawn("kube-apiserver")?;
        let started = Instant::now();
        loop {
            let ready = self
                .kubectl()
                .args(["get", "--raw", "/readyz", "--request-timeout=5s"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            self.check_alive()?;
            if started.elapsed() > START_PATIENCE {
                bail!(
                    "kube-apiserver not ready within {}s; its log: {}",
                    START_PATIENCE.as_secs(),
                    self.log("kube-apiserver").display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Kill the API server at once (SIGKILL), as a crash would.
    pub fn kill_apiserver(&mut self) -> Result<()> {
        if let Some(mut child) = self.children.remove("kube-apiserver") {
            child.kill()?;
            child.wait()?;
        } else if let Some(pid) = self.recorded.remove("kube-apiserver")
            && alive(pid, &self.bin.dir)
            && let Ok(raw) = i32::try_from(pid)
        {
            signal(raw, libc::SIGKILL);
            // Until it has exited, not only let go of its memory: a large
            // process loses its `/proc/<pid>/exe` (which `alive` reads) while
            // the kernel frees its pages, before it closes its sockets — a
            // new server started then cannot bind the port.
            let started = Instant::now();
            while !exited(pid) && started.elapsed() < Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Create a fake node that KWOK plays.
    pub fn add_node(&self, name: &str) -> Result<()> {
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    KWOK_LABEL.0: KWOK_LABEL.1,
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "nodeInfo": {"kubeletVersion": "fake", "kubeProxyVersion": "fake",
                    "architecture": "amd64", "operatingSystem": "linux"},
            },
        });
        self.apply(&node.to_string())
            .with_context(|| format!("creating node {name}"))?;
        Ok(())
    }

    /// The node's kubelet stops: KWOK no longer heartbeats for it nor
    /// updates its pods, and the node lifecycle controller marks it
    /// `Unknown` after the grace period.
    pub fn stop_kubelet(&self, node: &str) -> Result<()> {
        self.kubectl_run(
            &["label", "node", node, &format!("{}-", KWOK_LABEL.0)],
            None,
        )?;
        Ok(())
    }

    /// The node's kubelet is back.
    pub fn start_kubelet(&self, node: &str) -> Result<()> {
        self.kubectl_run(
            &[
                "label",
                "node",
                node,
                &format!("{}={}", KWOK_LABEL.0, KWOK_LABEL.1),
                "--overwrite",
            ],
            None,
        )?;
        Ok(())
    }

    /// The node lifecycle controller's grace period.
    pub fn node_grace(&self) -> Duration {
        self.options.node_grace
    }

    /// An error naming the first component that has exited, with its log.
    fn check_alive(&mut self) -> Result<()> {
        let logs = self.dir.join("logs");
        for (name, child) in &mut self.children {
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{name} exited with {status}; its log: {}",
                    logs.join(format!("{name}.log")).display()
                );
            }
        }
        Ok(())
    }

    /// Write a kubeconfig to `path` that acts as a ServiceAccount, with a
    /// token from the TokenRequest API (valid for a day).
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        path: &Path,
    ) -> Result<()> {
        let token = self.kubectl_run(
            &[
                "create",
                "token",
                account,
                "-n",
                namespace,
                "--duration=24h",
            ],
            None,
        )?;
        let ca = std::fs::read_to_string(self.pki().ca())?;
        let config = pki::kubeconfig(
            &self.server(),
            &ca,
            account,
            pki::Credentials::Token(token.trim()),
        );
        std::fs::write(path, config).with_context(|| format!("writing {}", path.display()))
    }

    /// Trouble from KWOK's stages for the pods `selector` picks in
    /// `namespace`: `Some("crash-loop")` (their containers crash-loop),
    /// `Some("image-pull")` (their image cannot be pulled), or `None` (they
    /// recover).
    pub fn chaos(&self, namespace: &str, selector: &str, chaos: Option<&str>) -> Result<()> {
        let label = match chaos {
            Some(kind) => format!("{CHAOS_LABEL}={kind}"),
            None => format!("{CHAOS_LABEL}-"),
        };
        self.kubectl_run(
            &[
                "label",
                "pods",
                "-n",
                namespace,
                "-l",
                selector,
                &label,
                "--overwrite",
            ],
            None,
        )?;
        Ok(())
    }

    /// Wait until every node is `Ready`.
    pub fn wait_nodes_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            self.check_alive()?;
            let out = self.kubectl_run(
                &[
                    "get",
                    "nodes",
                    "-o",
                    r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
                ],
                None,
            )?;
            let lines: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
            if lines.len() >= self.options.nodes && lines.iter().all(|l| l.ends_with("=True")) {
                return Ok(());
            }
            if started.elapsed() > START_PATIENCE {
                bail!(
                    "nodes not ready within {}s: {out}; KWOK's log: {}",
                    START_PATIENCE.as_secs(),
                    self.log("kwok").display()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Create a namespace and wait until its `default` ServiceAccount is
    /// there (the API server refuses pods before it is).
    pub fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) -> Result<()> {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
            .collect();
        let namespace = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        });
        self.apply(&namespace.to_string())?;
        let started = Instant::now();
        while self
            .kubectl_run(&["get", "serviceaccount", "default", "-n", name], None)
            .is_err()
        {
            if started.elapsed() > START_PATIENCE {
                bail!("namespace {name} got no default ServiceAccount");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn log(&self, component: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{component}.log"))
    }

    fn args(&self, component: &str) -> Vec<String> {
        let d = |p: &str| self.dir.join(p).display().to_string();
        let pki = self.pki();
        let s = |p: PathBuf| p.display().to_string();
        let ports = self.ports;
        let grace = self.options.node_grace.as_secs().max(2);
        match component {
            "etcd" => vec![
                format!("--data-dir={}", d("etcd")),
                format!("--listen-client-url=http://127.0.0.1:{}", ports.etcd_client),
                format!("--listen-peer-url=http://127.0.0.1:{}", ports.etcd_peer),
            ],
            "kube-apiserver" => vec![
                format!("--etcd-servers=http://127.0.0.1:{}", ports.etcd_client),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={}", ports.apiserver),
                format!("--tls-cert-file={}", s(pki.serving_cert())),
                format!("--tls-private-key-file={}", s(pki.serving_key())),
                format!("--client-ca-file={}", s(pki.ca())),
                format!(
                    "--service-account-key-file={}",
                    s(pki.service_account_public_key())
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    s(pki.service_account_key())
                ),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--authorization-mode=Node,RBAC".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                format!("--audit-policy-file={}", d("audit-policy.yaml")),
                format!("--audit-log-path={}", d("audit.log")),
                "--audit-log-format=json".into(),
                // Every event written as it happens, so a test reads it at once.
                "--audit-log-mode=blocking".into(),
            ]
            .into_iter()
            .chain(
                self.options
                    .cluster_egress
                    .as_ref()
                    .map(|_| format!("--egress-selector-config-file={}", d("egress.yaml"))),
            )
            .collect(),
            "kube-controller-manager" => vec![
                format!("--kubeconfig={}", d("controller-manager.kubeconfig")),
                "--secure-port=0".into(),
                "--leader-elect=false".into(),
                format!("--root-ca-file={}", s(pki.ca())),
                format!(
                    "--service-account-private-key-file={}",
                    s(pki.service_account_key())
                ),
                "--node-monitor-period=2s".into(),
                format!("--node-monitor-grace-period={grace}s"),
                "--profiling=false".into(),
            ],
            "kube-scheduler" => vec![
                format!("--kubeconfig={}", d("scheduler.kubeconfig")),
                "--secure-port=0".into(),
                "--leader-elect=false".into(),
                "--profiling=false".into(),
            ],
            "kwok" => vec![
                format!("--kubeconfig={}", d("kwok.kubeconfig")),
                format!("--config={}", d("kwok.yaml")),
                "--manage-all-nodes=false".into(),
                format!(
                    "--manage-nodes-with-label-selector={}={}",
                    KWOK_LABEL.0, KWOK_LABEL.1
                ),
                format!("--server-address=127.0.0.1:{}", ports.kwok),
                "--node-ip=127.0.0.1".into(),
                format!("--node-lease-duration-seconds={}", (grace / 2).max(2)),
                format!("--tls-cert-file={}", s(pki.serving_cert())),
                format!("--tls-private-key-file={}", s(pki.serving_key())),
            ],
            other => unreachable!("no component {other}"),
        }
    }

    fn spawn(&mut self, component: &'static str) -> Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(component))?;
        let mut command = Command::new(self.bin.path(component));
        command
            .args(self.args(component))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C meant for the command that
            // started the cluster does not reach the cluster.
            .process_group(0);
        let child = command
            .spawn()
            .with_context(|| format!("could not start {component}"))?;
        self.children.insert(component, child);
        Ok(())
    }

    /// Record the control plane in `state.json` in its folder, where
    /// [`Cluster::attach`], [`status`] and [`stop_detached`] find it.
    pub fn write_state(&self) -> Result<State> {
        let state = State {
            server: self.server(),
            ports: self.ports,
            nodes: self.options.nodes,
            node_grace_s: self.options.node_grace.as_secs(),
            pids: self
                .recorded
                .clone()
                .into_iter()
                .chain(
                    self.children
                        .iter()
                        .map(|(name, child)| ((*name).to_string(), child.id())),
                )
                .collect(),
            bin: self.bin.dir.clone(),
        };
        std::fs::write(
            self.dir.join("state.json"),
            serde_json::to_string_pretty(&state)?,
        )?;
        Ok(state)
    }

    /// Leave the control plane running after this value is gone.
    pub fn detach(mut self) -> Result<State> {
        let state = self.write_state()?;
        self.children.clear();
        Ok(state)
    }

    /// A control plane that another process started and recorded in
    /// `dir`: it can be used, and dropping this leaves it running.
    pub fn attach(dir: &Path) -> Result<Cluster> {
        let Some(state) = status(dir)? else {
            bail!("no control plane is running in {}", dir.display());
        };
        let recorded = state.pids.clone();
        Cluster::recorded_in(dir, &state, recorded)
    }

    /// The control plane `state` records in `dir`, with the components
    /// `recorded` (running, by process id) and none started by this
    /// process.
    fn recorded_in(dir: &Path, state: &State, recorded: BTreeMap<String, u32>) -> Result<Cluster> {
        Ok(Cluster {
            dir: dir.to_path_buf(),
            bin: Binaries::at(&state.bin)?,
            ports: state.ports,
            options: Options {
                nodes: state.nodes,
                node_grace: Duration::from_secs(state.node_grace_s),
                cluster_egress: None,
            },
            children: BTreeMap::new(),
            recorded,
        })
    }

    /// Start again, on its kept data, a control plane that `dir` recorded
    /// and whose processes are gone (a machine restarted, say): the same
    /// ports, certificates and etcd data, the components it recorded
    /// (a component stopped before the record stays stopped), and wait
    /// until its nodes are ready. A control plane still running is attached.
    pub fn revive(dir: &Path) -> Result<Cluster> {
        if status(dir)?.is_some() {
            return Cluster::attach(dir);
        }
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("no control plane recorded in {}", path.display()))?;
        let state: State =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        if !dir.join("etcd").is_dir() || !dir.join("pki").is_dir() {
            bail!("{} keeps no etcd data or certificates", dir.display());
        }
        let mut cluster = Cluster::recorded_in(dir, &state, BTreeMap::new())?;
        // In the order `start` starts them: the reverse of the stop order.
        for name in STOP_ORDER.iter().rev().copied() {
            if !state.pids.contains_key(name) {
                continue;
            }
            match name {
                "kube-apiserver" => cluster.start_apiserver()?,
                "etcd" => {
                    cluster.spawn(name)?;
                    wait_for_port(cluster.ports.etcd_client, Duration::from_secs(60))
                        .context("etcd did not listen")?;
                }
                _ => cluster.spawn(name)?,
            }
        }
        cluster.wait_nodes_ready()?;
        cluster.write_state()?;
        Ok(cluster)
    }

    /// Stop one component (SIGTERM, then SIGKILL after 10 s), whether this
    /// process started it or an attached control plane recorded it: the
    /// controller manager, say, so that nothing but the caller makes pods.
    pub fn stop(&mut self, component: &str) -> Result<()> {
        if let Some(mut child) = self.children.remove(component) {
            terminate(child.id());
            child.wait()?;
        } else if let Some(pid) = self.recorded.remove(component)
            && alive(pid, &self.bin.dir)
        {
            terminate(pid);
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for name in STOP_ORDER {
            if let Some(child) = self.children.remove(name) {
                terminate(child.id());
                let mut child = child;
                let _ = child.wait();
            }
        }
    }
}

/// The state of a detached control plane in `dir`, when one is recorded
/// and its API server process is alive.
pub fn status(dir: &Path) -> Result<Option<State>> {
    let path = dir.join("state.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let state: State =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    let alive = state
        .pids
        .get("kube-apiserver")
        .is_some_and(|pid| alive(*pid, &state.bin));
    Ok(alive.then_some(state))
}

/// Stop a detached control plane: every process it recorded that is still
/// one of ours. Whether there was one.
pub fn stop_detached(dir: &Path) -> Result<bool> {
    let path = dir.join("state.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    let state: State = serde_json::from_str(&text)?;
    let mut any = false;
    for name in STOP_ORDER {
        if let Some(&pid) = state.pids.get(name)
            && alive(pid, &state.bin)
        {
            terminate(pid);
            any = true;
        }
    }
    std::fs::remove_file(&path)?;
    Ok(any)
}

/// Whether `pid` is a live process started from the programs in `bin`
/// (not a process that got a recycled id).
fn alive(pid: u32, bin: &Path) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    exe.starts_with(bin) && !zombie(pid)
}

/// SIGTERM, then SIGKILL when the process is still there after 10 s.
fn terminate(pid: u32) {
    let Ok(raw) = i32::try_from(pid) else {
        return;
    };
    signal(raw, libc::SIGTERM);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if exited(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(raw, libc::SIGKILL);
}

/// Whether `pid` has exited: it is gone, or a zombie whose threads have
/// all ended. The first thread of a process of many (a Go server's) turns
/// zombie as soon as it ends, while the others may still be tearing the
/// process down — gigabytes of memory freed — and hold its open files,
/// its listening socket among them.
fn exited(pid: u32) -> bool {
    let proc = format!("/proc/{pid}");
    if !Path::new(&proc).exists() {
        return true;
    }
    zombie(pid)
        && std::fs::read_dir(format!("{proc}/task")).map_or(true, |threads| threads.count() <= 1)
}

/// Whether `pid` has exited but not been waited for.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

#[allow(unsafe_code)]
fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) with a process id and a signal number has no memory
    // effects in this process.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn wait_for_port(port: u16, limit: Duration) -> Result<()> {
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
        if started.elapsed() > limit {
            bail!("nothing listens on {address}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Run a command with `input` on its standard input; its standard output,
/// or an error with its standard error.
pub fn run_with_input(command: &mut Command, input: Option<&str>) -> Result<String> {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {shown}"))?;
    if let Some(text) = input {
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(text.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "{shown} failed with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Requests of ServiceAccounts are recorded (what verdict does is checked
/// against its role); nothing else is.
const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: [\"system:serviceaccounts\"]
- level: None
";

/// KWOK's configuration: its own stages for nodes and pods, and ours for
/// crash loops and recovery (`stages/`).
fn kwok_config() -> Result<String> {
    let dir = module_dir().join("stages");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    // No KwokConfiguration document: without one KWOK takes its defaults
    // (with one, it takes only what the document says).
    let mut config = String::new();
    for file in files {
        config.push_str("---\n");
        config.push_str(&std::fs::read_to_string(&file)?);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_has_exited_once_gone_or_a_zombie_of_one_thread() {
        // This test process runs, with threads of its own.
        assert!(!exited(std::process::id()));
        let mut child = Command::new("sleep").arg("60").spawn().unwrap();
        let pid = child.id();
        assert!(!exited(pid));
        child.kill().unwrap();
        // Killed but not waited for: a zombie of one thread, once the
        // kernel has ended it.
        let started = Instant::now();
        while !zombie(pid) && started.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert!(zombie(pid));
        assert!(exited(pid));
        child.wait().unwrap();
        assert!(exited(pid));
    }
}
