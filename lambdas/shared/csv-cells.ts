/**
 * The rule every CSV this product writes keeps: a cell a spreadsheet could run as a formula starts
 * with an apostrophe. The CLI's cells (bin/cli/format.ts) and the console's download use it alike.
 * No imports: the console's bundle takes it alone.
 */

/**
 * What a spreadsheet may take for the start of a formula once it has dropped leading white space
 * and invisible characters: = + - @ (and the minus sign U+2212), tab and carriage return.
 */
const FORMULA_START = /^[\p{White_Space}\p{Cf}]*[=+\-@\u2212\t\r]/u;

/**
 * True when a spreadsheet could read `text` as a formula: its first visible character, after NFKC
 * normalisation (which turns the full-width ＝ ＋ － ＠ and the small ﹦ ﹢ ﹣ ﹫ into = + - @), starts one.
 */
export function formulaLike(text: string): boolean {
  return FORMULA_START.test(text) || FORMULA_START.test(text.normalize('NFKC'));
}
