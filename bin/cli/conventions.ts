/**
 * What people expect of a command-line tool, over the whole program: `-o json|table|csv` as another
 * spelling of each command's own output flags, and bash and zsh completion generated from the
 * commands and options as registered.
 */
import type { Command } from 'commander';
import { CliError } from './exit.ts';

/** Commands whose `--format` is their output's (`submit --format` names its input's). */
const FORMAT_IS_OUTPUT = new Set(['report']);

/** The formats `-o` takes on a command: JSON where it has `--json`, CSV where `--format csv` is output. */
function outputFormats(command: Command): string[] {
  if (!command.options.some((option) => option.long === '--json')) return [];
  return FORMAT_IS_OUTPUT.has(command.name()) ? ['csv', 'json'] : ['table', 'json'];
}

/**
 * Adds `-o, --output <format>` to every command with `--json`, and turns it into that command's
 * own flags before its action runs: `-o json` is `--json`, `-o csv` is `--format csv`, `-o table`
 * is the default text.
 */
export function addOutputAlias(program: Command): void {
  for (const command of program.commands) {
    const formats = outputFormats(command);
    if (formats.length === 0) continue;
    command.option(
      '-o, --output <format>',
      `${formats.join(' or ')} (the same as ${formats.includes('csv') ? '--format' : '--json'})`,
    );
  }
  program.hook('preAction', async (_program, action) => {
    const output: unknown = action.opts().output;
    if (output === undefined) return;
    const formats = outputFormats(action);
    // Loaded when -o is given: a command starts without zod.
    const { z } = await import('zod');
    const parsed = z.enum(formats as [string, ...string[]]).safeParse(output);
    if (!parsed.success) {
      throw new CliError(
        `-o: must be ${formats.join(' or ')} for ${action.name()} (received ${JSON.stringify(output)})`,
      );
    }
    const format = parsed.data;
    if (format === 'json') action.setOptionValueWithSource('json', true, 'cli');
    else if (format === 'csv') action.setOptionValueWithSource('format', 'csv', 'cli');
    else if (action.opts().json === true) {
      throw new CliError('-o table and --json contradict each other; pass one of them');
    }
  });
}

interface CompletionCommand {
  readonly name: string;
  readonly options: string[];
}

function completionModel(program: Command): { commands: CompletionCommand[]; global: string[] } {
  const longs = (command: Command) =>
    command.options.flatMap((option) => [option.long, option.short]).filter((flag): flag is string => !!flag);
  return {
    commands: program.commands.map((command) => ({
      name: command.name(),
      options: [...longs(command), '--help'],
    })),
    global: ['--help', '--version'],
  };
}

/** A bash completion script: `source <(npx svc-dsr completion bash)`. */
export function bashCompletion(program: Command): string {
  const { commands, global } = completionModel(program);
  const cases = commands
    .map((command) => `    ${command.name}) opts="${command.options.join(' ')}" ;;`)
    .join('\n');
  return `# bash completion for svc-dsr: source <(npx svc-dsr completion bash)
_svc_dsr() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" command="" word opts
  for word in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case "$word" in -*) ;; *) command="$word"; break ;; esac
  done
  if [ -z "$command" ]; then
    COMPREPLY=( $(compgen -W "${commands.map((command) => command.name).join(' ')} ${global.join(' ')}" -- "$cur") )
    return
  fi
  case "$command" in
${cases}
    *) opts="" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$opts" -- "$cur") )
  else
    COMPREPLY=( $(compgen -f -- "$cur") )
  fi
}
complete -F _svc_dsr svc-dsr
`;
}

/** A zsh completion script: `source <(npx svc-dsr completion zsh)`. */
export function zshCompletion(program: Command): string {
  const { commands, global } = completionModel(program);
  const describe = (text: string) => text.replaceAll("'", "'\\''").replaceAll(':', '\\:');
  const list = program.commands
    .map((command) => `    '${command.name()}:${describe(command.description().split('\n')[0] ?? '')}'`)
    .join('\n');
  const cases = commands
    .map(
      (command) =>
        `    ${command.name}) _arguments '*:file:_files' ${command.options.map((flag) => `'${flag}'`).join(' ')} ;;`,
    )
    .join('\n');
  return `#compdef svc-dsr
# zsh completion for svc-dsr: source <(npx svc-dsr completion zsh)
_svc_dsr() {
  local -a commands
  commands=(
${list}
  )
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    compadd -- ${global.join(' ')}
    return
  fi
  case "\${words[2]}" in
${cases}
  esac
}
if [[ "$(whence -w compdef)" == *function* ]]; then compdef _svc_dsr svc-dsr; fi
`;
}

/** Registers `svc-dsr completion bash|zsh`; call it after every other command is registered. */
export function registerCompletionCommand(program: Command): void {
  program
    .command('completion')
    .description('print a bash or zsh completion script for svc-dsr')
    .argument('<shell>', 'bash or zsh')
    .addHelpText(
      'after',
      `
Examples:
  $ source <(npx svc-dsr completion bash)     # in ~/.bashrc
  $ source <(npx svc-dsr completion zsh)      # in ~/.zshrc, after compinit`,
    )
    .action(async (shell: string) => {
      const { z } = await import('zod');
      const parsed = z.enum(['bash', 'zsh'], { message: 'must be bash or zsh' }).safeParse(shell);
      if (!parsed.success)
        throw new CliError(`<shell>: must be bash or zsh (received ${JSON.stringify(shell)})`);
      process.stdout.write(parsed.data === 'bash' ? bashCompletion(program) : zshCompletion(program));
    });
}
