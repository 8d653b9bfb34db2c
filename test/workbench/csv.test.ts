/** The history CSV's cells: quoted, quotes doubled, formula starts neutralised. */
import { expect, test } from "bun:test";
import { csvCell, csvLine } from "../../src/workbench/csv";

test("text is quoted with quotes doubled; commas and line breaks stay inside the cell", () => {
  expect(csvCell('say "hi", then\nleave')).toBe('"say ""hi"", then\nleave"');
  expect(csvCell(null)).toBe("");
  expect(csvCell(-3)).toBe("-3");
  expect(csvLine(["a", 1, null])).toBe('"a",1,\r\n');
});

test("a text cell a spreadsheet would run as a formula gets a leading apostrophe", () => {
  for (const start of ["=", "+", "-", "@", "\t", "\r"]) expect(csvCell(`${start}SUM(A1)`)).toBe(`"'${start}SUM(A1)"`);
  expect(csvCell("a=b")).toBe('"a=b"');
});
