"""The restart-budget rule of examples/restart-budget, in Python: the
default rules' verdict (from the host), then

- restart budget: an application otherwise ``running`` is ``degraded``
  while one of its containers has restarted more than ``max-restarts``
  times (default 3) and last restarted within ``budget-window-ms`` (one
  hour);
- maintenance: an application whose namespace or workload carries the label
  ``example.dev/maintenance=true`` displays ``Maintenance``, unless one of
  its tasks is in flight.

WIT values in Python: records are dataclasses with snake_case fields, enums
are Python enums, options are a value or None, results in lists are
``Ok(value)`` or ``Err(text)``.
"""

import json

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.imports import defaults, types

MAINTENANCE_LABEL = "example.dev/maintenance"


def labelled(labels):
    return any(l.key == MAINTENANCE_LABEL and l.value == "true" for l in labels)


def judge(ctx, app_input):
    settings = json.loads(ctx.settings or "{}")
    max_restarts = settings.get("max-restarts", 3)
    window = settings.get("budget-window-ms", 3_600_000)
    verdict = defaults.status(ctx, app_input)

    if verdict.stable == types.StableStatus.RUNNING:
        over = next(
            (
                (pod, c)
                for pod in app_input.app.pods
                for c in pod.containers
                if c.kind == types.ContainerKind.MAIN
                and c.restart_count > max_restarts
                and c.last_state is not None
                and c.last_state.finished_at is not None
                and ctx.now - c.last_state.finished_at < window
            ),
            None,
        )
        if over is not None:
            pod, c = over
            # The rule depends on time: ask to be asked again when the
            # restart leaves the window, or the app stays degraded until
            # something else about it changes.
            leaves = c.last_state.finished_at + window
            if verdict.recheck_after is None or leaves < verdict.recheck_after:
                verdict.recheck_after = leaves
            verdict.stable = types.StableStatus.DEGRADED
            verdict.stable_reason = (
                f"container {c.name} of pod {pod.name} restarted {c.restart_count} times, "
                f"over the budget of {max_restarts}"
            )
            if verdict.transitional is None:
                verdict.display = types.Display(
                    status="degraded",
                    text=f"Degraded — {verdict.stable_reason}",
                    severity=types.Severity.WARNING,
                    progress=None,
                )

    in_maintenance = labelled(app_input.app.namespace_labels) or any(
        labelled(w.labels) for w in app_input.app.workloads
    )
    if in_maintenance and verdict.transitional is None:
        verdict.display = types.Display(
            status="maintenance",
            text="Maintenance",
            severity=types.Severity.WARNING,
            progress=None,
        )
    return verdict


class Status(exports.Status):
    def describe(self):
        return types.PluginInfo(
            name="restart-budget-py",
            version="0.1.0",
            description="The default rules, plus a restart budget and a maintenance display (Python).",
            settings_schema=json.dumps(
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "max-restarts": {"type": "integer", "minimum": 0},
                        "budget-window-ms": {"type": "integer", "minimum": 0},
                    },
                }
            ),
        )

    def evaluate(self, ctx, app_input):
        return judge(ctx, app_input)

    def evaluate_batch(self, ctx, inputs):
        answers = []
        for app_input in inputs:
            try:
                answers.append(Ok(judge(ctx, app_input)))
            except Exception as e:  # one app's failure is that app's answer
                answers.append(Err(str(e)))
        return answers


class Settings(exports.Settings):
    """Asked by the host before it serves the policy with settings: raising
    ``Err(text)`` refuses them, in words shown to whoever gave them."""

    def validate(self, settings):
        for key, value in json.loads(settings).items():
            if key not in ("max-restarts", "budget-window-ms"):
                raise Err(
                    f"unknown setting `{key}`: the known ones are "
                    "`max-restarts`, `budget-window-ms`"
                )
            if type(value) is not int or value < 0:
                raise Err(f"setting `{key}` must be a whole number, not {json.dumps(value)}")
