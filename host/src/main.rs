//! The `verdict` binary: parses the command line, sets up logging, and runs
//! the host. All logic lives in the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use tracing_subscriber::EnvFilter;

/// jemalloc returns freed memory to the system over time, where the system
/// allocator keeps what a watch's full list once needed.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(clap::Parser)]
#[command(
    name = "verdict",
    version,
    about = "Hot-swappable WebAssembly policies over a Kubernetes cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the plugins, watch their folder and serve the HTTP API.
    Serve(Box<verdict::config::ServeArgs>),
    /// Follow the verdicts of many clusters and serve one view of their
    /// apps, with tasks sent to the cluster each names.
    Fleet(Box<verdict::config::FleetArgs>),
    /// Run the status policy over Kubernetes objects from files.
    Eval(verdict::offline::eval::EvalArgs),
    /// Run policy test cases; exits non-zero when any fails.
    Test(verdict::offline::test::TestArgs),
    /// Compare two status policies over objects from files: where their
    /// verdicts differ (exits 1 when they do).
    Diff(verdict::offline::diff::DiffArgs),
    /// Push, pull and inspect policies as OCI artifacts.
    #[command(subcommand)]
    Policy(verdict::offline::policy::PolicyCommand),
    /// Make a policy project in Rust, JavaScript or Python: a starting
    /// rule, its cases, the WIT and a README of five steps.
    New(verdict::offline::project::NewArgs),
    /// Build a policy project into a component (`dist/NAME.wasm`).
    Build(verdict::offline::project::BuildArgs),
    /// Measure a status policy over objects from files: per-app latency,
    /// throughput, instance memory, load time cold and from the cache.
    Bench(verdict::offline::bench::BenchArgs),
    /// An app's status changes (or one instance's), from a running host:
    /// since when, why, what caused them, and its availability.
    History(verdict::remote::HistoryArgs),
    /// Print the CustomResourceDefinitions of verdict's resources (Task,
    /// Policy, VMReplicaSet, VMDeployment), generated from their types.
    Crds(verdict::offline::crds::CrdsArgs),
    /// The kubectl plugin (`kubectl verdict`, this binary named
    /// `kubectl-verdict`): apps, an app, a rollout's tree, people's actions.
    Kubectl(verdict::remote::kubectl::PluginCli),
}

/// Run as the kubectl plugin: `kubectl verdict ARGS` runs
/// `kubectl-verdict ARGS`.
fn plugin(args: Vec<std::ffi::OsString>) -> ExitCode {
    use clap::Parser as _;
    let cli = verdict::remote::kubectl::PluginCli::parse_from(args);
    kubectl(&cli)
}

fn kubectl(cli: &verdict::remote::kubectl::PluginCli) -> ExitCode {
    // The plugin says what failed in one line; the client's own log of
    // each failed request stays out of it.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("VERDICT_LOG")
                .unwrap_or_else(|_| EnvFilter::new("warn,kube_client=off")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match verdict::remote::kubectl::run(cli, &mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kubectl verdict: {error}");
            if error.is_usage() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Every file a serving host writes (its task store, history, journals,
/// cached policies) is its own to read: made 0600, folders 0700.
fn private_files() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

fn main() -> ExitCode {
    #[cfg(feature = "jemalloc")]
    verdict::memory::allocator_is_jemalloc();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if invoked.starts_with("kubectl-verdict") {
        return plugin(args);
    }
    if args.get(1).is_some_and(|a| a == "kubectl") {
        let mut rest = vec!["kubectl verdict".into()];
        rest.extend(args.into_iter().skip(2));
        return plugin(rest);
    }
    // `serve` reads its configuration file first: the file's values are
    // the defaults beneath the flags and the environment.
    let serving = args.get(1).is_some_and(|a| a == "serve");
    let file = match serving
        .then(|| verdict::config::FileConfig::named_by(&args[2..]))
        .transpose()
    {
        Ok(file) => file.flatten(),
        Err(error) => return fail(error),
    };
    let command = Cli::command();
    let serve = match verdict::config::serve_command(
        command
            .find_subcommand("serve")
            .cloned()
            .expect("serve is a subcommand"),
        file.as_ref(),
    ) {
        Ok(serve) => serve,
        Err(error) => return fail(error),
    };
    let matches = command
        .mut_subcommand("serve", |_| serve.clone())
        .mut_subcommand("fleet", verdict::config::fleet_command)
        .get_matches_from(&args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The offline tools print their results on standard output; only
    // warnings belong beside them.
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        // The fleet says once, per member, why it could not be followed;
        // the client's own line for each failed request would repeat it.
        Command::Fleet(_) => "info,kube_client::client::builder=off",
        Command::Eval(_)
        | Command::Test(_)
        | Command::Policy(_)
        | Command::Diff(_)
        | Command::New(_)
        | Command::Build(_)
        | Command::Bench(_)
        | Command::History(_)
        | Command::Kubectl(_)
        | Command::Crds(_) => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("VERDICT_LOG")
                .unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let outcome = match cli.command {
        Command::Serve(_) => {
            let serve_matches = matches
                .subcommand_matches("serve")
                .expect("the serve subcommand matched");
            verdict::config::Serve::from_matches(&serve, serve_matches, file.as_ref()).and_then(
                |served| {
                    if served.print_config {
                        print!("{}", served.effective);
                        return Ok(());
                    }
                    private_files();
                    let runtime =
                        tokio::runtime::Runtime::new().map_err(verdict::Error::AsyncRuntime)?;
                    runtime.block_on(verdict::host::serve(served.config))
                },
            )
        }
        Command::Fleet(args) => args.into_config().and_then(|config| {
            private_files();
            let runtime = tokio::runtime::Runtime::new().map_err(verdict::Error::AsyncRuntime)?;
            runtime.block_on(verdict::host::serve_fleet(config))
        }),
        Command::Eval(args) => verdict::offline::eval::run(&args).map(|out| print!("{out}")),
        Command::Diff(args) => match verdict::offline::diff::run(&args) {
            Ok(diff) => {
                print!("{}", diff.report);
                if diff.differ {
                    return ExitCode::FAILURE;
                }
                Ok(())
            }
            Err(error) => Err(error),
        },
        Command::Policy(command) => {
            verdict::offline::policy::run(&command).map(|out| print!("{out}"))
        }
        Command::Bench(args) => verdict::offline::bench::run(&args).map(|(_, out)| print!("{out}")),
        Command::History(args) => verdict::remote::history(&args).map(|out| print!("{out}")),
        Command::Crds(args) => verdict::offline::crds::run(&args).map(|out| print!("{out}")),
        // Taken above, before the host's own logging is set up.
        Command::Kubectl(cli) => return kubectl(&cli),
        Command::New(args) => verdict::offline::project::new(&args).map(|out| print!("{out}")),
        Command::Build(args) => verdict::offline::project::build(&args).map(|out| print!("{out}")),
        Command::Test(args) => match verdict::offline::test::run(&args) {
            Ok(outcome) => {
                print!("{}", outcome.report);
                if outcome.failed > 0 {
                    return ExitCode::FAILURE;
                }
                Ok(())
            }
            Err(error) => Err(error),
        },
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(error),
    }
}

/// Say what went wrong; a mistake of the user's exits with 2.
fn fail(error: verdict::Error) -> ExitCode {
    eprintln!("verdict: {error}");
    if error.is_usage() {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}
