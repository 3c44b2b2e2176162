// {{name}}: a lifecycle policy. A running machine gets the set's
// environment, then the deployment's code, then serves once its health
// check passes; a new environment or code takes a serving instance back
// when the rollout lets it; a failed task waits for a person, and the stage
// a person sets is where it goes on from.
//
// WIT values in JavaScript: records are objects with camelCase fields,
// enums are their WIT names as strings, variants are { tag, val } objects,
// options are a value or undefined, timestamps are BigInts.

// The settings this policy takes, each with a check of its value.
const SETTINGS = {
  'health-check': (v) => typeof v === 'boolean' || 'true or false',
};

function settingsOf(ctx) {
  const settings = JSON.parse(ctx.settings || '{}');
  return { healthCheck: settings['health-check'] ?? true };
}

const task = (name, params) => ({ name, params: JSON.stringify(params) });
const stay = (why) => ({ tag: 'stay', val: why });
const go = (stage, tasks, reason, changes = {}) => ({
  tag: 'move',
  val: {
    stage, tasks, environment: changes.environment, code: changes.code,
    needsApproval: false, reason,
  },
});

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

export const lifecycle = {
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      description: 'Environment, then code, then serving after a health check; a failed task waits for a person.',
      settingsSchema: undefined,
    };
  },
  next(ctx, input) {
    const { healthCheck } = settingsOf(ctx);
    const { instance: i, target: t } = input;
    if (i.forced !== undefined) return go(i.forced, [], 'an operator set the stage');
    const last = i.lists.length > 0 && i.lists[0].stage === i.stage ? i.lists[0] : undefined;
    if (last?.outcome === 'running') return stay('a task runs');
    if (last?.outcome === 'failed' && i.stage !== 'failed') {
      return go('failed', [], 'a task failed: a person decides');
    }
    const initialize = () => go(
      'initializing',
      [task('install-environment', { packages: t.environment })],
      'install the environment',
      { environment: t.environment },
    );
    const serve = () => go(
      'serving',
      healthCheck ? [task('health-check', {})] : [],
      'environment and code in place',
    );
    switch (i.stage) {
      case undefined:
      case 'requested':
        if (i.machine === 'running') return initialize();
        return i.stage === undefined ? go('requested', [], 'a machine is requested') : stay('waiting for the machine');
      case 'initializing':
        if (t.code === undefined) return serve();
        return go('deploying', [task('deploy-code', { version: t.code })], 'deploy the code', { code: t.code });
      case 'deploying':
        return serve();
      case 'serving': {
        const changed = !same(i.environment, t.environment) || (t.code !== undefined && i.code !== t.code);
        if (!changed) return stay('serving');
        return t.mayDisrupt ? initialize() : stay('a change waits for its turn');
      }
      default:
        return stay('a person decides');
    }
  },
};
