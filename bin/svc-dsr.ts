import { Command, CommanderError } from 'commander';
import { registerEmulatorCommand } from './cli/emulator.ts';
import { CliError, EXIT } from './cli/io.ts';
import { registerStartCommand } from './cli/start.ts';

const program = new Command()
  .name('svc-dsr')
  .description('GDPR and CCPA data-subject requests for sites on the svc comment platform')
  .showHelpAfterError('(run with --help for usage and examples)')
  .exitOverride();

registerStartCommand(program);
registerEmulatorCommand(program);

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    // Commander has already printed its message; help and version are successes.
    process.exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  } else if (error instanceof CliError) {
    process.stderr.write(`svc-dsr: ${error.message}\n`);
    process.exitCode = error.exitCode;
  } else {
    process.stderr.write(`svc-dsr: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = EXIT.failed;
  }
}
