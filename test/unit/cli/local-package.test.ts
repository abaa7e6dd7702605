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
});
