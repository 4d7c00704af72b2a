// The E2B side of bench/e2b.sh: RUNS x (create -> commands.run('true') ->
// kill) and RUNS x commands.run('true') on one sandbox, through the real e2b
// SDK (tests/e2b/node_modules), against E2B_API_URL. Prints one JSON line of
// milliseconds per call.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const top = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const { Sandbox } = createRequire(path.join(top, 'tests/e2b/package.json'))('e2b');
const runs = Number(process.argv[2] || 20);
const template = process.argv[3] || 'base';

const cycle = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  const s = await Sandbox.create(template);
  await s.commands.run('true');
  await s.kill();
  cycle.push(performance.now() - t0);
}
const s = await Sandbox.create(template);
await s.commands.run('true');
const run = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  await s.commands.run('true');
  run.push(performance.now() - t0);
}
await s.kill();
console.log(JSON.stringify({ cycle, run }));
