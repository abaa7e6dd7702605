/** Types of build-console.mjs (plain JavaScript, run by npm as part of `prepare`). */
export declare function buildConsole(outDir?: string): Promise<Record<string, number>>;
