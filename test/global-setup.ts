/**
 * Runs once before the tests: refuses a Node older than the Lambdas' own (the suite would fail by
 * the hundred, each failure far from the cause), then compiles the CLI into dist/cli/ when it is
 * missing or older than its sources, so the end-to-end tests run it as an installed CLI runs
 * (bin/svc-dsr.mjs, compiled).
 */
import { buildCli } from '../bin/build-cli.mjs';
import { compiledCli } from '../bin/compiled-cli.mjs';

const NODE_MAJOR = 24;

export default async function setup(): Promise<void> {
  if (Number(process.versions.node.split('.')[0]) < NODE_MAJOR) {
    throw new Error(
      `the suite runs on Node.js ${NODE_MAJOR}, the Lambdas' own, and this is ${process.version}: run it through npm (\`npm test\`: \`npm ci\` installs Node ${NODE_MAJOR} as a development dependency and npm's scripts put it first on the PATH), or call \`npx vitest\` rather than a global vitest`,
    );
  }
  if (!compiledCli().current) await buildCli();
}
