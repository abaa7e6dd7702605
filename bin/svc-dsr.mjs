#!/usr/bin/env node
// Launcher: runs the CLI compiled at install (dist/cli/, `npm run build:cli`) when it is current,
// else the TypeScript sources through tsx, saying why on one line.
import { compiledCli } from './compiled-cli.mjs';

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
