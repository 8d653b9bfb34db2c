// Declares the embedded text import of common.js (see ../assets.ts).
declare const text: string;
export default text;
