/**
 * Builds the privacy console (console/) with esbuild: console.js (preact and the pages, minified,
 * one ES module), console.css and index.html, into `outDir`. `npm run build:console`; npm runs it
 * as part of `prepare` (dist/console/, which the stack deploys), and local mode builds it into its
 * data dir at start, so that what it serves is always the sources' own.
 */
import { copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

const ROOT = new URL('..', import.meta.url);

/** Builds the console into `outDir`; returns its files' sizes in bytes, by name. */
export async function buildConsole(outDir = fileURLToPath(new URL('dist/console/', ROOT))) {
  const esbuild = await import('esbuild');
  await mkdir(outDir, { recursive: true });
  const result = await esbuild.build({
    absWorkingDir: fileURLToPath(ROOT),
    entryPoints: { console: 'console/src/main.tsx' },
    outdir: outDir,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    minify: true,
    metafile: true,
    legalComments: 'none',
    logLevel: 'warning',
    define: { 'process.env.NODE_ENV': '"production"' },
  });
  await esbuild.build({
    absWorkingDir: fileURLToPath(ROOT),
    entryPoints: { console: 'console/console.css' },
    outdir: outDir,
    bundle: true,
    minify: true,
    logLevel: 'warning',
  });
  await copyFile(fileURLToPath(new URL('console/index.html', ROOT)), `${outDir}/index.html`);
  return Object.fromEntries(
    Object.entries(result.metafile.outputs).map(([path, output]) => [path.split('/').at(-1), output.bytes]),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const sizes = await buildConsole();
  process.stderr.write(
    `svc-dsr: built the console into dist/console/ (console.js ${sizes['console.js']} bytes)\n`,
  );
}
