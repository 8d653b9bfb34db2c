/**
 * CSV (RFC 4180) for the history export. Every cell is quoted, quotes doubled, so commas,
 * quotes and newlines stay inside their cell; a text cell that a spreadsheet would read as a
 * formula (starting with =, +, -, @, tab or carriage return) gets a leading apostrophe.
 */
const FORMULA_START = /^[=+\-@\t\r]/;

export function csvCell(value: string | number | null): string {
  if (value === null) return "";
  if (typeof value === "number") return String(value);
  const text = FORMULA_START.test(value) ? `'${value}` : value;
  return `"${text.replace(/"/g, '""')}"`;
}

export function csvLine(cells: (string | number | null)[]): string {
  return `${cells.map(csvCell).join(",")}\r\n`;
}
