// Shared source of the test plugins (included by each crate beside this
// folder, which sets `STAMP` and `ALWAYS`). A test plugin answers the status
// world, stamping every field it fills with `STAMP` so a test can tell which
// version answered, and misbehaves on purpose: always when `ALWAYS` names a
// way, otherwise when the application is named after one (`trap`, `spin`,
// `hog`, `oversize`, `garbage`). Its settings check refuses settings with a
// key `refuse` (a string), in the words of that string, and takes any other object.

wit_bindgen::generate!({
    world: "status-policy",
    path: "../../../wit",
});

use exports::verdict::policy::status::{AppInput, Guest};
use verdict::policy::host::log;
use verdict::policy::types::{
    AppVerdict, Context, Display, LogLevel, PluginInfo, Severity, StableStatus,
};

struct Unruly;

fn misbehave(way: &str) -> Option<String> {
    match way {
        "trap" => panic!("asked to trap"),
        "spin" => loop {
            core::hint::black_box(());
        },
        // Memory taken a megabyte at a time and never written: the limit
        // stops it within a few calls of the allocator, however busy the
        // machine (writing each megabyte made it race the call's deadline).
        "hog" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(Vec::with_capacity(1 << 20));
                core::hint::black_box(&hoard);
            }
        }
        "oversize" => Some("x".repeat(8 << 20)),
        _ => None,
    }
}

fn verdict_for(input: &AppInput) -> Result<AppVerdict, String> {
    let way = ALWAYS.unwrap_or(input.app.id.name.as_str());
    let filler = misbehave(way);
    Ok(AppVerdict {
        app: input.app.id.clone(),
        stable: StableStatus::Running,
        stable_reason: filler.unwrap_or_else(|| STAMP.to_string()),
        transitional: None,
        display: Display {
            status: STAMP.into(),
            text: STAMP.into(),
            severity: Severity::Ok,
            // A percentage above 100 is a malformed verdict.
            progress: (way == "garbage").then_some(200),
        },
        ready_replicas: 0,
        expected_replicas: 0,
        groups: Vec::new(),
        objects: Vec::new(),
        forced: None,
        recheck_after: None,
    })
}

impl Guest for Unruly {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: format!("unruly-{STAMP}"),
            version: STAMP.into(),
            description: "A test plugin that misbehaves on request.".into(),
            settings_schema: None,
        }
    }

    fn evaluate(_ctx: Context, input: AppInput) -> Result<AppVerdict, String> {
        log(LogLevel::Debug, &format!("evaluating {}", input.app.id.name));
        verdict_for(&input)
    }

    fn evaluate_batch(_ctx: Context, inputs: Vec<AppInput>) -> Vec<Result<AppVerdict, String>> {
        inputs.iter().map(verdict_for).collect()
    }
}

impl exports::verdict::policy::settings::Guest for Unruly {
    fn validate(settings: String) -> Result<(), String> {
        // The host hands compact JSON; a test plugin needs no parser.
        match settings.split_once(r#""refuse":""#) {
            Some((_, rest)) => Err(rest.split('"').next().unwrap_or_default().to_string()),
            None => Ok(()),
        }
    }
}

export!(Unruly);
