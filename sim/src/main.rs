//! `verdict-sim`: the Kubernetes API simulator as a program, loaded with
//! objects from files, for trying `kubectl` or a `kube` client against it.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;

fn usage() -> ExitCode {
    eprintln!(
        "usage: verdict-sim [--listen ADDR] [--scenario FILE.yaml] [--no-controller] [--no-kubevirt] [FILE.json ...]"
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut options = verdict_sim::Options {
        controller: Some(verdict_sim::CONTROLLER_TICK),
        kubevirt: true,
        ..verdict_sim::Options::default()
    };
    let mut files: Vec<PathBuf> = Vec::new();
    let mut scenario: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => match args.next().and_then(|a| a.parse().ok()) {
                Some(addr) => options.listen = addr,
                None => return usage(),
            },
            "--scenario" => match args.next() {
                Some(path) => scenario = Some(PathBuf::from(path)),
                None => return usage(),
            },
            "--no-controller" => options.controller = None,
            "--no-kubevirt" => options.kubevirt = false,
            "-h" | "--help" => return usage(),
            file => files.push(PathBuf::from(file)),
        }
    }
    let simulator = match verdict_sim::Simulator::start(options).await {
        Ok(simulator) => simulator,
        Err(error) => {
            eprintln!("verdict-sim: {error}");
            return ExitCode::FAILURE;
        }
    };
    for file in files {
        let loaded = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()));
        let objects = match loaded {
            Ok(Value::Array(items)) => items,
            Ok(object) => match object.get("items").and_then(Value::as_array) {
                Some(items) => items.clone(),
                None => vec![object],
            },
            Err(error) => {
                eprintln!("verdict-sim: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        };
        for object in objects {
            if let Err(error) = simulator.apply(object) {
                eprintln!("verdict-sim: {}: {error}", file.display());
                return ExitCode::from(2);
            }
        }
    }
    if let Some(path) = scenario {
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|text| verdict_sim::Scenario::parse(&text));
        match parsed {
            Ok(mut scenario) => {
                scenario.bind(&simulator.url());
                tokio::spawn(scenario.run(std::sync::Arc::clone(simulator.store())));
            }
            Err(error) => {
                eprintln!("verdict-sim: {}: {error}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    println!("verdict-sim listening on {}", simulator.url());
    let _ = tokio::signal::ctrl_c().await;
    ExitCode::SUCCESS
}
