/**
 * `svc-dsr local` as the command line shows it: its options and help. Local mode's command: the
 * action runs the local package's (local/cli/local.ts) through tsx, so it costs the other commands nothing.
 */
import { type Command, Option } from 'commander';
import type { LocalFlags } from '../local-package.ts';
import { localCommands } from '../typescript.ts';

/** Registers `svc-dsr local`. */
export function registerLocalCommand(program: Command): void {
  program
    .command('local')
    .description(
      'run the whole workflow on this machine: platform emulator, local AWS stand-ins, the synthesized state machine',
    )
    .addOption(
      new Option(
        '--data-dir <dir>',
        'where the ledger, archives, audit records and execution histories are kept',
      )
        .env('SVC_DSR_DATA_DIR')
        .default('.svc-dsr'),
    )
    .option('--platform-state <file>', 'initial platform state for a new data dir (emulator state format)')
    .option('--faults <file>', 'platform fault profile (emulator fault format)')
    .option(
      '--aws-faults <file>',
      'throttle a seeded share of the local AWS calls: {"seed":1,"throttle_rate":0.05,"services":["dynamodb","s3","sqs","lambda","states"]}',
    )
    .option(
      '--requests <file>',
      'JSONL (one request per line; invalid lines are quarantined and reported), or a JSON file of one request or an array; - reads stdin',
    )
    .option('--json', 'print the run summary as JSON')
    .option('--serve', 'keep running so other commands reach it with --target local')
    .option('--wait-ms <ms>', 'how long each Wait state lasts locally', '10')
    .addOption(
      new Option(
        '--config <file>',
        'the stack configuration to run with: a cdk.json (its context "svc-dsr") or a JSON file of the settings object; default: cdk.json in the working directory, as cdk synth reads it',
      ).env('SVC_DSR_CONFIG'),
    )
    .option(
      '--time-zone <zone>',
      "the controller's IANA time zone deadlines are counted in, as the stack's timeZone (default UTC)",
    )
    .addHelpText(
      'after',
      `
Exit codes: 0 when every request reached a terminal status (whatever it is), 1 otherwise, 2 for bad input.

Examples:
  $ npx svc-dsr local --requests requests.jsonl --json
  $ npx svc-dsr local --serve --data-dir .svc-dsr     # then: npx svc-dsr list --target local`,
    )
    .action(async (flags: LocalFlags) => {
      process.exitCode = await (await localCommands()).runLocal(flags);
    });
}
