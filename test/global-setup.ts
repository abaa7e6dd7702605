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
      `the suite runs on Node.js ${NODE_MAJOR}, the Lambdas' own, and this is ${process.version}: take it from the npm registry with \`npm install --prefix ~/.cache/svc-dsr/node${NODE_MAJOR} node@${NODE_MAJOR}\`, put ~/.cache/svc-dsr/node${NODE_MAJOR}/node_modules/.bin first on the PATH and run npm test again (README.md; .ci/run does this)`,
    );
  }
  if (!compiledCli().current) await buildCli();
}
