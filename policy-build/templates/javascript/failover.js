// {{name}}: a failover policy. A node whose Ready condition is not true is
// `suspect` for `grace-ms` (default one minute) — wait — and `unknown`
// after it, with a person told; a ready node is healthy.
//
// WIT values in JavaScript: records are objects with camelCase fields,
// enums are their WIT names as strings, variants are { tag, val } objects,
// options are a value or undefined, timestamps are BigInts.

// The settings this policy takes, each with a check of its value.
const SETTINGS = {
  'grace-ms': (v) => (Number.isInteger(v) && v >= 0) || 'a whole number of milliseconds',
};

function settingsOf(ctx) {
  const settings = JSON.parse(ctx.settings || '{}');
  return { graceMs: BigInt(settings['grace-ms'] ?? 60000) };
}

function decideNode(ctx, node, graceMs) {
  const since = node.readySince ?? ctx.now;
  const decision = (health, rule, reason, actions) => ({
    node: node.name, health, since, reason, rule, actions,
  });
  if (node.ready === 'true') {
    return decision('healthy', 'ready', 'the node is ready', []);
  }
  const until = since + graceMs;
  if (ctx.now < until) {
    return decision('suspect', 'grace', 'not ready, within the grace period', [
      { action: { tag: 'wait', val: until }, reason: 'within the grace period', needsApproval: false },
    ]);
  }
  return decision('unknown', 'not-ready', 'not ready past the grace period', [
    {
      action: { tag: 'notify', val: `node ${node.name} is not ready` },
      reason: 'not ready past the grace period',
      needsApproval: false,
    },
  ]);
}

export const failover = {
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      description: 'A node not ready past a grace period is unknown, and a person is told.',
      settingsSchema: undefined,
    };
  },
  decide(ctx, input) {
    const { graceMs } = settingsOf(ctx);
    return input.nodes.map((node) => decideNode(ctx, node, graceMs));
  },
};
