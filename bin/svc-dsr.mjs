#!/usr/bin/env node
// Launcher: runs the CLI compiled at install (dist/cli/, `npm run build:cli`) when it is current,
// else the TypeScript sources through tsx, saying why on one line.
import module from 'node:module';
import { compiledCli } from './compiled-cli.mjs';

const NODE_MAJOR = 24;
if (Number(process.versions.node.split('.')[0]) < NODE_MAJOR) {
  process.stderr.write(
    `svc-dsr needs Node.js ${NODE_MAJOR} or newer, and this is ${process.version}: install it, or take it from the npm registry with \`npm install --prefix ~/.cache/svc-dsr/node${NODE_MAJOR} node@${NODE_MAJOR}\` and put ~/.cache/svc-dsr/node${NODE_MAJOR}/node_modules/.bin first on the PATH (README.md)\n`,
  );
  process.exit(2);
}
// V8's code cache on disk (Node 22.1+): a later run skips compiling the CLI's modules again.
module.enableCompileCache?.();
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
const compiled = compiledCli();
if (compiled.current) {
  await import(compiled.entry);
} else {
  process.stderr.write(
    `svc-dsr: ${compiled.reason}: running the TypeScript sources through tsx, which starts slower; \`npm run build:cli\` compiles it\n`,
  );
  const { register } = await import('tsx/esm/api');
  register();
  await import('./svc-dsr.ts');
}
