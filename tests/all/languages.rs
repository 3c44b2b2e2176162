//! Policies in JavaScript and Python are loaded, swapped and limited like
//! Rust ones: the restart-budget rule in all three languages gives the same
//! verdicts and replaces one another under load without a failed call; a
//! Python policy that reaches for files, sockets, the environment and the
//! clock gets nothing; each plugin's own limits hold; a large component is
//! compiled once and read from the cache afterwards.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use verdict::plugins::{
    CodeSource, Limits, Override, Registry, Runtime, VersionInfo, World, watch,
};
use verdict::wit::{status, types};

use crate::support::{
    NOW, app_input, example_plugin, install_by_rename, shared_cache, test_plugin, wait_until,
};

/// Compiling a JavaScript or Python component takes seconds.
const PATIENCE: Duration = Duration::from_secs(120);

/// Room for a language runtime in each instance.
fn roomy() -> Limits {
    Limits {
        call_timeout: Duration::from_millis(1000),
        memory_bytes: 128 << 20,
        output_bytes: 1 << 20,
    }
}

fn registry(dir: &std::path::Path, limits: Limits, settings: &[(&str, String)]) -> Arc<Registry> {
    let runtime = Runtime::new(&shared_cache(), limits).unwrap();
    let settings: BTreeMap<String, String> = settings
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    Arc::new(Registry::new(
        Arc::new(runtime),
        Some(dir.to_path_buf()),
        settings,
    ))
}

/// An app whose one container restarted 7 times, the last 20 minutes
/// ago: over the restart budget of 3 within the hour.
fn over_budget() -> status::AppInput {
    let mut input = app_input("web");
    let none = types::Resources {
        cpu_millis: None,
        memory_bytes: None,
    };
    input.app.expected_replicas = Some(1);
    input.app.workloads.push(types::Workload {
        kind: types::WorkloadKind::Deployment,
        namespace: "shop".into(),
        name: "web".into(),
        desired_replicas: 1,
        current_replicas: 1,
        ready_replicas: 1,
        available_replicas: 1,
        updated_replicas: 1,
        generation: 1,
        observed_generation: 1,
        paused: false,
        conditions: Vec::new(),
        labels: Vec::new(),
        annotations: Vec::new(),
        created_at: None,
    });
    input.app.pods.push(types::Pod {
        namespace: "shop".into(),
        name: "web-1".into(),
        node: Some("n1".into()),
        phase: types::PodPhase::Running,
        reason: None,
        message: None,
        conditions: Vec::new(),
        restart_policy: types::RestartPolicy::Always,
        created_at: Some(NOW - 3_600_000),
        started_at: Some(NOW - 3_600_000),
        deleting_since: None,
        finalizers: Vec::new(),
        containers: vec![types::Container {
            name: "web".into(),
            image: "web:1".into(),
            kind: types::ContainerKind::Main,
            ready: true,
            started: Some(true),
            restart_count: 7,
            state: types::ContainerState::Running(types::RunningState {
                started_at: Some(NOW - 1_200_000),
            }),
            last_state: Some(types::TerminatedState {
                exit_code: 1,
                signal: None,
                reason: Some("Error".into()),
                message: None,
                started_at: None,
                finished_at: Some(NOW - 1_200_000),
            }),
            limits: none,
            requests: none,
            usage: None,
        }],
        owner: Some(types::Owner {
            kind: "Deployment".into(),
            name: "web".into(),
        }),
        labels: Vec::new(),
        ip: None,
        usage: None,
    });
    input
}

/// What plugin `name` serves.
fn info_of(registry: &Registry, name: &str) -> VersionInfo {
    registry
        .get(name)
        .unwrap()
        .current()
        .unwrap()
        .info()
        .clone()
}

/// The verdict of the status plugin serving, and which plugin gave it.
fn judged(
    registry: &Registry,
    input: &status::AppInput,
) -> Result<(String, types::AppVerdict), String> {
    let slot = registry.policy(World::Status).map_err(|e| e.to_string())?;
    let answer = slot
        .call(|v| v.evaluate(&v.context(NOW), input))
        .map_err(|e| e.to_string())?;
    Ok((answer.version.info().name.clone(), answer.value))
}

#[test]
fn the_rule_in_three_languages_swaps_under_load_without_a_failed_call() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path(), roomy(), &[]);
    let path = dir.path().join("status.wasm");
    let bytes = |name: &str| std::fs::read(example_plugin(name)).unwrap();
    install_by_rename(&path, &bytes("restart-budget"));
    registry.reload();
    let input = over_budget();
    let (_, expected) = judged(&registry, &input).unwrap();
    assert_eq!(expected.stable, types::StableStatus::Degraded);
    assert_eq!(
        expected.stable_reason,
        "container web of pod web-1 restarted 7 times, over the budget of 3"
    );
    let _watcher = watch(
        Arc::clone(&registry),
        dir.path(),
        Duration::from_millis(100),
    )
    .unwrap();

    // Callers on three threads, all the time; every answer must be the
    // Rust policy's verdict, whichever language gives it.
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed, differed) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (registry, stop, input, expected) = (
                Arc::clone(&registry),
                Arc::clone(&stop),
                input.clone(),
                expected.clone(),
            );
            let (calls, failed, differed) = (
                Arc::clone(&calls),
                Arc::clone(&failed),
                Arc::clone(&differed),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    calls.fetch_add(1, Ordering::Relaxed);
                    match judged(&registry, &input) {
                        Err(error) => {
                            eprintln!("a call failed: {error}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((_, verdict)) if verdict != expected => {
                            differed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                    }
                }
            })
        })
        .collect();

    for name in ["restart-budget-js", "restart-budget-py", "restart-budget"] {
        let before = calls.load(Ordering::Relaxed);
        install_by_rename(&path, &bytes(name));
        let took = wait_until(PATIENCE, || {
            judged(&registry, &input).is_ok_and(|(serving, _)| serving == name)
        })
        .unwrap_or_else(|| panic!("{name} never served"));
        // Calls went on while it compiled.
        assert!(wait_until(PATIENCE, || calls.load(Ordering::Relaxed) > before + 10).is_some());
        let info = info_of(&registry, "status");
        println!(
            "{name}: serving {:.0} ms after the write ({:?}, {:.0} ms)",
            took.as_secs_f64() * 1e3,
            info.code,
            info.compile_ms
        );
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let calls = calls.load(Ordering::Relaxed);
    println!("{calls} calls across three swaps");
    assert!(calls > 100, "only {calls} calls");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "failed calls");
    assert_eq!(
        differed.load(Ordering::Relaxed),
        0,
        "verdicts differing by language"
    );
}

#[test]
fn a_policy_reaching_for_files_sockets_environment_and_clock_gets_nothing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    // A file that exists and is readable by the host.
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "the host's secret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = serde_json::json!({"port": port, "path": secret.path()}).to_string();
    let registry = registry(dir.path(), roomy(), &[("escape-py", settings)]);
    std::fs::copy(test_plugin("escape-py"), dir.path().join("escape-py.wasm")).unwrap();
    let report = registry.reload();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);

    let (_, verdict) = judged(&registry, &app_input("web")).unwrap();
    let found: serde_json::Value = serde_json::from_str(&verdict.stable_reason).unwrap();
    println!("{found:#}");
    for attempt in ["file", "listdir", "socket"] {
        assert!(
            found[attempt]["error"].is_string(),
            "{attempt} must fail, got {}",
            found[attempt]
        );
    }
    assert!(
        !verdict.stable_reason.contains("the host's secret"),
        "the file was read"
    );
    assert_eq!(
        found["environ"]["got"],
        serde_json::json!({}),
        "the environment is empty"
    );
    assert_eq!(
        found["time"]["got"],
        serde_json::json!(0.0),
        "the clock stands at zero"
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the policy reached the listener: {other:?}"),
    }
}

#[test]
fn each_plugin_s_own_limits_hold() {
    let dir = tempfile::tempdir().unwrap();
    // 8 MiB for every plugin: less than a JavaScript or Python engine
    // takes; the Python policy gets 64 MiB and a longer deadline of its own.
    let tight = Limits {
        memory_bytes: 8 << 20,
        ..roomy()
    };
    let own = Override {
        call_timeout_ms: Some(1500),
        memory_limit_mib: Some(64),
    };
    let runtime = Runtime::new(&shared_cache(), tight).unwrap();
    let registry = Registry::new(
        Arc::new(runtime),
        Some(dir.path().to_path_buf()),
        BTreeMap::new(),
    )
    .with_limits(BTreeMap::from([("py".to_string(), own.over(tight))]));
    std::fs::copy(
        example_plugin("restart-budget-js"),
        dir.path().join("js.wasm"),
    )
    .unwrap();
    std::fs::copy(
        example_plugin("restart-budget-py"),
        dir.path().join("py.wasm"),
    )
    .unwrap();
    std::fs::copy(
        example_plugin("restart-budget"),
        dir.path().join("rust.wasm"),
    )
    .unwrap();
    let report = registry.reload();

    let rejected: Vec<_> = report.rejected.iter().map(|r| r.plugin.as_str()).collect();
    assert_eq!(rejected, ["js"], "{:?}", report.rejected);
    let why = &report.rejected[0].error;
    assert!(why.contains("memory"), "{why}");
    let py = registry.get("py").unwrap().current().unwrap();
    assert_eq!(
        (py.info().memory_limit_mib, py.info().call_timeout_ms),
        (64, 1500)
    );
    let rust = registry.get("rust").unwrap().current().unwrap();
    assert_eq!(rust.info().memory_limit_mib, 8);
    let verdict = py.evaluate(&py.context(NOW), &over_budget()).unwrap();
    assert_eq!(verdict.stable, types::StableStatus::Degraded);
}

#[test]
fn a_large_component_compiles_once_and_loads_from_the_cache() {
    for name in ["restart-budget-js", "restart-budget-py"] {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(example_plugin(name), dir.path().join("status.wasm")).unwrap();
        let load = || {
            let runtime = Runtime::new(cache.path(), roomy()).unwrap();
            let registry = Registry::new(
                Arc::new(runtime),
                Some(dir.path().to_path_buf()),
                BTreeMap::new(),
            );
            let started = Instant::now();
            let report = registry.reload();
            assert!(report.rejected.is_empty(), "{:?}", report.rejected);
            let info = info_of(&registry, "status");
            (info, started.elapsed())
        };
        let (cold, cold_time) = load();
        let (warm, warm_time) = load();
        println!(
            "{name} ({} KiB): compiled in {:.0} ms (load {:.0} ms), from the cache {:.1} ms (load {:.0} ms)",
            std::fs::metadata(example_plugin(name)).unwrap().len() / 1024,
            cold.compile_ms,
            cold_time.as_secs_f64() * 1e3,
            warm.compile_ms,
            warm_time.as_secs_f64() * 1e3
        );
        assert_eq!(cold.code, CodeSource::Compiled);
        assert_eq!(warm.code, CodeSource::Cache);
        assert!(
            warm.compile_ms < cold.compile_ms,
            "reading the cache is faster than compiling"
        );
    }
}
