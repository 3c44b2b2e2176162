"""{{name}}: an admission policy. Deleting an application in a namespace
labelled ``environment=production`` is denied; scaling above
``max-replicas`` (default 10) waits for a person's approval; the rest is
allowed. AdmissionReviews are all allowed.

WIT values in Python: records are dataclasses with snake_case fields, enums
are Python enums, variants are one class per case (``Decision_Deny(why)``),
options are a value or None. Run
``componentize-py -d wit -w admission-policy bindings .`` to see every type.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import admission as a
from wit_world.imports import types


# The settings this policy takes, each with a check of its value.
SETTINGS = {"max-replicas": lambda v: (type(v) is int and v >= 0) or "a whole number"}


class Admission(exports.Admission):
    def describe(self):
        return types.PluginInfo(
            name="{{name}}",
            version="0.1.0",
            description="No deletes in production; large scale-ups need approval.",
            settings_schema=None,
        )

    def admit_task(self, ctx, input):
        max_replicas = json.loads(ctx.settings or "{}").get("max-replicas", 10)
        labels = input.app.namespace_labels if input.app is not None else []
        production = any(l.key == "environment" and l.value == "production" for l in labels)
        # The app fields of the request's params, typed (seed 000's Task).
        replicas = input.request.spec.replicas or 0
        action = input.request.action
        if action == types.TaskAction.DELETE and production:
            decision = a.Decision_Deny("applications in production are not deleted")
        elif action == types.TaskAction.SCALE and replicas > max_replicas:
            decision = a.Decision_RequireApproval(f"{replicas} replicas is over {max_replicas}")
        else:
            decision = a.Decision_Allow()
        return a.TaskAdmission(decision=decision, defaults="{}", warnings=[], plan=[])

    def review(self, ctx, input):
        return a.ReviewResponse(allowed=True, code=None, message=None, patch=None, warnings=[])
