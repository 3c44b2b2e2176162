//! The `verdict` binary: parses the command line, sets up logging, and runs
//! the host. All logic lives in the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// jemalloc returns freed memory to the system over time, where the system
/// allocator keeps what a watch's full list once needed.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
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
    /// Run the status policy over Kubernetes objects from files.
    Eval(verdict::offline::eval::EvalArgs),
    /// Run policy test cases; exits non-zero when any fails.
    Test(verdict::offline::test::TestArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The offline tools print their results on standard output; only
    // warnings belong beside them.
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        Command::Eval(_) | Command::Test(_) => "warn",
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
        Command::Serve(args) if args.print_config => args.into_config().map(|config| {
            print!("{}", config.effective());
        }),
        Command::Serve(args) => args.into_config().and_then(|config| {
            let runtime = tokio::runtime::Runtime::new().map_err(verdict::Error::AsyncRuntime)?;
            runtime.block_on(verdict::host::serve(config))
        }),
        Command::Eval(args) => verdict::offline::eval::run(&args).map(|out| print!("{out}")),
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
        Err(error) => {
            eprintln!("verdict: {error}");
            if error.is_usage() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
