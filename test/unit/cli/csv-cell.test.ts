import { describe, expect, it } from 'vitest';
import { csvCell, csvRow } from '../../../bin/cli/format.ts';

describe('csvCell', () => {
  it.each([
    ['=1+1', "'=1+1"],
    ['+1', "'+1"],
    ['-1', "'-1"],
    ['@SUM(A1)', "'@SUM(A1)"],
    ['\uff1dHYPERLINK("x")', `"'\uff1dHYPERLINK(""x"")"`],
    ['\uff0b1', "'\uff0b1"],
    ['\uff0d1', "'\uff0d1"],
    ['\uff20SUM(A1)', "'\uff20SUM(A1)"],
    ['\ufe66cmd', "'\ufe66cmd"],
    ['   =1+1', "'   =1+1"],
    ['\u3000=1+1', "'\u3000=1+1"],
    ['\u00a0+1', "'\u00a0+1"],
    ['\u2212 1', "'\u2212 1"],
  ])('prefixes %j, which a spreadsheet could read as a formula, with an apostrophe', (value, cell) => {
    expect(csvCell(value)).toBe(cell);
  });

  it('prefixes a formula behind a tab or an invisible character, escaped as on a terminal', () => {
    expect(csvCell('\t=1+1')).toBe("'\\x09=1+1");
    expect(csvCell('\u200b=1+1')).toBe("'\\u200b=1+1");
    expect(csvCell('\u00ad\u2062=1+1')).toBe("'\\xad\\u2062=1+1");
    // Judged on the value as given too, whether or not the terminal escapes rewrite the character
    expect(csvCell('\u2064=1+1').startsWith("'")).toBe(true);
  });

  it.each([
    ['plain text', 'plain text'],
    ['a = b', 'a = b'],
    ['DSR-1042', 'DSR-1042'],
    ['', ''],
  ])('leaves %j as it is', (value, cell) => {
    expect(csvCell(value)).toBe(cell);
  });

  it('leaves numbers, negative ones too, as numbers', () => {
    expect(csvRow([-3, 2.5, true, null])).toBe('-3,2.5,true,\r\n');
  });
});
