/**
 * Runs once before the tests: compiles the CLI into dist/cli/ when it is missing or older than its
 * sources, so the end-to-end tests run it as an installed CLI runs (bin/svc-dsr.mjs, compiled).
 */
import { buildCli } from '../bin/build-cli.mjs';
import { compiledCli } from '../bin/compiled-cli.mjs';

export default async function setup(): Promise<void> {
  if (!compiledCli().current) await buildCli();
}
