// {{name}}: a status policy. The default rules' verdict (from the host),
// and the owning team in the display: an application whose workload carries
// the label `team` shows it after its status (`Running · team payments`).
//
// WIT values in JavaScript: records are objects with camelCase fields,
// enums are their WIT names as strings ('running', 'warning'), options are
// a value or undefined, 64-bit integers (timestamps such as ctx.now) are
// BigInts. An exception that escapes a call traps it (the host keeps the
// app's last verdict): `evaluateBatch` catches one per app and answers it
// as that app's error.
import { status as defaultStatus } from 'verdict:policy/defaults@0.4.0';
import { log } from 'verdict:policy/host@0.4.0';

// The settings this policy takes, each with a check of its value.
const SETTINGS = {
  'team-label': (v) => (typeof v === 'string' && v !== '') || 'a label name',
};

function settingsOf(ctx) {
  const settings = JSON.parse(ctx.settings || '{}');
  return { teamLabel: settings['team-label'] ?? 'team' };
}

function judge(ctx, input) {
  const { teamLabel } = settingsOf(ctx);
  const verdict = defaultStatus(ctx, input);
  const team = input.app.workloads
    .flatMap((w) => w.labels)
    .find((l) => l.key === teamLabel);
  if (team) {
    verdict.display.text = `${verdict.display.text} · team ${team.value}`;
  }
  return verdict;
}

export const status = {
  describe() {
    return {
      name: '{{name}}',
      version: '0.1.0',
      description: 'The default status rules, with the owning team in the display.',
      settingsSchema: undefined,
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
        log('warn', `${input.app.id.namespace}/${input.app.id.name}: ${e}`);
        return { tag: 'err', val: String(e) };
      }
    });
  },
};
