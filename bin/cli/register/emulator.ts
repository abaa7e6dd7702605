/**
 * `svc-dsr emulator` as the command line shows it: its options and help. Local mode's command: the
 * action runs the local package's (local/cli/emulator.ts) through tsx, so it costs the other commands nothing.
 */
import type { Command } from 'commander';
import type { EmulatorFlags } from '../local-package.ts';
import { localCommands } from '../typescript.ts';

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
      await (await localCommands()).emulatorCommand(flags);
    });
}
