/**
 * Loads the local package's commands (`local`, `emulator`, `start`: local/cli/) when one of them runs,
 * and says how to get the package when it is not installed.
 */
import { CliError, EXIT } from './io.ts';

/** The local package's entry for its commands. */
export const LOCAL_COMMANDS = '@svc-dsr/local/cli';

/** The flags of `local`, as commander parses them. */
export interface LocalFlags {
  dataDir: string;
  platformState?: string;
  faults?: string;
  awsFaults?: string;
  requests?: string;
  json?: boolean;
  serve?: boolean;
  waitMs: string;
  timeZone?: string;
  config?: string;
}

/** The flags of `emulator`, as commander parses them. */
export interface EmulatorFlags {
  host: string;
  port: string;
  state?: string;
  faults?: string;
  spotId?: string;
  ssoToken?: string;
  exportToken?: string;
}

/** The flags of `start`, as commander parses them. */
export interface StartFlags {
  dataDir: string;
}

/** What the local package's entry gives the operator CLI: each command's action. */
export interface LocalCommands {
  /** Runs local mode; resolves with the exit code. */
  runLocal(flags: LocalFlags): Promise<number>;
  /** Serves the platform emulator until the process is asked to stop. */
  emulatorCommand(flags: EmulatorFlags): Promise<void>;
  /** Runs the demonstration. */
  startCommand(flags: StartFlags): Promise<void>;
}

/** The local package's commands; exit 2, saying how to install the package, when it is missing. */
export async function loadLocalCommands(specifier: string = LOCAL_COMMANDS): Promise<LocalCommands> {
  let loaded: LocalCommands;
  try {
    loaded = (await import(specifier)) as LocalCommands;
  } catch (error) {
    if (!missing(error, specifier)) throw error;
    const name = packageName(specifier);
    throw new CliError(
      `this command runs local mode, which is in the package ${name} (local/ in the svc-dsr repository), and it is not installed: run \`npm ci\` at the root of the svc-dsr repository, which installs it beside the product as an npm workspace`,
      EXIT.usage,
    );
  }
  return {
    runLocal: (flags) => reported(() => loaded.runLocal(flags)),
    emulatorCommand: (flags) => reported(() => loaded.emulatorCommand(flags)),
    startCommand: (flags) => reported(() => loaded.startCommand(flags)),
  };
}

/**
 * Runs a command of the package, whose CliErrors are those of the io.ts it loads: a CLI built apart
 * from it has its own copy of the class, so they are carried over by name, message and exit code.
 */
async function reported<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (
      error instanceof Error &&
      !(error instanceof CliError) &&
      error.name === 'CliError' &&
      'exitCode' in error &&
      typeof error.exitCode === 'number'
    ) {
      throw new CliError(error.message, error.exitCode);
    }
    throw error;
  }
}

/** True when what failed to load is the package itself, not something inside it. */
function missing(error: unknown, specifier: string): boolean {
  return (
    error instanceof Error &&
    'code' in error &&
    error.code === 'ERR_MODULE_NOT_FOUND' &&
    // Node names the package, some loaders the whole specifier.
    (error.message.includes(`'${packageName(specifier)}'`) || error.message.includes(`'${specifier}'`))
  );
}

function packageName(specifier: string): string {
  return specifier.split('/').slice(0, 2).join('/');
}
