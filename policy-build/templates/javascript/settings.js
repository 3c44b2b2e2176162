// What is wrong with the settings text `text` for a policy that takes the
// keys of `known` (each with a check that answers true, or what it wants),
// or nothing when they are right.
function refusal(text, known) {
  const given = JSON.parse(text);
  if (typeof given !== 'object' || given === null || Array.isArray(given)) {
    return 'the settings must be a JSON object';
  }
  for (const [key, value] of Object.entries(given)) {
    const wanted = key in known ? known[key](value) : null;
    if (wanted === null) {
      const names = Object.keys(known).map((k) => `\`${k}\``).join(', ');
      return `unknown setting \`${key}\`: the known ones are ${names}`;
    }
    if (wanted !== true) {
      return `setting \`${key}\` must be ${wanted}, not ${JSON.stringify(value)}`;
    }
  }
  return undefined;
}

// Asked by the host before it serves the policy with settings (its
// configuration, a Policy's spec.settings, a case's settings): a thrown
// string is the refusal, shown to whoever gave them.
export const settings = {
  validate(text) {
    const problem = refusal(text, SETTINGS);
    if (problem !== undefined) throw problem;
  },
};
