import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { runEmulator, untilStopped } from './emulator.ts';

const SAMPLE_STATE = fileURLToPath(new URL('../../local/emulator/sample-state.json', import.meta.url));

/** `npm start`: the emulator with the sample platform state, and how to talk to it. */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('start the platform emulator with sample data and show how to use it')
    .option('--port <port>', 'port to listen on (0 picks a free port)', '0')
    .action(async (flags: { port: string }) => {
      const emulator = await runEmulator({ host: '127.0.0.1', port: flags.port, state: SAMPLE_STATE });
      const sso = emulator.ssoAccessToken;
      process.stderr.write(
        [
          '',
          `svc-dsr: the platform emulator is running at ${emulator.url} with the sample state.`,
          '',
          'Try it:',
          `  curl -s -H 'x-svc-sso-access-token: ${sso}' ${emulator.url}/sso/v1/user/u-alice`,
          `  curl -s -X POST ${emulator.url}/gdpr/export -H 'content-type: application/json' \\`,
          `       -d '{"access_token":"${emulator.exportToken}","spot_id":"${emulator.spotId}","user_id":"<svc_user_id>"}'`,
          `  curl -s ${emulator.url}/_emulator/users`,
          '',
          'The control API (reset, state, faults, calls) is described in docs/emulator.md.',
          'Ctrl-C stops it.',
          '',
        ].join('\n'),
      );
      await untilStopped();
      await emulator.close();
    });
}
