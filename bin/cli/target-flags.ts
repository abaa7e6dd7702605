/**
 * The target flags every operator command takes (--target, --stack-outputs, --stack, --config,
 * --data-dir), as registered and as pasted back into hints. Light: the CLI registers them at start.
 */
import { type Command, Option } from 'commander';
import { shellWord } from './exit.ts';

/** The target flags every operator command takes. */
export interface TargetFlags {
  readonly target?: string;
  readonly stackOutputs?: string;
  readonly stack?: string;
  readonly config?: string;
  readonly dataDir?: string;
}

/** The default folder of a local mode's data. */
export const DEFAULT_DATA_DIR = '.svc-dsr';

/**
 * Adds `--target`, `--stack-outputs`, `--stack`, `--config` and `--data-dir` to a command; each may
 * instead come from its environment variable (SVC_DSR_TARGET, ...), a flag winning over it.
 */
export function addTargetOptions(command: Command): Command {
  return command
    .addOption(
      new Option(
        '--target <target>',
        'aws or local (default: aws with --stack-outputs/--config, else local)',
      ).env('SVC_DSR_TARGET'),
    )
    .addOption(
      new Option(
        '--stack-outputs <file>',
        'AWS: the JSON written by `npx cdk deploy --outputs-file <file>`',
      ).env('SVC_DSR_STACK_OUTPUTS'),
    )
    .addOption(
      new Option('--stack <name>', 'AWS: which stack of the outputs file (default: the only one)').env(
        'SVC_DSR_STACK',
      ),
    )
    .addOption(
      new Option('--config <file>', 'AWS: a JSON file with the output keys at the top level').env(
        'SVC_DSR_CONFIG',
      ),
    )
    .addOption(
      new Option('--data-dir <dir>', 'local: the folder of the serving local mode')
        .env('SVC_DSR_DATA_DIR')
        .default(DEFAULT_DATA_DIR),
    );
}

/**
 * The target flags as given (the default data dir left out), for hints that must work when pasted:
 * `npx svc-dsr retry <id>` plus these reaches the same ledger.
 */
export function targetArgs(flags: TargetFlags): string {
  const args: string[] = [];
  if (flags.target !== undefined) args.push('--target', flags.target);
  if (flags.stackOutputs !== undefined) args.push('--stack-outputs', flags.stackOutputs);
  if (flags.stack !== undefined) args.push('--stack', flags.stack);
  if (flags.config !== undefined) args.push('--config', flags.config);
  if (flags.dataDir !== undefined && flags.dataDir !== DEFAULT_DATA_DIR)
    args.push('--data-dir', flags.dataDir);
  return args.map((arg) => ` ${shellWord(arg)}`).join('');
}
