def refusal(text, known):
    """What is wrong with the settings text ``text`` for a policy that takes
    the keys of ``known`` (each with a check that answers True, or what it
    wants), or None when they are right."""
    given = json.loads(text)
    if not isinstance(given, dict):
        return "the settings must be a JSON object"
    for key, value in given.items():
        if key not in known:
            names = ", ".join(f"`{k}`" for k in known)
            return f"unknown setting `{key}`: the known ones are {names}"
        wanted = known[key](value)
        if wanted is not True:
            return f"setting `{key}` must be {wanted}, not {json.dumps(value)}"
    return None


class Settings(exports.Settings):
    """Asked by the host before it serves the policy with settings (its
    configuration, a Policy's spec.settings, a case's settings): raising
    ``Err(text)`` refuses them, in words shown to whoever gave them."""

    def validate(self, settings):
        problem = refusal(settings, SETTINGS)
        if problem is not None:
            raise Err(problem)
