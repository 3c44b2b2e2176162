"""{{name}}: a lifecycle policy. A running machine gets the set's
environment, then the deployment's code, then serves once its health check
passes; a new environment or code takes a serving instance back when the
rollout lets it; a failed task waits for a person, and the stage a person
sets is where it goes on from.

WIT values in Python: records are dataclasses with snake_case fields, enums
are Python enums, variants are one class per case (``Decision_Stay(why)``),
options are a value or None. Run
``componentize-py -d wit -w lifecycle-policy bindings .`` to see every type.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import lifecycle as l
from wit_world.imports import types


# The settings this policy takes, each with a check of its value.
SETTINGS = {"health-check": lambda v: type(v) is bool or "true or false"}


def task(name, params):
    return l.Task(name=name, params=json.dumps(params))


def go(stage, tasks, reason, environment=None, code=None):
    return l.Decision_Move(
        l.Transition(
            stage=stage,
            tasks=tasks,
            environment=environment,
            code=code,
            needs_approval=False,
            reason=reason,
        )
    )


def packages(environment):
    return [{"name": p.name, "version": p.version} for p in environment]


class Lifecycle(exports.Lifecycle):
    def describe(self):
        return types.PluginInfo(
            name="{{name}}",
            version="0.1.0",
            description="Environment, then code, then serving after a health check; a failed task waits for a person.",
            settings_schema=None,
        )

    def next(self, ctx, input):
        health_check = json.loads(ctx.settings or "{}").get("health-check", True)
        i, t = input.instance, input.target
        if i.forced is not None:
            return go(i.forced, [], "an operator set the stage")
        last = i.lists[0] if i.lists and i.lists[0].stage == i.stage else None
        if last is not None and last.outcome == l.Outcome.RUNNING:
            return l.Decision_Stay("a task runs")
        if last is not None and last.outcome == l.Outcome.FAILED and i.stage != l.Stage.FAILED:
            return go(l.Stage.FAILED, [], "a task failed: a person decides")

        def initialize():
            install = task("install-environment", {"packages": packages(t.environment)})
            return go(l.Stage.INITIALIZING, [install], "install the environment", environment=t.environment)

        def serve():
            check = [task("health-check", {})] if health_check else []
            return go(l.Stage.SERVING, check, "environment and code in place")

        if i.stage is None or i.stage == l.Stage.REQUESTED:
            if i.machine == l.Machine.RUNNING:
                return initialize()
            if i.stage is None:
                return go(l.Stage.REQUESTED, [], "a machine is requested")
            return l.Decision_Stay("waiting for the machine")
        if i.stage == l.Stage.INITIALIZING:
            if t.code is None:
                return serve()
            deploy = task("deploy-code", {"version": t.code})
            return go(l.Stage.DEPLOYING, [deploy], "deploy the code", code=t.code)
        if i.stage == l.Stage.DEPLOYING:
            return serve()
        if i.stage == l.Stage.SERVING:
            changed = packages(i.environment) != packages(t.environment) or (
                t.code is not None and i.code != t.code
            )
            if not changed:
                return l.Decision_Stay("serving")
            return initialize() if t.may_disrupt else l.Decision_Stay("a change waits for its turn")
        return l.Decision_Stay("a person decides")
