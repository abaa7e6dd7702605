/** Types of compiled-cli.mjs (plain JavaScript, run by the launcher before anything else). */
export declare const INPUTS_FILE: string;
export declare function compiledCli(
  root?: URL,
): { readonly current: true; readonly entry: string } | { readonly current: false; readonly reason: string };
