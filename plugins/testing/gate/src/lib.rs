//! Test plugin `gate`: an admission policy that allows everything, and
//! misbehaves when asked: a task whose params hold `"x-misbehave": "trap"` or
//! `"spin"`, or a reviewed object annotated `verdict.dev/misbehave`, makes
//! the call trap or spin until the host's deadline stops it.

// Built as a component of the package made before `settings` existed:
// the admission world without that export, so that the host is shown to
// serve such a component (and to say it checks no settings).
wit_bindgen::generate!({
    inline: "
        package verdict:gate;
        world admission-policy {
            import verdict:policy/host@0.4.0;
            export verdict:policy/admission@0.4.0;
        }
    ",
    path: "../../../wit",
    world: "verdict:gate/admission-policy",
    generate_all,
});

use exports::verdict::policy::admission::{
    AdmissionInput, Decision, Guest, ReviewInput, ReviewResponse, TaskAdmission,
};
use serde_json::Value;
use verdict::policy::types::{Context, PluginInfo};

fn misbehave(way: Option<&str>) {
    match way {
        Some("trap") => panic!("asked to trap"),
        Some("spin") => loop {
            core::hint::black_box(());
        },
        _ => {}
    }
}

struct Gate;

impl Guest for Gate {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "test-gate".into(),
            version: "1".into(),
            description: "Allows everything; misbehaves on request.".into(),
            settings_schema: None,
        }
    }

    fn admit_task(_ctx: Context, input: AdmissionInput) -> Result<TaskAdmission, String> {
        let params: Value = serde_json::from_str(&input.request.params).unwrap_or_default();
        misbehave(params.get("x-misbehave").and_then(Value::as_str));
        Ok(TaskAdmission {
            decision: Decision::Allow,
            defaults: "{}".into(),
            warnings: Vec::new(),
            plan: Vec::new(),
        })
    }

    fn review(_ctx: Context, input: ReviewInput) -> Result<ReviewResponse, String> {
        let request: Value = serde_json::from_str(&input.request).unwrap_or_default();
        misbehave(
            request
                .pointer("/object/metadata/annotations/verdict.dev~1misbehave")
                .and_then(Value::as_str),
        );
        Ok(ReviewResponse {
            allowed: true,
            code: None,
            message: None,
            patch: None,
            warnings: Vec::new(),
        })
    }
}

export!(Gate);
