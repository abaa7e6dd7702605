import { type RunningEmulator, startEmulator } from '@svc-dsr/local/emulator';
import { loadFaultsFile } from '@svc-dsr/local/emulator/faults';
import { loadStateFile } from '@svc-dsr/local/emulator/state';
import type { Command } from 'commander';
import { CliError, EXIT, hostSchema, parseOption, portSchema } from './io.ts';

interface EmulatorFlags {
  host: string;
  port: string;
  state?: string;
  faults?: string;
  spotId?: string;
  ssoToken?: string;
  exportToken?: string;
}

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

export function registerEmulatorCommand(program: Command): void {
  program
    .command('emulator')
    .description('run the platform emulator: all eight endpoints of the platform API, with optional faults')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0 picks a free port)', '0')
    .option('--state <file>', 'initial platform state (JSON: spot_id, conversations, users, comments, votes)')
    .option('--faults <file>', 'fault profile (JSON: seed, error_rate, errors, ...)')
    .option('--spot-id <id>', 'account identifier (default: the state file, else sp_demo)')
    .option('--sso-token <token>', 'SSO access token to accept (default: random)')
    .option('--export-token <token>', 'export token to accept (default: random)')
    .addHelpText(
      'after',
      `
The first line on stdout is one JSON object: {"url", "spot_id", "sso_access_token", "export_token"}.
The url serves as base_url, export_url and activity_url; the control API lives under /_emulator/.

Example:
  $ npx svc-dsr emulator --port 4010 --state local/emulator/sample-state.json --faults examples/faults.json`,
    )
    .action(async (flags: EmulatorFlags) => {
      const emulator = await runEmulator(flags);
      process.stderr.write(`platform emulator listening on ${emulator.url} (Ctrl-C stops it)\n`);
      await untilStopped();
      await emulator.close();
    });
}
