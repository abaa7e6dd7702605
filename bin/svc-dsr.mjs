#!/usr/bin/env node
// Launcher: runs the CLI compiled at install (dist/cli/, `npm run build:cli`) when it is current,
// else the TypeScript sources through tsx, saying why on one line. `--version` alone it answers
// itself, from package.json, compiled or not; `--help` alone, from the copy the build wrote.
import { compiledCli } from './compiled-cli.mjs';

const NODE_MAJOR = 24;
if (Number(process.versions.node.split('.')[0]) < NODE_MAJOR) {
  // An older Node on the PATH (a shell outside npm's scripts): `npm ci` installed Node 24 as a
  // development dependency (the registry's `node` package), so run this same command on it.
  const { spawn } = await import('node:child_process');
  const { existsSync } = await import('node:fs');
  const { fileURLToPath } = await import('node:url');
  const bundled = fileURLToPath(new URL('../node_modules/node/bin/node', import.meta.url));
  if (!existsSync(bundled)) {
    process.stderr.write(
      `svc-dsr needs Node.js ${NODE_MAJOR} or newer, and this is ${process.version}: run \`npm ci\` in the clone (it installs Node ${NODE_MAJOR} from the npm registry as a development dependency), or install Node ${NODE_MAJOR} (README.md)\n`,
    );
    process.exit(2);
  }
  const child = spawn(bundled, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    stdio: 'inherit',
  });
  // A signal sent to this process (a supervisor's SIGTERM) reaches the command that does the work.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => child.kill(signal));
  }
  child.on('error', (error) => {
    process.stderr.write(`svc-dsr: cannot start Node.js ${NODE_MAJOR} at ${bundled}: ${error.message}\n`);
    process.exit(2);
  });
  child.on('exit', (code, signal) => {
    const { signals } = process.getBuiltinModule('node:os').constants;
    process.exit(signal ? 128 + (signals[signal] ?? 0) : (code ?? 1));
  });
  // The child's handle keeps this process alive until it exits; nothing below runs here.
  await new Promise(() => {});
}
const { readFileSync, writeSync } = process.getBuiltinModule('node:fs');
const args = process.argv.slice(2);

/** Writes `text` to stdout at once, quietly when the reader has gone. */
function write(text) {
  try {
    writeSync(1, text);
  } catch (error) {
    // A full non-blocking pipe: the stream waits for room. A reader that left (EPIPE): nothing to
    // do. Anything else (a full disk) is said in one line, as the CLI says it.
    if (error?.code === 'EAGAIN') process.stdout.write(text);
    else if (error?.code !== 'EPIPE') {
      process.stderr.write(`svc-dsr: cannot write the output: ${error?.code ?? error}\n`);
      process.exitCode = 1;
    }
  }
}
/** The file's text, or undefined when it is not there. */
function readIfThere(url) {
  try {
    return readFileSync(url, 'utf8');
  } catch {
    return undefined;
  }
}
if (args.length === 1 && (args[0] === '--version' || args[0] === '-V')) {
  // What commander would print, without loading it or any of the CLI: scripts ask this often.
  const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  write(`${version}\n`);
} else {
  // V8's code cache on disk (Node 22.1+): a later run skips compiling the CLI's modules again.
  process.getBuiltinModule('node:module').enableCompileCache?.();
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const compiled = compiledCli();
  const bareHelp = args.length === 1 && (args[0] === '--help' || args[0] === '-h');
  // The copy of the top-level help the build wrote: what commander prints, without loading it
  // (a build from before the copy has none, and answers as it always did).
  const help = compiled.current && bareHelp ? readIfThere(compiled.help) : undefined;
  if (help !== undefined) {
    write(help);
  } else if (compiled.current) {
    await import(compiled.entry);
  } else {
    process.stderr.write(
      `svc-dsr: ${compiled.reason}: running the TypeScript sources through tsx, which starts slower; \`npm run build:cli\` compiles it\n`,
    );
    const { register } = await import('tsx/esm/api');
    register();
    await import('./svc-dsr.ts');
  }
}
