/**
 * Compiles the operator CLI (bin/svc-dsr.ts) into dist/cli/ with esbuild: ES modules for Node 20,
 * its dependencies bundled, split so that each command is a chunk of its own, loaded when that
 * command runs. `npm run build:cli`; npm runs it as `prepare` after `npm ci` and `npm install`.
 * The sources it read are listed in dist/cli/inputs.json, which the launcher compares with them.
 * Without esbuild (an install without devDependencies) it builds nothing and the CLI runs from the
 * sources through tsx.
 */
import { spawnSync } from 'node:child_process';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { builtinModules, createRequire } from 'node:module';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HELP_FILE, INPUTS_FILE } from './compiled-cli.mjs';

/**
 * Node's modules that the bundle loads only when a function of theirs is called: child_process,
 * which commander requires at its start for the executable subcommands svc-dsr does not have,
 * costs more to load than all of commander.
 */
const LOADED_WHEN_CALLED = new Set(['child_process']);

/**
 * Node's own modules taken with `process.getBuiltinModule` rather than an `import`. Node answers an
 * import of one of its modules with an ES module facade that reads every export once, and that
 * loads what the module only loads when asked: `import { readFileSync } from 'node:fs'` loads
 * fs.ReadStream, the streams and fs/promises with it, a third of what `--help` costs.
 */
const nodeBuiltins = {
  name: 'node-builtins',
  setup(build) {
    const names = new Set(builtinModules.filter((name) => !name.startsWith('_')));
    build.onResolve({ filter: /^[a-z_/:]+$/ }, (args) => {
      const name = args.path.replace(/^node:/, '');
      if (!names.has(name)) return undefined;
      if (
        args.kind === 'import-statement' ||
        args.kind === 'dynamic-import' ||
        (args.kind === 'require-call' && LOADED_WHEN_CALLED.has(name))
      ) {
        // One small module per importer, so it lands in the importer's chunk: shared, it would
        // be a chunk of its own, one more file for every command to load.
        return { path: `${name}|${args.importer}`, namespace: 'node-builtin' };
      }
      return undefined;
    });
    build.onLoad({ filter: /.*/, namespace: 'node-builtin' }, (args) => {
      const name = args.path.slice(0, args.path.indexOf('|'));
      const take = `process.getBuiltinModule(${JSON.stringify(`node:${name}`)})`;
      if (!LOADED_WHEN_CALLED.has(name)) return { contents: `module.exports = ${take};`, loader: 'js' };
      // Each export a getter, so the module loads when one is first used.
      const exports = Object.keys(createRequire(import.meta.url)(`node:${name}`));
      return {
        contents: `let m; const load = () => (m ??= ${take});\n${exports
          .map(
            (key) =>
              `Object.defineProperty(exports, ${JSON.stringify(key)}, { enumerable: true, get: () => load()[${JSON.stringify(key)}] });`,
          )
          .join('\n')}`,
        loader: 'js',
      };
    });
  },
};

/** Builds dist/cli/ under `root`; returns how many files it wrote, or undefined without esbuild. */
export async function buildCli(root = new URL('..', import.meta.url)) {
  let esbuild;
  try {
    esbuild = await import('esbuild');
  } catch {
    return undefined;
  }
  const rootPath = fileURLToPath(root);
  const startedMs = Date.now();
  const staging = new URL(`dist/cli.${process.pid}.tmp/`, root);
  await rm(staging, { recursive: true, force: true });
  const result = await esbuild.build({
    absWorkingDir: rootPath,
    entryPoints: { 'svc-dsr': 'bin/svc-dsr.ts' },
    outdir: fileURLToPath(staging),
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // The SDK's ES module builds, which leave out what a command does not use.
    mainFields: ['module', 'main'],
    // Loaded only by local, emulator and start, which run TypeScript (bin/cli/typescript.ts).
    external: ['tsx', 'tsx/*'],
    // Bundled CommonJS packages (commander, parts of the SDK) require Node's own modules.
    banner: {
      js: "import { createRequire as __svcDsrRequire } from 'node:module'; const require = __svcDsrRequire(import.meta.url);",
    },
    chunkNames: 'chunk-[hash]',
    metafile: true,
    logLevel: 'warning',
    // Smaller chunks parse faster; names kept, so an error's class name reads as written.
    minify: true,
    keepNames: true,
    plugins: [nodeBuiltins],
  });
  // The package's own sources it read, and what stands for the dependencies it bundled.
  const sources = Object.keys(result.metafile.inputs).filter(
    (input) => !input.includes('node_modules/') && !input.startsWith('node-builtin:'),
  );
  const inputs = [...new Set([...sources, 'package.json', 'package-lock.json'])].map((input) =>
    relative(rootPath, fileURLToPath(new URL(input, root))),
  );
  // Which modules each output holds and loads, for the test that keeps --version and --help light.
  await writeFile(new URL('meta.json', staging), JSON.stringify(result.metafile));
  // The top-level help, as commander prints it to a pipe (80 columns): the launcher prints this
  // copy for a bare `--help`, without loading the CLI. It names no setting of the machine.
  const noDefaults = new URL('no-defaults.json', staging);
  await writeFile(noDefaults, '{}\n');
  const help = spawnSync(process.execPath, [fileURLToPath(new URL('svc-dsr.js', staging)), '--help'], {
    cwd: rootPath,
    encoding: 'utf8',
    env: { ...process.env, SVC_DSR_CLI_CONFIG: fileURLToPath(noDefaults) },
  });
  await rm(noDefaults);
  if (help.status !== 0 || help.stdout === '') {
    throw new Error(`the compiled CLI did not print its help (exit ${help.status}): ${help.stderr}`);
  }
  await writeFile(new URL(HELP_FILE.replace('dist/cli/', ''), staging), help.stdout);
  await writeFile(
    new URL('inputs.json', staging),
    `${JSON.stringify({ started_ms: startedMs, inputs }, null, 2)}\n`,
  );
  const target = new URL('dist/cli/', root);
  const old = new URL(`dist/cli.${process.pid}.old/`, root);
  await mkdir(new URL('dist/', root), { recursive: true });
  await rename(target, old).catch(() => {});
  await rename(staging, target);
  await rm(old, { recursive: true, force: true });
  return Object.keys(result.metafile.outputs).length;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const written = await buildCli();
  process.stderr.write(
    written === undefined
      ? 'svc-dsr: esbuild is not installed, so the CLI is not compiled; it runs from the TypeScript sources\n'
      : `svc-dsr: compiled the CLI into ${INPUTS_FILE.replace('/inputs.json', '/')} (${written} files)\n`,
  );
}
