//! The dashboard in a real browser: headless Chromium driven over WebDriver
//! (chromedriver) loads the page against the host following the
//! simulator, sees an app change status live without a reload, starts an
//! action, sees the admission answer and the task's progress, and leaves a
//! screenshot in `target/test-artifacts/dashboard.png`; and against
//! `verdict serve --demo`, it follows the demo's own restart of shop/cart.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::live::{Cluster, PATIENCE, start_host};
use crate::support::{KillOnDrop, wait_until};

/// A WebDriver session of headless Chromium.
struct Browser {
    base: String,
    session: String,
    http: reqwest::blocking::Client,
    _driver: KillOnDrop,
    /// The browser's profile, removed after the session has ended and the
    /// driver is gone (fields drop in order).
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian chromium-driver) is installed by .ci/run");
        let driver = KillOnDrop(driver);
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        assert!(
            wait_until(PATIENCE, || http
                .get(format!("{base}/status"))
                .send()
                .is_ok())
            .is_some(),
            "chromedriver did not start"
        );
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-quic", "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                     format!("--user-data-dir={}", profile.path().display())],
        }}}});
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .unwrap()
            .json()
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        Self {
            base,
            session,
            http,
            _driver: driver,
            _profile: profile,
        }
    }

    fn call(&self, path: &str, body: Value) -> Value {
        let response: Value = self
            .http
            .post(format!("{}/session/{}/{path}", self.base, self.session))
            .json(&body)
            .send()
            .unwrap()
            .json()
            .unwrap();
        response["value"].clone()
    }

    fn open(&self, url: &str) {
        self.call("url", json!({"url": url}));
    }

    /// Run a script in the page; its result.
    fn run(&self, script: &str) -> Value {
        self.call("execute/sync", json!({"script": script, "args": []}))
    }

    /// Wait until a script returns true.
    fn until(&self, what: &str, script: &str) {
        self.until_within(what, script, PATIENCE);
    }

    fn until_within(&self, what: &str, script: &str, limit: Duration) {
        let mut last = Value::Null;
        let took = wait_until(limit, || {
            last = self.run(script);
            last == Value::Bool(true)
        });
        let page = self.run("return document.body.innerText");
        assert!(took.is_some(), "{what}: never; last {last}; page:\n{page}");
    }

    fn screenshot(&self, path: &Path) {
        let response: Value = self
            .http
            .get(format!("{}/session/{}/screenshot", self.base, self.session))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(response["value"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self
            .http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send();
    }
}

fn deployment(ready: i64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "web"}},
        "spec": {"replicas": 2},
        "status": {"replicas": 2, "readyReplicas": ready, "availableReplicas": ready, "updatedReplicas": 2}
    })
}

#[test]
fn the_dashboard_shows_live_status_and_actions_in_a_browser() {
    let cluster = Cluster::start();
    cluster.apply(deployment(2));
    // The app has an object of a configured kind too.
    cluster.apply(crate::resources::widget_crd());
    cluster.apply(crate::resources::widget("w1"));
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("verdict.toml");
    std::fs::write(&config, crate::resources::WATCH_WIDGETS).unwrap();
    let server = start_host(
        &cluster,
        data.path(),
        &["--config", config.to_str().unwrap()],
    );
    let widget_held = wait_until(PATIENCE, || {
        server.get("/readyz").1["objects"][crate::resources::WIDGET] == 1
    });
    assert!(widget_held.is_some(), "{}", server.get("/readyz").1);
    let browser = Browser::start();
    browser.open(&format!("{}/", server.base));
    let row = r#"const row = document.querySelector('tr[data-app="shop/web"]');"#;
    browser.until(
        "shop/web shown running",
        &format!("{row} return !!row && row.querySelector('.badge').textContent === 'running';"),
    );

    // A change in the cluster shows without a reload.
    browser.run("window.sentinel = 'same page'; return true;");
    cluster.apply(deployment(1));
    browser.until(
        "shop/web turns degraded live",
        &format!("{row} return !!row && row.querySelector('.badge').textContent === 'degraded';"),
    );
    assert_eq!(
        browser.run("return window.sentinel;"),
        "same page",
        "the page reloaded"
    );
    // The reason is said once, in Why, not again beside the badge; with no
    // tokens configured there is no Token button.
    assert_eq!(
        browser.run(&format!(
            "{row} const [, status, , why] = row.querySelectorAll('td'); \
             return why.textContent.length > 0 && !status.textContent.includes(why.textContent);"
        )),
        true,
        "Status repeats Why"
    );
    assert_eq!(
        browser.run("return document.getElementById('token').hidden;"),
        true
    );

    // Start an action from the page: the admission answer shows, and the
    // task's progress follows the executor's reports.
    browser.run(&format!("{row} row.click(); return true;"));
    browser.until(
        "the detail panel",
        "return document.getElementById('detail-title').textContent === 'shop/web';",
    );
    // A Deployment is not migrated: that is for virtual machines.
    assert_eq!(
        browser.run("return document.querySelector('#actions [data-action=\"migrate\"]').hidden;"),
        true,
        "Migrate… offered on a Deployment"
    );
    browser.until(
        "the app's widget with its phase and condition",
        "const o = document.querySelector('#detail tr[data-object=\"Widget/w1\"]'); \
         return !!o && o.textContent.includes('Ready') && o.textContent.includes('Ready: True');",
    );
    browser.run("document.querySelector('button[data-action=\"restart\"]').click(); return true;");
    browser.until(
        "the admission answer",
        "return document.getElementById('answer').textContent.includes('admitted');",
    );
    let tasks = server.get("/v1/tasks?app=shop/web").1;
    let id = tasks["tasks"][0]["id"].as_str().unwrap().to_string();
    let (code, _) = server.send(
        "PATCH",
        &format!("/v1/tasks/{id}"),
        Some(r#"{"phase": "running", "progress": 40}"#),
    );
    assert_eq!(code, 200);
    browser.until(
        "progress 40 shown",
        &format!(
            "return !!document.querySelector('tr[data-task=\"{id}\"] progress[value=\"40\"]');"
        ),
    );
    // A create's plan shows its steps advancing.
    let (code, created) = server.send(
        "POST",
        "/v1/tasks",
        Some(r#"{"app": "shop/fresh", "action": "create", "params": {"image": "fresh:1"}}"#),
    );
    assert_eq!(code, 201, "{created}");
    let fresh = created["id"].as_str().unwrap().to_string();
    let (code, body) = server.send(
        "PATCH",
        &format!("/v1/tasks/{fresh}"),
        Some(r#"{"steps": [{"name": "prepare-environment", "phase": "succeeded"}, {"name": "deploy", "phase": "running"}]}"#),
    );
    assert_eq!(code, 200, "{body}");
    browser.until(
        "the create's steps, one done and one running",
        &format!(
            "const r = document.querySelector('tr[data-task=\"{fresh}\"]'); \
             return !!r && !!r.querySelector('li[data-step=\"prepare-environment\"][data-phase=\"succeeded\"]') \
               && !!r.querySelector('li[data-step=\"deploy\"][data-phase=\"running\"]') \
               && r.querySelectorAll('ol.steps li').length === 4;"
        ),
    );
    browser.until(
        "the app's badge says restarting",
        &format!("{row} return row.querySelector('.badge').textContent === 'restarting';"),
    );
    let artifact =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts/dashboard.png");
    browser.screenshot(&artifact);
    assert!(std::fs::metadata(&artifact).unwrap().len() > 10_000);
}

#[test]
fn the_dashboard_follows_the_demo() {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let server = crate::serve::Server::start_with(&plugins, data.path(), &["--demo"]);
    let browser = Browser::start();
    browser.open(&format!("{}/", server.base));
    let badge = r#"const row = document.querySelector('tr[data-app="shop/cart"]');
        const badge = row && row.querySelector('.badge').textContent;"#;
    // The demo restarts, stops and starts shop/cart through tasks in each
    // one-minute loop: within a loop its status changes without a reload,
    // and a task of it is shown in flight.
    browser.until("shop/cart shown", &format!("{badge} return !!badge;"));
    let first = browser.run(&format!("{badge} return badge;"));
    browser.run("window.sentinel = 'same page'; return true;");
    let loop_time = Duration::from_secs(70);
    browser.until_within(
        "shop/cart's status changes",
        &format!("{badge} return !!badge && badge !== {first};"),
        loop_time,
    );
    browser.until_within(
        "a task of shop/cart in flight",
        "return [...document.querySelectorAll('#tasks tr[data-task]')].some((r) => r.textContent.includes('shop/cart'));",
        loop_time,
    );
    // The demo's node n2 is lost for a while each loop: failover's
    // judgement of it shows live.
    browser.until_within(
        "n2 judged unknown",
        "const row = document.querySelector('#nodes tr[data-node=\"n2\"]'); return !!row && row.querySelector('.badge')?.textContent === 'unknown';",
        loop_time,
    );
    assert!(
        browser
            .run("return document.getElementById('failover-mode').textContent;")
            .as_str()
            .unwrap()
            .contains("dry-run")
    );
    assert_eq!(
        browser.run("return window.sentinel;"),
        "same page",
        "the page reloaded"
    );
    let artifact =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts/dashboard-demo.png");
    browser.screenshot(&artifact);
}

#[test]
fn the_dashboard_shows_an_app_of_virtual_machines_and_forces_a_stage() {
    let cluster = crate::vms::vm_cluster();
    let data = tempfile::tempdir().unwrap();
    let server = start_host(&cluster, data.path(), &[]);
    server.app_until("vms/db", "both VMs ready", PATIENCE, |v| {
        v["stable"] == "running"
            && v["ready_replicas"] == 2
            && v["objects"].as_array().map(Vec::len) == Some(4)
    });
    let browser = Browser::start();
    browser.open(&format!("{}/", server.base));
    let row = r#"const row = document.querySelector('tr[data-app="vms/db"]');"#;
    browser.until("vms/db shown", &format!("{row} return !!row;"));
    browser.run(&format!("{row} row.click(); return true;"));
    let vm =
        r#"const vm = document.querySelector('#detail tr[data-object="VirtualMachine/db-1"]');"#;
    browser.until(
        "db-1 with its stage and its observed condition",
        &format!(
            "{vm} return !!vm && vm.querySelector('.badge')?.textContent === 'ready' && vm.textContent.includes('Ready: True');"
        ),
    );

    // Force db-1 offline from the form; the verdict follows live.
    browser.run(
        "document.getElementById('force-target').value = 'db-1';
         document.getElementById('force-target').dispatchEvent(new Event('change'));
         document.getElementById('force-status').value = 'offline';
         document.getElementById('force-by').value = 'dana';
         document.getElementById('force-reason').value = 'disk errors';
         document.querySelector('#force button[type=submit]').click();
         return true;",
    );
    browser.until(
        "db-1 shown forced offline",
        &format!(
            "{vm} return !!vm && vm.querySelector('.badge')?.textContent === 'offline' && vm.textContent.includes('forced by dana');"
        ),
    );
    browser.until(
        "the app degraded",
        &format!("{row} return row.querySelector('.badge').textContent === 'degraded';"),
    );
    let forced = server.get("/v1/overrides").1;
    assert_eq!(forced["overrides"][0]["instance"], "db-1", "{forced}");
    assert_eq!(forced["overrides"][0]["by"], "dana");

    // Lift it from the page: the stage and the app come back.
    browser.run(&format!(
        "{vm} vm.querySelector('button[data-lift]').click(); return true;"
    ));
    browser.until(
        "db-1 ready again, no longer forced",
        &format!(
            "{vm} return !!vm && vm.querySelector('.badge')?.textContent === 'ready' && !vm.textContent.includes('forced');"
        ),
    );
    browser.until(
        "the app running again",
        &format!("{row} return row.querySelector('.badge').textContent === 'running';"),
    );
    let artifact =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts/dashboard-vms.png");
    browser.screenshot(&artifact);
}

#[test]
fn the_dashboard_shows_which_replica_leads_and_follows_a_handover() {
    let cluster = Cluster::start();
    crate::tasks::define_tasks(&cluster);
    let url = cluster.sim().url();
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let mut group =
        crate::replicas::Group::start(&plugins, &["--cluster-url", &url], "verdict-system", 2, &[]);
    let leader = group.leader();
    let follower = group.other(leader);
    let browser = Browser::start();
    browser.open(&format!("{}/", group.server(follower).base));
    let (me, them) = (group.names[follower].clone(), group.names[leader].clone());
    browser.until(
        "this replica follows the leader",
        &format!("return document.getElementById('replica').textContent === 'replica {me} — follows {them}';"),
    );
    browser.until(
        "both replicas listed, the leader marked",
        &format!(
            "const rows = [...document.querySelectorAll('#replicas tr')]; \
             return rows.length === 2 && !!document.querySelector('#replicas tr[data-replica=\"{them}\"] .badge.ok') \
             && rows.every((r) => r.textContent.includes('status: default-status@'));"
        ),
    );
    // The leader goes; the page shows this replica leading.
    group.terminate(leader);
    browser.until(
        "this replica leads",
        &format!(
            "return document.getElementById('replica').textContent === 'replica {me} — leader';"
        ),
    );
}

#[test]
fn the_dashboard_shows_a_shadow_and_promotes_it() {
    let Some(registry) =
        crate::delivery::Registry::start("the_dashboard_shows_a_shadow_and_promotes_it")
    else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let candidate = crate::delivery::push(
        &registry,
        &crate::support::example_plugin("restart-budget"),
        &registry.reference("p/candidate:1"),
        data.path(),
    );
    let cluster = Cluster::start();
    crate::delivery::in_maintenance(&cluster, "quiet");
    let group = crate::delivery::replicas(&cluster, Some(&registry), 1, &[]);
    cluster.apply(crate::delivery::shadow_policy(
        "candidate",
        "status",
        &candidate,
    ));
    let browser = Browser::start();
    browser.open(&format!("{}/", group.server(0).base));
    let row = r#"const row = document.querySelector('#delivered tr[data-policy="candidate"]');"#;
    browser.until(
        "the shadow listed with its difference",
        &format!("{row} return !!row && row.textContent.includes('shadow') && row.textContent.includes('display: ') && !!row.querySelector('[data-promote]');"),
    );
    // Promoted from the page (the prompts answered by the test).
    browser.run("window.prompt = (q) => q.startsWith('Your') ? 'ana' : 'its differences are intended'; return true;");
    browser.run(&format!(
        "{row} row.querySelector('[data-promote]').click(); return true;"
    ));
    browser.until(
        "the promotion answered",
        "return document.getElementById('answer').textContent === 'candidate: promote done';",
    );
    browser.until(
        "the policy shown active",
        &format!("{row} return !!row && row.textContent.includes('active') && !!row.querySelector('[data-rollback]');"),
    );
}

#[test]
fn the_dashboard_shows_a_rollout_and_a_person_approves_its_gate_there() {
    use crate::vmdelivery::{Delivery, delivering, deployment, set};
    let Delivery {
        cluster, server, ..
    } = &delivering("");
    cluster.apply(set(3, json!([{"name": "jdk", "version": "21"}])));
    cluster.apply(deployment("1.0", json!([])));
    let browser = Browser::start();
    browser.open(&format!("{}/", server.base));
    let rollout = r#"const rollout = document.querySelector('[data-rollout-of="shop/web"]');"#;
    browser.until_within(
        "1.0 released to every instance",
        &format!("{rollout} return !!rollout && rollout.textContent.includes('Completed');"),
        PATIENCE * 3,
    );
    // 2.0 through a gray release with a gate.
    let spec = deployment(
        "2.0",
        json!([{"instances": 1}, {"pause": {}}, {"instances": "100%"}]),
    );
    cluster
        .sim()
        .store()
        .patch(
            cluster
                .sim()
                .store()
                .find("verdict.dev", "v1alpha1", "vmdeployments")
                .unwrap(),
            "shop",
            "web",
            &json!({"spec": spec["spec"]}),
        )
        .unwrap();
    let approve = r#"const approve = document.querySelector('[data-rollout="approve"][data-set="shop/web"]');"#;
    browser.until_within(
        "the gate with its Approve button",
        &format!("{approve} {rollout} return !!approve && rollout.textContent.includes('waiting for a person');"),
        PATIENCE * 2,
    );
    // The instances by stage: one with the new code, the rest held.
    let codes = "return [...document.querySelectorAll('[data-set=\"shop/web\"] tr[data-instance]')].map((r) => r.children[2].textContent).sort().join(',');";
    assert_eq!(browser.run(codes), "1.0,1.0,2.0");
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-artifacts/dashboard-rollout-gate.png");
    browser.screenshot(&artifact);

    browser.run("window.prompt = (q) => q.startsWith('Your') ? 'ana' : 'the canary is healthy'; return true;");
    browser.run(&format!("{approve} approve.click(); return true;"));
    browser.until(
        "the approval answered",
        "return document.getElementById('answer').textContent === 'shop/web: approve asked';",
    );
    browser.until_within(
        "2.0 rolled out after the approval",
        &format!("{rollout} return !!rollout && rollout.textContent.includes('Completed') && rollout.textContent.includes('approve by ana: the canary is healthy');"),
        PATIENCE * 3,
    );
    browser.until(
        "every instance on 2.0",
        &codes.replace(".join(',');", ".join(',') === '2.0,2.0,2.0';"),
    );

    // An instance's task log, opened on the page.
    browser.run(r#"document.querySelector('[data-log="shop/web/web-0"]').click(); return true;"#);
    browser.until(
        "web-0's task log",
        r#"const log = document.querySelector('tr[data-log-of="shop/web/web-0"]'); return !!log && log.textContent.includes('deploy-code done') && log.textContent.includes('gray-release');"#,
    );
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-artifacts/dashboard-rollout.png");
    browser.screenshot(&artifact);
}

/// A JavaScript expression: whether the canvas `id` has a pixel of
/// exactly this colour (the inside of a bar or an area, away from its
/// anti-aliased edges).
fn painted(id: &str, (r, g, b): (u8, u8, u8)) -> String {
    format!(
        "(() => {{ const canvas = document.getElementById('{id}');
           const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
           for (let i = 0; i < px.length; i += 4)
             if (px[i] === {r} && px[i + 1] === {g} && px[i + 2] === {b} && px[i + 3] === 255) return true;
           return false; }})()"
    )
}

#[test]
fn the_dashboard_draws_an_apps_history_and_the_clusters_statuses_over_time() {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    let data = tempfile::tempdir().unwrap();
    let server = crate::serve::Server::start_with(&plugins, data.path(), &["--demo"]);
    // The charting library comes from the host itself, kept for good.
    let library =
        reqwest::blocking::get(format!("{}/assets/chart-4.5.1.umd.min.js", server.base)).unwrap();
    assert_eq!(library.status(), 200);
    assert!(
        library.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert!(library.text().unwrap().contains("Chart.js v4.5.1"));

    let browser = Browser::start();
    browser.open(&format!("{}/", server.base));
    let loop_time = Duration::from_secs(90);
    // The cluster: apps by status over time, drawn (running's green is on
    // the canvas, not only in the data).
    browser.until_within(
        "apps by status drawn",
        &format!(
            "const c = Chart.getChart('over-time'); if (!c || !c.data.datasets.some((d) => d.label === 'running' && d.data.some((p) => p.y > 0))) return false;
             return {};",
            painted("over-time", (26, 127, 55))
        ),
        loop_time,
    );

    // shop/api's pod on n2 crash-loops, and n2 is lost each loop: its
    // timeline shows it running, flapping into degraded (the crash loop,
    // folded into one entry), and failover's judgement of the node marked.
    browser.until(
        "shop/api shown",
        r#"return !!document.querySelector('tr[data-app="shop/api"]');"#,
    );
    browser.run(r#"document.querySelector('tr[data-app="shop/api"]').click(); return true;"#);
    browser.until_within(
        "shop/api's timeline with its crash loop and the lost node marked",
        &format!(
            "const c = Chart.getChart('timeline'); if (!c) return false;
             const statuses = c.data.datasets[0].data.map((d) => d.p.e.status);
             const flapped = c.data.datasets[1].data.map((d) => d.f.status);
             const marks = c.data.datasets[2].data.map((d) => d.m.kind);
             if (!statuses.includes('running') || !flapped.includes('degraded') || !marks.includes('failover')) return false;
             return {} && {};",
            painted("timeline", (26, 127, 55)),
            painted("timeline", (212, 167, 44))
        ),
        loop_time,
    );
    browser.until(
        "its availability over a day, a week and a month",
        "const rows = [...document.querySelectorAll('#availability tbody tr[data-window]')];
         return rows.length === 3 && rows.every((r) => /\\d+\\.\\d\\d %/.test(r.cells[1].textContent));",
    );
    browser.until(
        "its incidents listed",
        "return !!document.querySelector('#incidents li[data-incident]');",
    );
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-artifacts/dashboard-history.png");
    browser.screenshot(&artifact);

    // shop/cart is restarted, stopped and started by tasks each loop: its
    // tasks are marked on its timeline, and a range of one hour redraws it.
    browser.run(r#"document.querySelector('tr[data-app="shop/cart"]').click(); return true;"#);
    browser
        .run(r#"document.querySelector('#history button[data-range="1h"]').click(); return true;"#);
    browser.until_within(
        "shop/cart's tasks marked",
        "const c = Chart.getChart('timeline');
         return !!c && document.getElementById('detail-title').textContent === 'shop/cart'
           && document.querySelector('#history button[data-range=\"1h\"]').getAttribute('aria-pressed') === 'true'
           && c.scales.x.max - c.scales.x.min <= 3600000
           && c.data.datasets[2].data.some((d) => d.m.kind === 'task');",
        loop_time,
    );
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-artifacts/dashboard-history-tasks.png");
    browser.screenshot(&artifact);
}

#[test]
fn the_fleet_dashboard_shows_every_clusters_apps_a_filter_and_a_lost_cluster() {
    let (east_cluster, west_cluster) = (Cluster::start(), Cluster::start());
    let (east_data, west_data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut east = start_host(&east_cluster, east_data.path(), &[]);
    let west = start_host(&west_cluster, west_data.path(), &[]);
    let fleet = crate::fleet::start_fleet(&[("east", &east.base), ("west", &west.base)], &[]);
    let browser = Browser::start();
    browser.open(&format!("{}/", fleet.base));
    let row = |cluster: &str| {
        format!(
            r#"const row = document.querySelector('#apps tr[data-cluster="{cluster}"][data-app="shop/web"]');"#
        )
    };
    for cluster in ["east", "west"] {
        browser.until(
            "each cluster's app, with its cluster",
            &format!(
                "{} return !!row && row.cells[0].textContent === '{cluster}' && row.dataset.status === 'running';",
                row(cluster)
            ),
        );
    }
    browser.run("window.sentinel = 'same page'; return true;");

    // The filter by cluster.
    browser.run(
        "const s = document.getElementById('cluster-filter'); s.value = 'west'; s.dispatchEvent(new Event('change')); return true;",
    );
    browser.until(
        "only west's apps",
        &format!(
            "{} const rows = [...document.querySelectorAll('#apps tr.app')]; return !!row && rows.every((r) => r.dataset.cluster === 'west');",
            row("west")
        ),
    );

    // West's app changes, live.
    west_cluster.apply(deployment(0));
    west_cluster.apply(crate::live::pod("web-1", Some("CrashLoopBackOff")));
    browser.until(
        "west's change without a reload",
        &format!(
            "{} return !!row && row.dataset.status !== 'running';",
            row("west")
        ),
    );

    // East is lost: its row in the clusters' table says so, and its app
    // is unknown.
    browser.run(
        "const s = document.getElementById('cluster-filter'); s.value = ''; s.dispatchEvent(new Event('change')); return true;",
    );
    east.kill();
    browser.until(
        "east lost",
        r#"const row = document.querySelector('#clusters tr[data-cluster="east"]'); return !!row && row.querySelector('.badge').textContent === 'lost';"#,
    );
    browser.until(
        "east's app unknown",
        &format!(
            "{} return !!row && row.dataset.status === 'unknown';",
            row("east")
        ),
    );
    assert_eq!(
        browser.run("return window.sentinel;"),
        "same page",
        "the page reloaded"
    );
    let artifact = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts/fleet.png");
    browser.screenshot(&artifact);
}
