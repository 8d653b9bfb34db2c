// Declares the embedded text import of gallery.js (see ../assets.ts).
declare const text: string;
export default text;
