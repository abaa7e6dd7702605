/**
 * The operator CLI's entry: registers every command (their options and help only) and runs the one
 * asked for. A command's module loads when its action runs, so `--version`, `--help` and each
 * command load only what they use. bin/svc-dsr.mjs runs this compiled (dist/cli/, `npm run
 * build:cli`), or through tsx where it has not been compiled.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { CALLERS, setDefaultCaller } from '#shared/call-recorder';
import { addOutputAlias, registerCompletionCommand } from './cli/conventions.ts';
import { applyDefaultsFile } from './cli/defaults-file.ts';
import { EXIT, isCliError, writeQuietlyToClosedPipes } from './cli/exit.ts';
import { registerCancelCommand } from './cli/register/cancel.ts';
import { registerDenyCommand } from './cli/register/deny.ts';
import { registerEmulatorCommand } from './cli/register/emulator.ts';
import { registerExtendCommand } from './cli/register/extend.ts';
import { registerListCommand } from './cli/register/list.ts';
import { registerLocalCommand } from './cli/register/local.ts';
import { registerNoticeCommand } from './cli/register/notice.ts';
import { registerPackageCommand } from './cli/register/package.ts';
import { registerReportCommand } from './cli/register/report.ts';
import { registerRetryCommand } from './cli/register/retry.ts';
import { registerStartCommand } from './cli/register/start.ts';
import { registerStatusCommand } from './cli/register/status.ts';
import { registerSubmitCommand } from './cli/register/submit.ts';
import { registerVerifyCommand } from './cli/register/verify.ts';
import { PACKAGE_ROOT } from './cli/typescript.ts';

// Every AWS call this process makes is the operator's, but for local mode's (local/cli/local.ts).
setDefaultCaller(CALLERS.cli);
// `svc-dsr list | head -2`: when the reader goes away, go on quietly rather than with a stack trace.
writeQuietlyToClosedPipes();

const { version } = JSON.parse(readFileSync(new URL('package.json', PACKAGE_ROOT), 'utf8')) as {
  version: string;
};

const program = new Command()
  .name('svc-dsr')
  .version(version, '-V, --version', 'print the version')
  .description('GDPR and CCPA data-subject requests for sites on the svc comment platform')
  .showHelpAfterError('(run with --help for usage and examples)')
  .exitOverride()
  .addHelpText(
    'after',
    `
The operator commands (submit ... report) work against a serving local mode (the default:
--target local, --data-dir .svc-dsr) or a deployed stack (--target aws with --stack-outputs FILE
from \`npx cdk deploy --outputs-file FILE\`, or --config FILE). SVC_DSR_TARGET, SVC_DSR_DATA_DIR,
SVC_DSR_STACK_OUTPUTS, SVC_DSR_STACK and SVC_DSR_CONFIG stand in for those flags; a flag wins.
A defaults file (SVC_DSR_CLI_CONFIG, else ./.svc-dsr.json, else ~/.config/svc-dsr/config.json) with
target, data_dir, stack_outputs, stack and config stands in for the variables; they win over it.

-o json|table|csv is another spelling of a command's --json or --format.
Shell completion: source <(npx svc-dsr completion bash), or zsh.

Exit codes: 0 ok, 1 the operation failed or the request is not in the state asked, 2 invalid input.`,
  );

// Running things locally.
registerStartCommand(program);
registerEmulatorCommand(program);
registerLocalCommand(program);

// Operator commands: the same code against a deployed stack or a serving local mode.
registerSubmitCommand(program);
registerStatusCommand(program);
registerListCommand(program);
registerCancelCommand(program);
registerDenyCommand(program);
registerExtendCommand(program);
registerNoticeCommand(program);
registerRetryCommand(program);
registerPackageCommand(program);
registerVerifyCommand(program);
registerReportCommand(program);
// Over every command above: `-o json|table|csv`, and shell completion from the commands as registered.
addOutputAlias(program);
registerCompletionCommand(program);

try {
  // The defaults file stands in for the environment variables the options read: before parsing.
  await applyDefaultsFile();
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander has already printed its message; help and version are successes.
    process.exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  } else if (isCliError(error)) {
    process.stderr.write(`svc-dsr: ${error.message}\n`);
    process.exitCode = error.exitCode;
  } else {
    process.stderr.write(`svc-dsr: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = EXIT.failed;
  }
}
