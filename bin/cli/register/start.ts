/**
 * `svc-dsr start` as the command line shows it: its options and help. Local mode's command: the
 * action runs bin/cli/start.ts through tsx (runTypeScript), so it costs the other commands nothing.
 */
import type { Command } from 'commander';
import { runTypeScript } from '../typescript.ts';

/** `npm start`: the whole workflow on this machine with sample data, shown as it runs. */
export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description(
      'run a demonstration: sample requests through the whole workflow, locally, with no AWS account',
    )
    .option('--data-dir <dir>', 'where to keep the demonstration (emptied first)', '.svc-dsr/demo')
    .action(async (flags: { dataDir: string }) => {
      const { runStart } = await runTypeScript<typeof import('../start.ts')>('bin/cli/start.ts');
      await runStart(flags);
    });
}
