/**
 * The `local`, `emulator` and `start` commands as the operator CLI (bin/svc-dsr.ts) runs them: it
 * defines their flags and loads this entry (`@svc-dsr/local/cli`) only when one of them runs.
 */
import type { LocalCommands } from '../../bin/cli/local-package.ts';
import { emulatorCommand as emulator } from './emulator.ts';
import { runLocal as local } from './local.ts';
import { startCommand as start } from './start.ts';

export const { runLocal, emulatorCommand, startCommand }: LocalCommands = {
  runLocal: (flags) => local(flags),
  emulatorCommand: emulator,
  startCommand: start,
};
