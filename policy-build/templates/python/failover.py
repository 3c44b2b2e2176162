"""{{name}}: a failover policy. A node whose Ready condition is not true is
``suspect`` for ``grace-ms`` (default one minute) — wait — and ``unknown``
after it, with a person told; a ready node is healthy.

WIT values in Python: records are dataclasses with snake_case fields, enums
are Python enums, variants are one class per case (``Action_Wait(until)``),
options are a value or None. Run
``componentize-py -d wit -w failover-policy bindings .`` to see every type.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import failover as f
from wit_world.imports import types


# The settings this policy takes, each with a check of its value.
SETTINGS = {
    "grace-ms": lambda v: (type(v) is int and v >= 0) or "a whole number of milliseconds"
}


def decide_node(ctx, node, grace_ms):
    since = node.ready_since if node.ready_since is not None else ctx.now

    def decision(health, rule, reason, actions):
        return f.NodeDecision(
            node=node.name, health=health, since=since, reason=reason, rule=rule, actions=actions
        )

    if node.ready == types.ConditionStatus.TRUE:
        return decision(f.NodeHealth.HEALTHY, "ready", "the node is ready", [])
    until = since + grace_ms
    if ctx.now < until:
        wait = f.ProposedAction(
            action=f.Action_Wait(until), reason="within the grace period", needs_approval=False
        )
        return decision(f.NodeHealth.SUSPECT, "grace", "not ready, within the grace period", [wait])
    tell = f.ProposedAction(
        action=f.Action_Notify(f"node {node.name} is not ready"),
        reason="not ready past the grace period",
        needs_approval=False,
    )
    return decision(f.NodeHealth.UNKNOWN, "not-ready", "not ready past the grace period", [tell])


class Failover(exports.Failover):
    def describe(self):
        return types.PluginInfo(
            name="{{name}}",
            version="0.1.0",
            description="A node not ready past a grace period is unknown, and a person is told.",
            settings_schema=None,
        )

    def decide(self, ctx, input):
        grace_ms = json.loads(ctx.settings or "{}").get("grace-ms", 60_000)
        return [decide_node(ctx, node, grace_ms) for node in input.nodes]
