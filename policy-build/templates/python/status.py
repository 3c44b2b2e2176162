"""{{name}}: a status policy. The default rules' verdict (from the host),
and the owning team in the display: an application whose workload carries
the label ``team`` shows it after its status (``Running · team payments``).

WIT values in Python: records are dataclasses with snake_case fields, enums
are Python enums (``types.StableStatus.RUNNING``), options are a value or
None; raising ``Err("why")`` from ``evaluate`` answers an error for that
app, and ``evaluate_batch`` answers ``Ok(verdict)`` or ``Err(text)`` per app.
Run ``componentize-py -d wit -w status-policy bindings .`` to see every type.
"""

import json

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import defaults, host, types


# The settings this policy takes, each with a check of its value.
SETTINGS = {"team-label": lambda v: (isinstance(v, str) and v != "") or "a label name"}


def judge(ctx, app_input):
    settings = json.loads(ctx.settings or "{}")
    team_label = settings.get("team-label", "team")
    verdict = defaults.status(ctx, app_input)
    team = next(
        (l for w in app_input.app.workloads for l in w.labels if l.key == team_label),
        None,
    )
    if team is not None:
        verdict.display.text = f"{verdict.display.text} · team {team.value}"
    return verdict


class Status(exports.Status):
    def describe(self):
        return types.PluginInfo(
            name="{{name}}",
            version="0.1.0",
            description="The default status rules, with the owning team in the display.",
            settings_schema=None,
        )

    def evaluate(self, ctx, app_input):
        return judge(ctx, app_input)

    def evaluate_batch(self, ctx, inputs):
        answers = []
        for app_input in inputs:
            try:
                answers.append(Ok(judge(ctx, app_input)))
            except Exception as e:
                app = app_input.app.id
                host.log(types.LogLevel.WARN, f"{app.namespace}/{app.name}: {e}")
                answers.append(Err(str(e)))
        return answers
