// The E2B side of bench/e2b.sh: RUNS x (create -> commands.run('true') ->
// kill) and RUNS x commands.run('true') on one sandbox, through the real e2b
// SDK (tests/e2b/node_modules), against E2B_API_URL; then ROUNDS rounds of 8
// such cycles at once. Prints one JSON line: milliseconds per call, and each
// round's sandboxes per second.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const top = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const { Sandbox } = createRequire(path.join(top, 'tests/e2b/package.json'))('e2b');
const runs = Number(process.argv[2] || 20);
const template = process.argv[3] || 'base';
const rounds = Number(process.argv[4] || 3);

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
const conc8 = [];
for (let r = 0; r < rounds; r++) {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: 8 }, async () => {
    const c = await Sandbox.create(template);
    await c.commands.run('true');
    await c.kill();
  }));
  conc8.push(8000 / (performance.now() - t0));
}
console.log(JSON.stringify({ cycle, run, conc8 }));
