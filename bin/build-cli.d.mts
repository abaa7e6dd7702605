/** Types of build-cli.mjs (plain JavaScript, run by npm as `prepare`). */
export declare function buildCli(root?: URL): Promise<number | undefined>;
