//! `cargo xtask demo --real`: the demo's story played on the real control
//! plane (`cargo xtask cluster up`, started when it is not up), with
//! verdict following it. Objects go through the API server; KWOK runs the
//! pods and plays the kubelets: a scale-up whose new pods take a few
//! seconds to start, an image that cannot be pulled, a crash loop, a node
//! whose kubelet stops and comes back, and tasks that verdict carries out.
//! It loops every minute until interrupted.

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use verdict_testcluster::Cluster;

/// Where verdict listens during the demo.
const LISTEN: &str = "127.0.0.1:8080";
const LOOP: Duration = Duration::from_secs(60);

fn deployment(ns: &str, name: &str, replicas: u32, node: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": name, "image": format!("registry.example/{name}:1.0"),
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}]});
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/instance": name}},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/instance": name},
                "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "3s"}},
                "spec": spec}},
    })
}

/// The apps at the start of every loop.
fn objects() -> Vec<Value> {
    let mut ledger = deployment("payments", "ledger", 2, None);
    ledger["kind"] = json!("StatefulSet");
    ledger["spec"]["serviceName"] = json!("ledger");
    ledger["spec"]["template"]["spec"]["affinity"] = json!({"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "ledger"}}}]}});
    vec![
        deployment("shop", "web", 3, None),
        deployment("shop", "api", 2, None),
        deployment("shop", "images", 1, None),
        deployment("shop", "cart", 2, None),
        deployment("batch", "report", 0, None),
        ledger,
    ]
}

struct Step {
    at: Duration,
    what: &'static str,
    run: fn(&Cluster, &str) -> Result<String>,
}

fn kubectl(cluster: &Cluster, args: &[&str]) -> Result<String> {
    cluster.kubectl_run(args, None)
}

fn scale(cluster: &Cluster, namespace: &str, deployment: &str, replicas: u32) -> Result<String> {
    kubectl(
        cluster,
        &[
            "scale",
            "deployment",
            deployment,
            "-n",
            namespace,
            &format!("--replicas={replicas}"),
        ],
    )
}

fn chaos(cluster: &Cluster, selector: &str, kind: Option<&str>) -> Result<String> {
    cluster
        .chaos("shop", selector, kind)
        .map(|()| String::new())
}

fn ask(verdict: &str, app: &str, action: &str) -> Result<String> {
    let body = json!({"app": app, "action": action, "requested-by": "demo"});
    // verdict's answer whatever its status, as it is for any other client:
    // a refused task's JSON says why.
    let answer: Value = ureq::post(format!("{verdict}/v1/tasks"))
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(&body)?
        .body_mut()
        .read_json()?;
    Ok(answer.to_string())
}

const STEPS: [Step; 12] = [
    Step {
        at: Duration::from_secs(4),
        what: "task: restart shop/cart",
        run: |_, v| ask(v, "shop/cart", "restart"),
    },
    Step {
        at: Duration::from_secs(6),
        what: "shop/web scales to 4 (new pods start in 3 s)",
        run: |c, _| scale(c, "shop", "web", 4),
    },
    Step {
        at: Duration::from_secs(10),
        what: "shop/images cannot pull its image",
        run: |c, _| chaos(c, "app.kubernetes.io/instance=images", Some("image-pull")),
    },
    Step {
        at: Duration::from_secs(14),
        what: "shop/api crash-loops",
        run: |c, _| chaos(c, "app.kubernetes.io/instance=api", Some("crash-loop")),
    },
    Step {
        at: Duration::from_secs(18),
        what: "batch/report starts from zero",
        run: |c, _| scale(c, "batch", "report", 1),
    },
    Step {
        at: Duration::from_secs(20),
        what: "task: stop shop/cart",
        run: |_, v| ask(v, "shop/cart", "stop"),
    },
    Step {
        at: Duration::from_secs(24),
        what: "node n2's kubelet stops",
        run: |c, _| c.stop_kubelet("n2").map(|()| String::new()),
    },
    Step {
        at: Duration::from_secs(32),
        what: "task: start shop/cart",
        run: |_, v| ask(v, "shop/cart", "start"),
    },
    Step {
        at: Duration::from_secs(40),
        what: "shop/api and shop/images are fixed",
        run: |c, _| chaos(c, verdict_testcluster::CHAOS_LABEL, None),
    },
    Step {
        at: Duration::from_secs(48),
        what: "node n2 is back",
        run: |c, _| c.start_kubelet("n2").map(|()| String::new()),
    },
    Step {
        at: Duration::from_secs(56),
        what: "shop/web and batch/report back to their start",
        run: |c, _| {
            scale(c, "shop", "web", 3)?;
            scale(c, "batch", "report", 0)
        },
    },
    Step {
        at: Duration::from_secs(58),
        what: "what verdict saw, as `kubectl events -n shop` shows it",
        run: |c, _| {
            let events = kubectl(c, &["events", "-n", "shop"])?;
            let verdicts: Vec<&str> = events.lines().filter(|l| l.contains("→")).collect();
            eprintln!("{}", verdicts.join("\n"));
            Ok(String::new())
        },
    },
];

/// Kill verdict when the demo ends, however it ends.
struct Verdict(Child);

impl Drop for Verdict {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(cluster: &Cluster, plugins: &std::path::Path, mut serve: Command) -> Result<()> {
    for ns in ["shop", "payments", "batch"] {
        cluster.create_namespace(ns, &[])?;
    }
    for object in objects() {
        cluster.apply(&object.to_string())?;
    }
    let verdict = format!("http://{LISTEN}");
    serve
        .args([
            "serve",
            "--listen",
            LISTEN,
            "--execute-tasks",
            "--kubeconfig",
        ])
        .arg(cluster.kubeconfig())
        .arg("--plugins")
        .arg(plugins);
    let mut verdict_process = Verdict(serve.spawn().context("could not start verdict")?);
    // verdict may be built first; the story starts once it serves.
    let started = Instant::now();
    while !ureq::get(format!("{verdict}/readyz"))
        .call()
        .is_ok_and(|r| r.status().is_success())
    {
        if let Some(status) = verdict_process.0.try_wait()? {
            anyhow::bail!("verdict exited with {status}");
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("verdict did not become ready within 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "xtask demo --real: verdict follows the control plane at {}; open {verdict}/ (Ctrl-C ends the demo)",
        cluster.server()
    );
    loop {
        let started = Instant::now();
        for step in &STEPS {
            if let Some(wait) = step.at.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
            match (step.run)(cluster, &verdict) {
                Ok(_) => eprintln!("demo {:>3}s: {}", step.at.as_secs(), step.what),
                Err(error) => eprintln!(
                    "demo {:>3}s: {} failed: {error:#}",
                    step.at.as_secs(),
                    step.what
                ),
            }
        }
        if let Some(wait) = LOOP.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
}
