// Declares the embedded text import of playground.js (see ../assets.ts).
declare const text: string;
export default text;
