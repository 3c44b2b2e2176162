// Build a JavaScript policy into a component with componentize-js:
//   node build.mjs SOURCE WIT-FOLDER WORLD OUT
// Every WASI feature is disabled, so the component imports only what its
// world imports from verdict (the host's log and the default rules).
import { cp, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';

const [source, witPath, worldName, out] = process.argv.slice(2);
if (!out) {
  console.error('usage: node build.mjs SOURCE WIT-FOLDER WORLD OUT');
  process.exit(2);
}
const target = resolve(out);
// The splicer reads its inputs from the working folder only: the source
// and the WIT are copied into a fresh one.
const work = await mkdtemp(join(tmpdir(), 'verdict-js-'));
try {
  await cp(resolve(source), join(work, 'policy.js'));
  await cp(resolve(witPath), join(work, 'wit'), { recursive: true });
  // Imported only now: the splicer takes the working folder as its root
  // when it loads.
  process.chdir(work);
  const { componentize } = await import('@bytecodealliance/componentize-js');
  const { component } = await componentize({
    sourcePath: 'policy.js',
    witPath: 'wit',
    worldName,
    disableFeatures: ['random', 'stdio', 'clocks', 'http', 'fetch-event'],
  });
  const partial = join(dirname(target), `.${basename(target)}.partial`);
  await writeFile(partial, component);
  await rename(partial, target);
} finally {
  await rm(work, { recursive: true, force: true });
}
