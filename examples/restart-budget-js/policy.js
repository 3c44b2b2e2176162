// The restart-budget rule of examples/restart-budget, in JavaScript: the
// default rules' verdict (from the host), then
// - restart budget: an application otherwise `running` is `degraded` while
//   one of its containers has restarted more than `max-restarts` times
//   (default 3) and last restarted within `budget-window-ms` (one hour);
// - maintenance: an application whose namespace or workload carries the
//   label example.dev/maintenance=true displays `Maintenance`, unless one
//   of its tasks is in flight.
// WIT values in JavaScript: records are objects with camelCase fields, enums
// are their WIT names as strings, options are a value or undefined, and
// 64-bit integers (timestamps) are BigInts.
import { status as defaultStatus } from 'verdict:policy/defaults@0.4.0';

const MAINTENANCE_LABEL = 'example.dev/maintenance';

function budgetOf(ctx) {
  const settings = JSON.parse(ctx.settings || '{}');
  return {
    maxRestarts: settings['max-restarts'] ?? 3,
    windowMs: BigInt(settings['budget-window-ms'] ?? 3600000),
  };
}

const labelled = (labels) =>
  labels.some((l) => l.key === MAINTENANCE_LABEL && l.value === 'true');

function judge(ctx, input) {
  const budget = budgetOf(ctx);
  const verdict = defaultStatus(ctx, input);

  if (verdict.stable === 'running') {
    for (const pod of input.app.pods) {
      const c = pod.containers.find(
        (c) =>
          c.kind === 'main' &&
          c.restartCount > budget.maxRestarts &&
          c.lastState?.finishedAt !== undefined &&
          ctx.now - c.lastState.finishedAt < budget.windowMs,
      );
      if (!c) continue;
      // The rule depends on time: ask to be asked again when the restart
      // leaves the window, or the app stays degraded until something else
      // about it changes.
      const leaves = c.lastState.finishedAt + budget.windowMs;
      verdict.recheckAfter =
        verdict.recheckAfter === undefined || leaves < verdict.recheckAfter
          ? leaves
          : verdict.recheckAfter;
      verdict.stable = 'degraded';
      verdict.stableReason =
        `container ${c.name} of pod ${pod.name} restarted ${c.restartCount} times, ` +
        `over the budget of ${budget.maxRestarts}`;
      if (verdict.transitional === undefined) {
        verdict.display = {
          status: 'degraded',
          text: `Degraded — ${verdict.stableReason}`,
          severity: 'warning',
          progress: undefined,
        };
      }
      break;
    }
  }

  const inMaintenance =
    labelled(input.app.namespaceLabels) ||
    input.app.workloads.some((w) => labelled(w.labels));
  if (inMaintenance && verdict.transitional === undefined) {
    verdict.display = {
      status: 'maintenance',
      text: 'Maintenance',
      severity: 'warning',
      progress: undefined,
    };
  }
  return verdict;
}

export const status = {
  describe() {
    return {
      name: 'restart-budget-js',
      version: '0.1.0',
      description: 'The default rules, plus a restart budget and a maintenance display (JavaScript).',
      settingsSchema: JSON.stringify({
        type: 'object',
        additionalProperties: false,
        properties: {
          'max-restarts': { type: 'integer', minimum: 0 },
          'budget-window-ms': { type: 'integer', minimum: 0 },
        },
      }),
    };
  },
  evaluate(ctx, input) {
    return judge(ctx, input);
  },
  evaluateBatch(ctx, inputs) {
    return inputs.map((input) => {
      try {
        return { tag: 'ok', val: judge(ctx, input) };
      } catch (e) {
        return { tag: 'err', val: String(e) };
      }
    });
  },
};

// Asked by the host before it serves the policy with settings: a thrown
// string refuses them, in words shown to whoever gave them.
export const settings = {
  validate(text) {
    const given = JSON.parse(text);
    for (const [key, value] of Object.entries(given)) {
      if (key !== 'max-restarts' && key !== 'budget-window-ms') {
        throw `unknown setting \`${key}\`: the known ones are \`max-restarts\`, \`budget-window-ms\``;
      }
      if (!Number.isInteger(value) || value < 0) {
        throw `setting \`${key}\` must be a whole number, not ${JSON.stringify(value)}`;
      }
    }
  },
};
