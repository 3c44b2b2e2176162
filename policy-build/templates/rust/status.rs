//! {{name}}: a status policy. The default rules' verdict, and the owning
//! team in the display: an application whose workload carries the label
//! `team` shows it after its status (`Running · team payments`).

use verdict_policy::prelude::*;

/// The settings (`ctx.settings`), each with its default; a key this type
/// does not name is refused before the policy serves.
#[derive(serde::Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
struct Settings {
    /// The label that names an application's team.
    team_label: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            team_label: "team".into(),
        }
    }
}

pub struct Policy;

impl StatusPolicy for Policy {
    fn describe() -> PluginInfo {
        info(
            "{{name}}",
            env!("CARGO_PKG_VERSION"),
            "The default status rules, with the owning team in the display.",
        )
    }

    fn validate_settings(settings: &str) -> Result<(), String> {
        check_settings::<Settings>(settings)
    }

    fn evaluate(ctx: &Context, input: &AppInput) -> Result<AppVerdict, String> {
        let settings: Settings = settings(ctx)?;
        let mut verdict = default_rules(ctx, input);
        let team = input
            .app
            .workloads
            .iter()
            .flat_map(|w| &w.labels)
            .find(|l| l.key == settings.team_label);
        if let Some(team) = team {
            verdict.display.text = format!("{} · team {}", verdict.display.text, team.value);
        }
        Ok(verdict)
    }
}

verdict_policy::status_policy!(Policy);

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_policy::testing::{app, container, ctx, pod};

    #[test]
    fn the_team_follows_the_status() {
        let input = app("shop", "web")
            .workload_label("team", "payments")
            .pod(pod("web-1").container(container("web")))
            .build();
        let verdict = Policy::evaluate(&ctx(0), &input).unwrap();
        assert_eq!(verdict.display.text, "Running · team payments");
    }
}
