// {{name}}: an admission policy. Deleting an application in a namespace
// labelled environment=production is denied; scaling above `max-replicas`
// (default 10) waits for a person's approval; the rest is allowed.
// AdmissionReviews are all allowed.
//
// WIT values in JavaScript: records are objects with camelCase fields,
// enums are their WIT names as strings, variants are { tag, val } objects,
// options are a value or undefined.

// The settings this policy takes, each with a check of its value.
const SETTINGS = {
  'max-replicas': (v) => (Number.isInteger(v) && v >= 0) || 'a whole number',
};

function settingsOf(ctx) {
  const settings = JSON.parse(ctx.settings || '{}');
  return { maxReplicas: settings['max-replicas'] ?? 10 };
}

export const admission = {
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      description: 'No deletes in production; large scale-ups need approval.',
      settingsSchema: undefined,
    };
  },
  admitTask(ctx, input) {
    const { maxReplicas } = settingsOf(ctx);
    const production = (input.app?.namespaceLabels ?? []).some(
      (l) => l.key === 'environment' && l.value === 'production',
    );
    // The app fields of the request's params, typed (seed 000's Task).
    const replicas = input.request.spec.replicas ?? 0;
    let decision = { tag: 'allow' };
    if (input.request.action === 'delete' && production) {
      decision = { tag: 'deny', val: 'applications in production are not deleted' };
    } else if (input.request.action === 'scale' && replicas > maxReplicas) {
      decision = { tag: 'require-approval', val: `${replicas} replicas is over ${maxReplicas}` };
    }
    return { decision, defaults: '{}', warnings: [], plan: [] };
  },
  review(ctx, input) {
    return { allowed: true, code: undefined, message: undefined, patch: undefined, warnings: [] };
  },
};
