"""Test plugin ``escape-py``: tries to read a file (``path`` of the
settings), list ``/``, read the environment, connect to 127.0.0.1 on
``port``, read the clock and write to stdout; answers the default verdict
with what each attempt got, as JSON, in ``stable_reason``."""

import json
import os
import socket
import sys
import time

from componentize_py_types import Ok
from wit_world import exports
from wit_world.imports import defaults, types


def attempt(f):
    try:
        return {"got": f()}
    except BaseException as e:  # anything at all is an answer here
        return {"error": f"{type(e).__name__}: {e}"}


def read_file(path):
    with open(path) as f:
        return f.read()


def connect(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(("127.0.0.1", port))
    s.sendall(b"hello")
    return "connected"


def escape(ctx, app_input):
    settings = json.loads(ctx.settings or "{}")
    print("escape-py writes to stdout")
    sys.stdout.flush()
    found = {
        "file": attempt(lambda: read_file(settings.get("path", "/etc/hostname"))),
        "listdir": attempt(lambda: os.listdir("/")),
        "environ": attempt(lambda: dict(os.environ)),
        "socket": attempt(lambda: connect(settings.get("port", 1))),
        "time": attempt(time.time),
    }
    verdict = defaults.status(ctx, app_input)
    verdict.stable_reason = json.dumps(found)
    return verdict


class Status(exports.Status):
    def describe(self):
        return types.PluginInfo(
            name="escape-py", version="0.1.0", description="Tries to leave its sandbox.",
            settings_schema=None,
        )

    def evaluate(self, ctx, app_input):
        return escape(ctx, app_input)

    def evaluate_batch(self, ctx, inputs):
        return [Ok(escape(ctx, i)) for i in inputs]


class Settings(exports.Settings):
    def validate(self, settings):
        return None
