import { CliError, EXIT, hostSchema, parseOption, portSchema } from '../../bin/cli/io.ts';
import type { EmulatorFlags } from '../../bin/cli/local-package.ts';
import { loadFaultsFile } from '../emulator/faults.ts';
import { type RunningEmulator, startEmulator } from '../emulator/server.ts';
import { loadStateFile } from '../emulator/state.ts';

/** Starts the emulator from CLI flags and prints its connection line as the first line of stdout. */
export async function runEmulator(flags: EmulatorFlags): Promise<RunningEmulator> {
  const host = parseOption('--host', hostSchema, flags.host);
  const port = parseOption('--port', portSchema, flags.port);
  const state =
    flags.state === undefined ? undefined : await loadInput(() => loadStateFile(flags.state ?? ''));
  const faults =
    flags.faults === undefined ? undefined : await loadInput(() => loadFaultsFile(flags.faults ?? ''));
  const emulator = await startEmulator({
    host,
    port,
    ...(state ? { state } : {}),
    ...(faults ? { faults } : {}),
    ...(flags.spotId ? { spotId: flags.spotId } : {}),
    ...(flags.ssoToken ? { ssoAccessToken: flags.ssoToken } : {}),
    ...(flags.exportToken ? { exportToken: flags.exportToken } : {}),
  }).catch((error: unknown) => {
    const code = error instanceof Error && 'code' in error ? error.code : undefined;
    if (code === 'EADDRINUSE') {
      throw new CliError(
        `--port: ${host}:${port} is already in use by another program; pick another --port, or --port 0 for any free one`,
        EXIT.failed,
      );
    }
    if (code === 'EADDRNOTAVAIL' || code === 'EACCES') {
      throw new CliError(
        `--host/--port: cannot listen on ${host}:${port} (${code}); check the address and port`,
      );
    }
    throw error;
  });
  process.stdout.write(
    `${JSON.stringify({
      url: emulator.url,
      spot_id: emulator.spotId,
      sso_access_token: emulator.ssoAccessToken,
      export_token: emulator.exportToken,
      // Listed only when there are several, so a one-site line stays as it was.
      ...(emulator.sites.length > 1
        ? {
            sites: emulator.sites.map((site) => ({
              spot_id: site.spotId,
              sso_access_token: site.ssoAccessToken,
              export_token: site.exportToken,
            })),
          }
        : {}),
    })}\n`,
  );
  return emulator;
}

async function loadInput<T>(load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (error) {
    throw new CliError(error instanceof Error ? error.message : String(error));
  }
}

/** Resolves when the process is asked to stop (Ctrl-C or SIGTERM). */
export function untilStopped(): Promise<string> {
  return new Promise((resolve) => {
    const stop = (signal: string) => resolve(signal);
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

/** The `emulator` command: serves until the process is asked to stop. */
export async function emulatorCommand(flags: EmulatorFlags): Promise<void> {
  const emulator = await runEmulator(flags);
  process.stderr.write(`platform emulator listening on ${emulator.url} (Ctrl-C stops it)\n`);
  await untilStopped();
  await emulator.close();
}
