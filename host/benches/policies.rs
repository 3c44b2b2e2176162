//! The default status rules three ways, in one run: compiled natively into
//! the host (`verdict::native`, the same Rust file as the plugin), as the
//! component through the host's Wasm runtime (one call per app, and batched
//! calls), and ported to Lua run with mlua. Over generated clusters of
//! 1 000, 10 000 and 100 000 pods in apps of 10 pods with a realistic mix
//! of states (`tests/all/mix.rs`). Reports the per-pod cost of each, the
//! ratios Wasm/native and Lua/Wasm, the time of a full re-derivation of the
//! cluster by the host (inputs built from its snapshot, evaluated, verdicts
//! stored), and memory.
//!
//! Run with `cargo xtask bench` (release profile); `--quick` for a short
//! run (1 000 and 10 000 pods, fewer rounds); `--pods 150000` for one size
//! of cluster (or several, separated by commas):
//! `cargo bench -p verdict --bench policies -- --pods 150000`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use verdict::observe::cluster::Observed;
use verdict::plugins::Limits;
use verdict::plugins::{Registry, Runtime, World};
use verdict::verdicts::live::{self, Verdicts};
use verdict::wit::status;

/// The host binary's allocator (`main.rs`): the host's own work is
/// measured as it runs.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[allow(dead_code)]
#[path = "../../tests/all/support.rs"]
mod support;

#[allow(dead_code)]
#[path = "../../tests/all/mix.rs"]
mod mix;

#[allow(dead_code)]
#[path = "../../tests/all/lua_rules.rs"]
mod lua_rules;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median of `rounds` runs of `f`, after one warm-up run.
fn timed(rounds: usize, mut f: impl FnMut()) -> Duration {
    f();
    median(
        (0..rounds)
            .map(|_| {
                let started = Instant::now();
                f();
                started.elapsed()
            })
            .collect(),
    )
}

fn ns_per(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e9 / n as f64
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn registry_over(dir: &Path, cache: &Path) -> Arc<Registry> {
    let limits = Limits {
        call_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let runtime = Runtime::new(cache, limits).unwrap();
    Arc::new(Registry::new(
        Arc::new(runtime),
        Some(dir.to_path_buf()),
        Default::default(),
    ))
}

/// The host's own view of a generated cluster: the observed snapshot the
/// deriver reads.
fn observed(inputs: &[status::AppInput]) -> Observed {
    let observed = Observed::new(verdict::observe::Grouping::default());
    {
        let mut snapshot = observed.snapshot();
        for node in mix::nodes() {
            snapshot.put_node(node);
        }
        let mut namespaces = std::collections::BTreeSet::new();
        for input in inputs {
            if namespaces.insert(input.app.id.namespace.clone()) {
                let namespace = k8s_openapi::api::core::v1::Namespace {
                    metadata: kube::api::ObjectMeta {
                        name: Some(input.app.id.namespace.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                snapshot.put_namespace(&namespace);
            }
            for workload in &input.app.workloads {
                snapshot.put_workload(workload.clone());
            }
            for pod in &input.app.pods {
                snapshot.put_pod(pod.clone());
            }
        }
    }
    observed
}

/// `inputs` with the first pod of every app crash-looping: each app's
/// verdict differs from its verdict over `inputs`.
fn crash_looping(inputs: &[status::AppInput]) -> Vec<status::AppInput> {
    let mut crashed = inputs.to_vec();
    for input in &mut crashed {
        let Some(pod) = input.app.pods.first_mut() else {
            continue;
        };
        for condition in &mut pod.conditions {
            if condition.kind == "Ready" || condition.kind == "ContainersReady" {
                condition.status = verdict::wit::types::ConditionStatus::False;
            }
        }
        for container in &mut pod.containers {
            container.ready = false;
            container.restart_count += 1;
            container.state =
                verdict::wit::types::ContainerState::Waiting(verdict::wit::types::WaitingState {
                    reason: Some("CrashLoopBackOff".into()),
                    message: Some("back-off 5m0s restarting failed container".into()),
                });
        }
    }
    crashed
}

/// What a run of changing re-derivations cost, and what the history made
/// of them.
struct Changing {
    /// The median time of one re-derivation.
    derive: Duration,
    /// Changes the history wrote (entries and flaps folded into them).
    written: u64,
    /// Records the history lost.
    lost: u64,
    /// From the last re-derivation until the history had written all.
    drained: Duration,
}

/// Re-derivations back to back in which every app's verdict changes (its
/// first pod starts crash-looping, then runs again: a crash loop in every
/// app at once), each publishing its verdicts' changes as the host does;
/// with `history`, the history records them into its database as the host
/// does, on its own task, while the next re-derivations run.
fn changing_derivations(
    inputs: &[status::AppInput],
    registry: &Registry,
    rounds: usize,
    history: bool,
) -> Changing {
    use verdict::events::Events;
    use verdict::history::History;
    let states = [
        Arc::new(observed(inputs)),
        Arc::new(observed(&crash_looping(inputs))),
    ];
    let verdicts = Arc::new(Verdicts::default());
    let events = Arc::new(Events::new(1024));
    let data = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let history = history.then(|| {
        let history = Arc::new(History::open(
            &data.path().join("history.db"),
            verdict::history::Settings::default(),
        ));
        let overrides =
            verdict::overrides::Overrides::open(&data.path().join("overrides.db"), None, |_| {})
                .unwrap();
        let live = live::Live {
            observed: Arc::clone(&states[0]),
            verdicts: Arc::clone(&verdicts),
            overrides: Arc::new(overrides),
            stale_after: Duration::from_secs(60),
        };
        let tap = events.tap(verdict::history::TAP);
        runtime.spawn(Arc::clone(&history).record_forever(tap, live));
        history
    });
    let derive = |round: usize| {
        live::derive(
            &states[round % 2],
            registry,
            &verdicts,
            &live::Beside::default(),
            Some(&events),
            true,
        );
    };
    // Warm-up: the first verdicts, and the first change of each.
    derive(0);
    derive(1);
    let published = events.published();
    let times: Vec<Duration> = (0..rounds)
        .map(|round| {
            let started = Instant::now();
            derive(round);
            started.elapsed()
        })
        .collect();
    assert_eq!(
        events.published() - published,
        (rounds * inputs.len()) as u64,
        "every app's verdict changed in every round"
    );
    let ended = Instant::now();
    let (mut written, mut lost, mut drained) = (0, 0, Duration::ZERO);
    if let Some(history) = &history {
        // Done when nothing waits and no change was written for a second
        // (the recorder takes whatever its queue holds at once).
        let mut last_change = Instant::now();
        loop {
            let health = history.health();
            if health.changes + health.folded != written || health.lost != lost {
                (written, lost) = (health.changes + health.folded, health.lost);
                last_change = Instant::now();
                drained = ended.elapsed();
            }
            if health.pending == 0 && last_change.elapsed() > Duration::from_secs(1) {
                break;
            }
            assert!(
                ended.elapsed() < Duration::from_secs(600),
                "the history never caught up: {health:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Changing {
        derive: median(times),
        written,
        lost,
        drained,
    }
}

struct Row {
    pods: usize,
    native: f64,
    single: f64,
    batched: f64,
    lua: f64,
    derive: Duration,
    /// Re-derivations in which every verdict changes, without and with
    /// the history recording them.
    changing: [Changing; 2],
}

/// A full re-derivation of everything observed, as after a policy swap.
fn derive_all(observed: &Observed, registry: &Registry, verdicts: &Verdicts) {
    live::derive(
        observed,
        registry,
        verdicts,
        &live::Beside::default(),
        None,
        true,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--pods N,M`: those sizes only (multiples of 10).
    let chosen: Option<Vec<usize>> =
        std::env::args()
            .skip_while(|a| a != "--pods")
            .nth(1)
            .map(|list| {
                list.split(',')
                    .map(|n| n.trim().parse().expect("--pods takes numbers"))
                    .collect()
            });
    let sizes: &[usize] = match &chosen {
        Some(sizes) => sizes,
        None if quick => &[1_000, 10_000],
        None => &[1_000, 10_000, 100_000],
    };
    let rounds = if quick { 3 } else { 7 };
    println!(
        "verdict policy benchmark ({} mode, {} rounds, medians)",
        if quick { "quick" } else { "full" },
        rounds
    );
    println!();

    let plugins = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::copy(
        support::default_plugin("status"),
        plugins.path().join("status.wasm"),
    )
    .unwrap();
    let registry = registry_over(plugins.path(), cache.path());
    registry.reload();
    let slot = registry.policy(World::Status).unwrap();
    let settings = verdict::native::Settings::parse("{}");
    let lua = lua_rules::LuaRules::new();

    // `--profile`: only batched Wasm calls over 10 000 pods, for a while,
    // for a profiler to look at.
    if std::env::args().any(|a| a == "--profile") {
        let inputs = mix::cluster(1_000, 10);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            for batch in inputs.chunks(verdict::verdicts::BATCH) {
                let answer = slot
                    .call(|v| v.evaluate_batch(&v.context(mix::NOW), batch))
                    .unwrap();
                std::hint::black_box(answer.value);
            }
        }
        return;
    }

    // `--profile-derive`: only full re-derivations of 100 000 pods by the
    // host, for a while, for a profiler to look at.
    if std::env::args().any(|a| a == "--profile-derive") {
        let inputs = mix::cluster(10_000, 10);
        let observed = observed(&inputs);
        let verdicts = Verdicts::default();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            derive_all(&observed, &registry, &verdicts);
        }
        return;
    }

    // `--parts`: a batched call's parts, each timed natively over 10 000
    // pods: the host encoding the inputs, the plugin decoding them, the
    // rules, the plugin encoding the answers, the host decoding them.
    if std::env::args().any(|a| a == "--parts") {
        let inputs = mix::cluster(1_000, 10);
        let batches: Vec<&[status::AppInput]> = inputs.chunks(verdict::verdicts::BATCH).collect();
        let encoded: Vec<Vec<u8>> = batches
            .iter()
            .map(|b| postcard::to_allocvec(b).unwrap())
            .collect();
        let answers: Vec<Vec<_>> = batches
            .iter()
            .map(|b| {
                b.iter()
                    .map(|i| Ok::<_, String>(verdict::native::evaluate(&settings, mix::NOW, i)))
                    .collect()
            })
            .collect();
        let answered: Vec<Vec<u8>> = answers
            .iter()
            .map(|a| postcard::to_allocvec(a).unwrap())
            .collect();
        let pods = inputs.len() * 10;
        let bytes = |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>() / pods;
        let part = |name: &str, f: &mut dyn FnMut()| {
            println!("{name}: {:.0} ns a pod", ns_per(timed(7, f), pods));
        };
        println!(
            "inputs {} B a pod, answers {} B a pod",
            bytes(&encoded),
            bytes(&answered)
        );
        part("encode inputs", &mut || {
            for b in &batches {
                std::hint::black_box(postcard::to_allocvec(b).unwrap());
            }
        });
        part("decode inputs", &mut || {
            for e in &encoded {
                std::hint::black_box(postcard::from_bytes::<Vec<status::AppInput>>(e).unwrap());
            }
        });
        part("rules", &mut || {
            for input in &inputs {
                std::hint::black_box(verdict::native::evaluate(&settings, mix::NOW, input));
            }
        });
        part("encode answers", &mut || {
            for a in &answers {
                std::hint::black_box(postcard::to_allocvec(a).unwrap());
            }
        });
        part("decode answers", &mut || {
            for a in &answered {
                std::hint::black_box(
                    postcard::from_bytes::<Vec<Result<verdict::wit::types::AppVerdict, String>>>(a)
                        .unwrap(),
                );
            }
        });
        return;
    }

    if std::env::args().any(|a| a == "--scaling") {
        let inputs = mix::cluster(1_000, 10);
        let batches: Vec<&[status::AppInput]> = inputs.chunks(verdict::verdicts::BATCH).collect();
        for threads in [1, 2] {
            let started = Instant::now();
            std::thread::scope(|scope| {
                for t in 0..threads {
                    let (slot, batches) = (&slot, &batches);
                    scope.spawn(move || {
                        for _ in 0..5 {
                            for batch in batches.iter().skip(t).step_by(threads) {
                                let answer = slot
                                    .call(|v| v.evaluate_batch(&v.context(mix::NOW), batch))
                                    .unwrap();
                                std::hint::black_box(answer.value);
                            }
                        }
                    });
                }
            });
            println!("{threads} thread(s): {}", ms(started.elapsed() / 5));
        }
        let started = Instant::now();
        std::thread::scope(|scope| {
            for t in 0..2 {
                let (settings, inputs) = (&settings, &inputs);
                scope.spawn(move || {
                    for _ in 0..5 {
                        for input in inputs.iter().skip(t).step_by(2) {
                            std::hint::black_box(verdict::native::evaluate(
                                settings,
                                mix::NOW,
                                input,
                            ));
                        }
                    }
                });
            }
        });
        println!("native, 2 threads: {}", ms(started.elapsed() / 5));
        return;
    }

    let mut rows = Vec::new();
    for &pods in sizes {
        let inputs = mix::cluster(pods / 10, 10);
        let now = mix::NOW;

        let native = timed(rounds, || {
            for input in &inputs {
                std::hint::black_box(verdict::native::evaluate(&settings, now, input));
            }
        });
        let single = timed(rounds, || {
            for input in &inputs {
                let answer = slot.call(|v| v.evaluate(&v.context(now), input)).unwrap();
                std::hint::black_box(answer.value);
            }
        });
        let batched = timed(rounds, || {
            for batch in inputs.chunks(verdict::verdicts::BATCH) {
                let answer = slot
                    .call(|v| v.evaluate_batch(&v.context(now), batch))
                    .unwrap();
                std::hint::black_box(answer.value);
            }
        });
        let lua_time = timed(rounds.min(3), || {
            for input in &inputs {
                std::hint::black_box(lua.evaluate(now, input));
            }
        });

        // The host re-deriving everything from its snapshot.
        let observed = observed(&inputs);
        let verdicts = Verdicts::default();
        let derive = timed(rounds, || derive_all(&observed, &registry, &verdicts));
        assert_eq!(verdicts.count(), inputs.len(), "every app derived");
        let changing =
            [false, true].map(|history| changing_derivations(&inputs, &registry, rounds, history));
        rows.push(Row {
            pods,
            native: ns_per(native, pods),
            single: ns_per(single, pods),
            batched: ns_per(batched, pods),
            lua: ns_per(lua_time, pods),
            derive,
            changing,
        });
    }

    println!("Per pod (apps of 10 pods; ns per pod, the app's evaluation divided by its pods):");
    println!();
    println!(
        "| pods | native | Wasm, one call per app | Wasm, batches of {} | Lua (mlua) | Wasm batched / native | Lua / Wasm batched |",
        verdict::verdicts::BATCH
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} ns | {:.0} ns | {:.0} ns | {:.0} ns | {:.2}× | {:.1}× |",
            r.pods,
            r.native,
            r.single,
            r.batched,
            r.lua,
            r.batched / r.native,
            r.lua / r.batched
        );
    }
    println!();
    println!(
        "Full re-derivation by the host (inputs from the snapshot, evaluation, verdicts stored):"
    );
    println!();
    println!("| pods | apps | time | per pod |");
    println!("|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} ns |",
            r.pods,
            r.pods / 10,
            ms(r.derive),
            ns_per(r.derive, r.pods)
        );
    }
    println!();
    println!(
        "Re-derivations in which every app's verdict changes (a crash loop in every app at once, then over), back to back, their changes published; without and with the history recording them (SQLite, WAL, synced) on its own task meanwhile:"
    );
    println!();
    println!(
        "| pods | apps | history off | history on | on / off | changes written (folded included) | lost | history done after the last |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let [off, on] = &r.changing;
        println!(
            "| {} | {} | {} | {} | {:.2}× | {} | {} | {} |",
            r.pods,
            r.pods / 10,
            ms(off.derive),
            ms(on.derive),
            on.derive.as_secs_f64() / off.derive.as_secs_f64(),
            on.written,
            on.lost,
            ms(on.drained)
        );
    }
    println!();
    let (rss, peak) = support::memory(std::process::id());
    println!("| memory | figure |");
    println!("|---|---|");
    println!(
        "| Lua state after the runs | {:.1} MiB |",
        lua.used_memory() as f64 / (1 << 20) as f64
    );
    println!("| process resident now / peak | {rss:.0} MiB / {peak:.0} MiB |");
}
