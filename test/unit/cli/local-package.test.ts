import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CliError, EXIT } from '../../../bin/cli/io.ts';
import { loadLocalCommands } from '../../../bin/cli/local-package.ts';

describe('loadLocalCommands', () => {
  it("loads the local package's commands when it is installed", async () => {
    // Act
    const commands = await loadLocalCommands();

    // Assert
    expect(typeof commands.runLocal).toBe('function');
    expect(typeof commands.emulatorCommand).toBe('function');
    expect(typeof commands.startCommand).toBe('function');
  });

  it('says how to install the package when it is not (exit 2)', async () => {
    // Act
    const loading = loadLocalCommands('@svc-dsr/not-installed/cli');

    // Assert
    const error = await loading.catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(CliError);
    expect(error).toMatchObject({ exitCode: EXIT.usage });
    expect((error as Error).message).toContain('@svc-dsr/not-installed');
    expect((error as Error).message).toContain('npm ci');
  });

  it("reports the package's CliErrors with their exit code, though their class is its own copy", async () => {
    // Arrange
    const apart = pathToFileURL(new URL('./fixtures/local-commands-apart.ts', import.meta.url).pathname).href;
    const commands = await loadLocalCommands(apart);

    // Act
    const usage = await commands
      .runLocal({ dataDir: '.svc-dsr', waitMs: 'x' })
      .catch((caught: unknown) => caught);
    const other = await commands
      .emulatorCommand({ host: '127.0.0.1', port: '0' })
      .catch((caught: unknown) => caught);

    // Assert
    expect(usage).toBeInstanceOf(CliError);
    expect(usage).toMatchObject({ message: '--wait-ms: must be a number', exitCode: EXIT.usage });
    expect(other).not.toBeInstanceOf(CliError);
    expect(other).toMatchObject({ message: 'the emulator failed' });
  });
});
